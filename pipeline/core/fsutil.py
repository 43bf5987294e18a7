"""Small file-system helpers used everywhere: atomic writes and streamed SHA-256.

Atomic means a reader (or a process killed half-way) sees the old file/folder or the new one,
never a partial one: data is written to a temporary name in the same folder, then renamed
(``os.replace`` is atomic within one file system, POSIX ``rename(2)``).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from typing import Any

CHUNK = 1 << 20  # bytes read at a time when hashing


def temp_name(path: str | os.PathLike) -> str:
    """A unique sibling name of ``path`` for a temporary file or folder (``<path>.tmp-<pid>-<hex>``)."""
    return f"{os.fspath(path)}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def atomic_write(path: str | os.PathLike, data: bytes | str) -> str:
    """Write ``data`` (text is UTF-8 encoded) to ``path`` atomically; returns ``path`` as a str.

    The parent folder must exist. On any error the temporary file is removed and the old
    ``path`` (if any) is left as it was. Raises ``OSError`` from the file system."""
    path = os.fspath(path)
    tmp = temp_name(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        with open(tmp, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> str:
    """:func:`atomic_write` of ``obj`` as JSON (UTF-8, non-ASCII kept, ``default=str``)."""
    return atomic_write(path, json.dumps(obj, indent=indent, ensure_ascii=False, default=str))


def publish_dir(tmp: str | os.PathLike, dest: str | os.PathLike) -> bool:
    """Rename the finished folder ``tmp`` to ``dest`` (atomic publication of a folder).

    When ``dest`` already exists (another process published the same content first) ``tmp`` is
    removed and ``False`` is returned; ``True`` when this call published it."""
    try:
        os.rename(tmp, dest)
        return True
    except OSError:
        if not os.path.isdir(dest):
            raise
        shutil.rmtree(tmp, ignore_errors=True)
        return False


def sha256_file(path: str | os.PathLike, chunk: int = CHUNK) -> str:
    """Hex SHA-256 of a file's bytes, streamed (files can be large). Raises ``OSError``."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
