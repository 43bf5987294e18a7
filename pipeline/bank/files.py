"""Where the files of the bank history live (:mod:`pipeline.bank.store`): a local folder or a
prefix on object storage (``s3://bucket/prefix/banks``), behind one small interface.

Paths are relative to the ``banks`` folder (``"HEAD"``, ``"history.jsonl"``,
``"<version>/bank.json"``). :class:`LocalFiles` keeps the guarantees of a local filesystem: a
version folder appears whole (directory rename), a history line is one ``write`` to a file
opened for appending. Object storage has neither rename nor append, so :class:`RemoteFiles`
rewrites ``history.jsonl`` whole and does every write under a lease on ``banks/_lock.json``
(:mod:`pipeline.core.lease`): two runs registering at the same moment take turns instead of
losing one's history line.
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import Iterator

from pipeline.core.fsutil import atomic_write, publish_dir, temp_name

LOCK_FILE = "_lock.json"
LOCK_WAIT_S = 120.0  # how long a writer waits for another one's lease on the bank history


class LocalFiles:
    """The bank files under the local folder ``folder``."""

    def __init__(self, folder: str):
        self.dir = folder

    def where(self, rel: str = "") -> str:
        """The path of ``rel`` (the folder itself for ``""``), for messages."""
        return os.path.join(self.dir, rel) if rel else self.dir

    def read(self, rel: str) -> str | None:
        """The text of ``rel``, or ``None`` when it does not exist."""
        try:
            with open(self.where(rel), encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def exists(self, rel: str) -> bool:
        """Whether ``rel`` exists."""
        return os.path.exists(self.where(rel))

    def create(self, rel: str, text: str) -> bool:
        """Write ``<folder>/<name>`` (``rel``) unless that folder exists: it appears whole, with the
        file in it (a hidden temporary folder renamed into place). False when another writer
        made the folder first (then nothing is written)."""
        folder, name = rel.split("/", 1)
        os.makedirs(self.dir, exist_ok=True)
        tmp = temp_name(os.path.join(self.dir, "." + folder))  # hidden: never listed as a version
        os.makedirs(tmp)
        with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
            f.write(text)
        return publish_dir(tmp, self.where(folder))

    def append(self, rel: str, line: str) -> None:
        """Add ``line`` (one line, newline included) to the end of ``rel``: one ``write``."""
        os.makedirs(self.dir, exist_ok=True)
        with open(self.where(rel), "a", encoding="utf-8") as f:
            f.write(line)

    def replace(self, rel: str, text: str) -> None:
        """Make ``text`` the content of ``rel`` (atomic rename)."""
        atomic_write(self.where(rel), text)

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Nothing to hold on a local folder (see the module docstring)."""
        yield


class RemoteFiles:
    """The bank files under ``path`` (no protocol) on the fsspec filesystem ``fs``."""

    def __init__(self, fs, path: str):
        self.fs, self.dir = fs, path.rstrip("/")

    def _path(self, rel: str) -> str:
        return f"{self.dir}/{rel}" if rel else self.dir

    def where(self, rel: str = "") -> str:
        """The full URI of ``rel`` (``s3://...``), for messages."""
        return self.fs.unstrip_protocol(self._path(rel))

    def read(self, rel: str) -> str | None:
        """The text of ``rel``, or ``None`` when it does not exist (one GET)."""
        try:
            return self.fs.cat_file(self._path(rel)).decode("utf-8")
        except FileNotFoundError:
            return None

    def exists(self, rel: str) -> bool:
        """Whether ``rel`` exists (asked of the store, never of a cached listing)."""
        self.fs.invalidate_cache(self._path(rel))
        return self.fs.exists(self._path(rel))

    def create(self, rel: str, text: str) -> bool:
        """Write ``rel`` unless it exists; False when it does. Call inside :meth:`writing`."""
        if self.exists(rel):
            return False
        self.fs.pipe_file(self._path(rel), text.encode("utf-8"))
        return True

    def append(self, rel: str, line: str) -> None:
        """Add ``line`` to the end of ``rel`` by rewriting it whole (one GET, one PUT). Call inside
        :meth:`writing`."""
        self.fs.pipe_file(self._path(rel), ((self.read(rel) or "") + line).encode("utf-8"))

    def replace(self, rel: str, text: str) -> None:
        """Make ``text`` the content of ``rel`` (one PUT)."""
        self.fs.pipe_file(self._path(rel), text.encode("utf-8"))

    @contextlib.contextmanager
    def writing(self, wait_s: float | None = None) -> Iterator[None]:
        """Hold the lease on ``banks/_lock.json`` while writing, waiting for another writer's
        up to ``wait_s`` seconds (default ``$SKILLPIPE_BANK_LOCK_S`` or :data:`LOCK_WAIT_S`);
        then :class:`~pipeline.core.waits.WaitTimeout` names the holder."""
        from pipeline.core.lease import Lease, LeaseHeld
        from pipeline.core.waits import WaitTimeout, seconds_from_env
        wait_s = wait_s or seconds_from_env("SKILLPIPE_BANK_LOCK_S", LOCK_WAIT_S)
        end = time.monotonic() + wait_s
        while True:
            try:
                lease = Lease(self.fs, self._path(LOCK_FILE)).acquire()  # takes it or raises at once
                break
            except LeaseHeld as e:
                if time.monotonic() >= end:
                    raise WaitTimeout(f"the writer of {self.where()}", e.holder.get("pid"), wait_s, str(e)) from None
                time.sleep(0.5)
        try:
            yield
        finally:
            lease.release()


def bank_files(root: str) -> LocalFiles | RemoteFiles:
    """The files of ``<root>/banks``: ``root`` is a local folder (or ``file://`` URI), or an
    object-storage URI (:func:`pipeline.core.storage.is_remote`), opened with the run's storage
    options (:func:`pipeline.core.storage.remote_fs`)."""
    from pipeline.core.storage import is_remote, remote_fs
    if is_remote(root):
        fs, base = remote_fs(root)
        return RemoteFiles(fs, f"{base}/banks")
    local = root[len("file://"):] if root.startswith("file://") else root
    return LocalFiles(os.path.join(os.path.abspath(local), "banks"))
