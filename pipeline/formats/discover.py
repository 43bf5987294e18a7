"""Input discovery, format sniffing and the reader registry.

``read_file(path, fmt, env_hint)`` is the one entry point the parse stage uses: it never raises
for bad input. An empty, binary, non-UTF-8 or unrecognised file becomes exactly one
:class:`~pipeline.core.records.QuarantineRow`; a reader that fails part-way keeps what it already
yielded and adds one quarantine row for the rest (nothing is lost silently).
Two refinements of "non-UTF-8": a JSONL file loses only its lines with invalid bytes (one
``not_utf8`` row each, the other lines are read), and a UTF-16 file is named as such (with the
command that converts it) instead of being called binary for its NUL bytes.

Formats (``--format`` / ``parse.format`` names): ``skillrl_txt`` (ALFWorld/WebShop rollout dumps),
``skillrl_search_txt``, ``react_alfworld_json``, ``react_webshop_log``, ``reflexion_txt``
(ALFWorld/WebShop few-shot failures), ``reflexion_hotpotqa``, ``chat_json`` (messages /
ShareGPT conversations, JSON or JSONL), ``skillrl_memory_json``, ``skillrl_bank_json`` (recognised,
quarantined ``skill_bank_not_trajectories``) and ``byo_json`` (the reference's parse output).
"""
from __future__ import annotations

import codecs
import heapq
import os
import re
import stat
from dataclasses import dataclass
from itertools import groupby
from typing import Callable, Iterator

from pipeline.core.records import QuarantineRow, Trajectory
from pipeline.formats import (byo_json, chat_json, react_alfworld_json, react_webshop_log, reflexion_hotpotqa, reflexion_txt,
               skillrl_memory_json, skillrl_search_txt, skillrl_txt)
from pipeline.formats.common import ENCODING, UTF16_BOMS, Source, bad, utf16_encoding

#: A reader: ``read(src)`` -> trajectories and quarantine rows (see :mod:`pipeline.formats`).
Reader = Callable[[Source], Iterator["Trajectory | QuarantineRow"]]

#: format name -> reader.
READERS: dict[str, Reader] = {
    "skillrl_txt": skillrl_txt.read,
    "react_alfworld_json": react_alfworld_json.read,
    "reflexion_txt": reflexion_txt.read,
    "react_webshop_log": react_webshop_log.read,
    "chat_json": chat_json.read,
    "skillrl_search_txt": skillrl_search_txt.read,
    "reflexion_hotpotqa": reflexion_hotpotqa.read,
    "skillrl_memory_json": skillrl_memory_json.read,
    "skillrl_bank_json": skillrl_memory_json.read_bank,
    "byo_json": byo_json.read,
}

HEAD_BYTES = 64 * 1024
#: Files up to this size are read once (check + sniff + parse share the bytes); larger ones are
#: checked in 1 MB blocks first so a bad byte deep in a huge file is found with its line.
WHOLE_READ_BYTES = 16 << 20
_SKIP_NAMES = re.compile(r"^(SOURCE|README)(\.[A-Za-z0-9]+)?$", re.IGNORECASE)


def input_root(input_path: str) -> str:
    """The folder input URIs are relative to: ``input_path`` itself, or a file's folder."""
    return input_path if os.path.isdir(input_path) else os.path.dirname(input_path)


def file_groups(files: list[str]) -> list[list[str]]:
    """``files`` (sorted by path) cut into groups of consecutive files of one folder: the unit
    parse selects in and the shard plan never splits (an environment instance stays whole)."""
    return [list(g) for _, g in groupby(files, key=os.path.dirname)]


def list_input_files(path: str) -> list[str]:
    """Input files under ``path``: the file itself, or every file below a folder.

    Recursive, sorted by path, skipping hidden files and folders (``.name``) and documentation
    (``SOURCE.md``, ``README*``). Paths keep the form of ``path`` (relative stays relative), so
    trajectory ids do not depend on where the checkout lives.

    Symbolic links are followed, to files and to folders (a folder of links to dataset folders
    is a normal input). Each real folder and each real file is listed once: the plain tree is
    walked first, then the links (in path order), and a link to a folder or file already reached
    (a link back to an enclosing folder, i.e. a cycle, or a second path to the same data) adds
    nothing, so nothing is read twice (two plain hard-linked names of one file are both listed:
    the parse stage quarantines the second read as ``duplicate_trajectory``). A dangling link (or one whose target cannot be examined)
    is listed anyway, so that :func:`read_file` turns it into an ``unreadable_file`` quarantine
    row instead of it vanishing without notice; so is a folder below ``path`` that cannot be listed
    (permissions): its files cannot be named, so the folder itself becomes one
    ``unreadable_file`` row. Entries that are neither files nor folders (FIFOs, sockets, devices)
    are not inputs and are skipped.

    Raises ``FileNotFoundError`` when ``path`` does not exist (or is a dangling link).
    """
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        kind = "is a dangling symlink" if os.path.islink(path) else "does not exist"
        raise FileNotFoundError(f"input path {kind}: {path}")
    root = os.stat(path)
    walk = _Walk(found=[], links=[], seen_dirs={(root.st_dev, root.st_ino)}, seen_files=None)
    walk.scan(path, root.st_dev)
    heapq.heapify(walk.links)
    while walk.links:  # after the plain tree, so a file keeps its own path rather than a link's
        walk.follow(heapq.heappop(walk.links))
    return sorted(walk.found)


@dataclass
class _Walk:
    """State of one :func:`list_input_files` walk. Real objects are keyed ``(st_dev, st_ino)``."""
    found: list[str]
    links: list[str]  # symlinks met in the tree, followed after it (a heap: path order)
    seen_dirs: set
    seen_files: set | None  # (dev, inode) of listed files; None until a link to a file is met (saves
    #                         ~15 MB per 100,000 plain files, which forked workers would inherit)

    def scan(self, folder: str, dev: int) -> None:
        """Add the plain files below ``folder`` (on device ``dev``) and queue its links.

        Classifies entries from ``scandir`` (no ``stat`` per plain file: 12,000 files in the
        benchmark tree; a plain file's key is its listing's inode on the folder's device)."""
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:  # no permission (or gone): listed, so read_file quarantines it as unreadable
            self.found.append(folder)
            return
        for e in entries:
            if e.name.startswith("."):
                continue
            try:
                if e.is_symlink():
                    heapq.heappush(self.links, e.path)
                elif e.is_dir(follow_symlinks=False):
                    st = e.stat(follow_symlinks=False)
                    if (st.st_dev, st.st_ino) not in self.seen_dirs:  # a bind mount may repeat one
                        self.seen_dirs.add((st.st_dev, st.st_ino))
                        self.scan(e.path, st.st_dev)
                elif e.is_file(follow_symlinks=False) and not _SKIP_NAMES.match(e.name):
                    if self.seen_files is not None:  # tracked once a link to a file was met
                        key = (dev, e.inode())
                        if key in self.seen_files:
                            continue
                        self.seen_files.add(key)
                    self.found.append(e.path)
            except OSError:  # vanished while listing: nothing to read
                continue

    def follow(self, link: str) -> None:
        """Take one symlink: enter a new folder, list a new file, or list a dangling link."""
        try:
            st = os.stat(link)  # follows the link
        except OSError:  # dangling, a loop of links, or no permission: read_file reports it
            if not _SKIP_NAMES.match(os.path.basename(link)):
                self.found.append(link)
            return
        key = (st.st_dev, st.st_ino)
        if stat.S_ISDIR(st.st_mode):
            if key not in self.seen_dirs:
                self.seen_dirs.add(key)
                self.scan(link, st.st_dev)
        elif stat.S_ISREG(st.st_mode) and not _SKIP_NAMES.match(os.path.basename(link)):
            if self.seen_files is None:  # first link to a file: key every file listed so far
                self.seen_files = set()
                for p in self.found:
                    try:
                        f = os.stat(p)
                    except OSError:  # a dangling link listed earlier
                        continue
                    self.seen_files.add((f.st_dev, f.st_ino))
            if key not in self.seen_files:
                self.seen_files.add(key)
                self.found.append(link)


def detect_format(path: str, head: bytes) -> str | None:
    """Format name of a file from its first bytes (content sniffing; the name is not trusted).

    Returns a key of :data:`READERS`, or ``None`` for binary, undecodable or unknown content.
    """
    if not head.strip() or b"\x00" in head:
        return None
    text = head.decode("utf-8", errors="ignore").lstrip("\ufeff")
    start = text.lstrip()[:1]
    if start in "{[":
        if start == "{" and re.search(r'"(general_skills|task_specific_skills|query_type_skills)"\s*:', text):
            return "skillrl_bank_json"
        if start == "[" and re.search(r'"memory_id"\s*:', text) and re.search(r'"content"\s*:', text):
            return "skillrl_memory_json"
        if start == "[" and re.search(r'"trajectories"\s*:', text) and re.search(r'"env_id"\s*:', text):
            return "byo_json"
        if re.search(r'"(conversations|messages)"\s*:', text):
            return "chat_json"
        # ReAct prompt file: an object whose first value is a transcript string.
        if start == "{" and re.match(r'\s*\{\s*"[^"]*"\s*:\s*"', text) and "Your task is to:" in text:
            return "react_alfworld_json"
        return None
    if text.startswith("=== Trajectory for"):
        return "skillrl_txt"
    if "Your question:" in text and re.search(r"<(search|answer)>", text) \
            and re.search(r"^History:|^Action \d+:", text, re.M):
        return "skillrl_search_txt"
    if re.search(r"^-+ BEGIN (CORRECT|INCORRECT|HALTED) AGENTS", text, re.M) \
            or (re.search(r"^Question: ", text, re.M) and re.search(r"^Thought 1: ", text, re.M)):
        return "reflexion_hotpotqa"
    if re.search(r"^Step -?\d+ \| Action: ", text, re.M) or text.startswith("=== Trajectory for"):
        return "skillrl_txt"
    if re.search(r"^-{5,}\s*\n\d+\s*\nAction: reset", text, re.M):
        return "react_webshop_log"
    if "STATUS: FAIL" in text or (re.search(r"^> ", text, re.M) and "Your task is to:" in text) \
            or (text.startswith("Instruction:") and re.search(r"^Action: ", text, re.M)):
        return "reflexion_txt"
    return None


def _check_bytes(path: str, data: bytes) -> tuple[QuarantineRow | None, str]:
    """``(problem, text)`` for a whole small file: same reasons and lines as :func:`_check_text`."""
    if b"\x00" in data:
        return bad("binary_file", "file contains NUL bytes (binary data, not text)", path,
                   1 + data[:data.index(b"\x00")].count(b"\n")), ""
    try:
        text = data.decode(ENCODING)  # drops a leading BOM, like every reader's open_text
    except UnicodeDecodeError:
        return _check_text(path), ""  # the streaming check words the reason and finds the line
    if not text or text.isspace():  # == not text.strip(), without copying the text
        return bad("empty_file", "file is empty or whitespace only", path, 1), ""
    if "\r" in text:  # the same universal-newline translation as common.open_text
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return None, text


def _check_text(path: str) -> QuarantineRow | None:
    """Stream the file once: ``None`` if it is non-empty valid UTF-8 text, else the reason row."""
    decoder = codecs.getincrementaldecoder(ENCODING)()  # a BOM alone is an empty file
    line, seen_text = 1, False
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            if b"\x00" in block:
                return bad("binary_file", "file contains NUL bytes (binary data, not text)", path,
                           line + block[:block.index(b"\x00")].count(b"\n"))
            try:
                chunk = decoder.decode(block)  # always decode: every block must be checked
                seen_text = seen_text or bool(chunk.strip())
            except UnicodeDecodeError as e:
                return bad("not_utf8", f"invalid UTF-8 at byte {e.start} of a block: {e.reason}", path,
                           line + block[:e.start].count(b"\n"), block[max(0, e.start - 200):e.start].decode("utf-8", "replace"))
            line += block.count(b"\n")
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            return bad("not_utf8", "file ends inside a UTF-8 sequence", path, line)
    if not seen_text:
        return bad("empty_file", "file is empty or whitespace only", path, 1)
    return None


def _utf16_row(path: str, head: bytes) -> QuarantineRow | None:
    """A ``not_utf8`` row naming UTF-16 and its conversion, if ``head`` looks like UTF-16."""
    name = utf16_encoding(head)
    if name is None:
        return None
    how = "byte-order mark " + head[:2].hex(" ").upper() if head[:2] in UTF16_BOMS else "NUL every other byte"
    return bad("not_utf8", f"file looks like UTF-16 text ({how}), not UTF-8; convert it, e.g. "
               f"iconv -f {name} -t UTF-8 FILE > FILE.utf8", path, 1)


def _jsonl_text(path: str, fmt: str, head: bytes, data: bytes | None) -> str | None:
    """The text of a JSONL file that failed the strict UTF-8 or NUL-byte check, decoded with
    ``errors="surrogateescape"`` (each invalid byte becomes one character U+DC80..U+DCFF, so the
    chat reader quarantines just the lines holding one); ``None`` when the file is not JSONL.

    JSONL = ``fmt`` is ``chat_json`` (forced, or sniffed from ``head``) and the text passes
    :func:`chat_json.is_jsonl`, the same test the reader applies. ``data``: the whole file when
    already read (small files), else it is read here (the reader would read it whole anyway).
    Newlines are translated as :func:`common.open_text` does. Raises ``OSError`` like ``open``.
    """
    # NUL bytes make detect_format call the file binary: sniff around them (is_jsonl decides below)
    if fmt != "chat_json" and (fmt != "auto" or detect_format(path, head.replace(b"\x00", b"")) != "chat_json"):
        return None
    if data is not None:
        text = data.decode(ENCODING, errors="surrogateescape")
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
    else:
        with open(path, encoding=ENCODING, errors="surrogateescape") as f:
            text = f.read()
    stripped = text.lstrip(" \t\r\n")
    return text if stripped.startswith("{") and chat_json.is_jsonl(stripped) else None


def read_file(path: str, fmt: str = "auto", env_hint: str | None = None, success_threshold: float = 1.0,
              source_uri: str | None = None, digest=None) -> Iterator[Trajectory | QuarantineRow]:
    """Yield the trajectories of one input file, and quarantine rows for what could not be read.

    Args:
        path: a local file.
        fmt: a key of :data:`READERS`, or ``"auto"`` to sniff the content.
        env_hint: ``alfworld``/``webshop``/``search`` when the caller knows it; ``None``/``"auto"`` = detect.
        success_threshold: graded rewards (WebShop score, QA reward) >= this are successes.
        source_uri: URI to record on trajectories instead of ``path`` (:attr:`common.Source.uri`);
            quarantine rows name ``path`` (the caller rebases them).
        digest: optional ``hashlib`` object fed the file's bytes once they are read (so the parse
            stage hashes its inputs without reading them a second time); left partial when the
            file cannot be read.

    Invalid UTF-8 quarantines the whole file (``not_utf8``, with the first bad line), except in
    JSONL (see :func:`_jsonl_text`), where only the lines holding invalid bytes are quarantined
    (``not_utf8``, that line, ``raw`` decoded with replacement characters) and every other line is
    read. NUL bytes likewise quarantine the whole file (``binary_file``), except the JSONL lines
    that hold them (``binary_file``, that line). A file that looks like UTF-16 (:func:`common.utf16_encoding`) is ``not_utf8`` with a detail
    naming the ``iconv`` conversion, not ``binary_file``.

    Every reader sees the text without a leading UTF-8 BOM (decoded with ``common.ENCODING`` here
    and by ``common.open_text`` when a reader opens a large file itself); line numbers count as
    if it were not there.

    Raises ``ValueError`` only for an unknown ``fmt`` name (a configuration error, not bad input).
    """
    if fmt != "auto" and fmt not in READERS:
        raise ValueError(f"unknown input format {fmt!r}; known: auto, {', '.join(READERS)}")
    hint = None if env_hint in (None, "", "auto") else env_hint
    try:
        loaded = _load(path, fmt, digest)
    except OSError as e:
        yield bad("unreadable_file", _unreadable_detail(path, e), path)
        return
    if loaded.problem:
        yield loaded.problem
        return
    fmt = loaded.fmt
    if fmt == "auto":
        fmt = detect_format(path, loaded.head) or ""
        if not fmt:
            yield bad("unrecognised_format", "content matches no known input format", path, 1)
            return
    src = Source(path, hint, success_threshold, source_uri, loaded.text, loaded.escaped)
    yield from _run_reader(fmt, src)


def _unreadable_detail(path: str, e: OSError) -> str:
    """Detail of an ``unreadable_file`` row: ``e`` as ``"<type>: <message>"``; for a folder that
    :func:`list_input_files` could not list (opening it gave ``IsADirectoryError``), the error of
    listing it again, saying that none of its files was read."""
    if not os.path.isdir(path):
        return f"{type(e).__name__}: {e}"
    try:
        os.scandir(path).close()  # raises the listing's error (else it became readable since)
    except OSError as listing:
        e = listing
    return f"folder cannot be listed, so none of its files was read: {type(e).__name__}: {e}"


@dataclass
class _Loaded:
    """A file as :func:`_load` found it: ``problem`` (the row that replaces it, else ``None``),
    its first :data:`HEAD_BYTES` bytes, its text when read whole (``escaped``: decoded with
    ``surrogateescape``, see :func:`_jsonl_text`) and the format to read it with."""
    problem: QuarantineRow | None
    head: bytes
    text: str | None
    escaped: bool
    fmt: str


def _load(path: str, fmt: str, digest) -> _Loaded:
    """Read and check ``path``: whole when small (check, sniff and parse share the bytes), else
    streamed (:func:`_check_text`); feeds ``digest``; rescues UTF-16 and JSONL files from a bare
    ``binary_file`` / ``not_utf8`` (see :func:`read_file`). Raises ``OSError`` like ``open``."""
    text = data = None
    with open(path, "rb", buffering=0) as f:  # unbuffered: one read of the whole file, no isatty probe
        if os.fstat(f.fileno()).st_size <= WHOLE_READ_BYTES:
            data = f.readall()
    if data is not None:
        if digest is not None:
            digest.update(data)
        problem, text = _check_bytes(path, data)
        head = data[:HEAD_BYTES]
    else:
        problem = _check_text(path)
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES)
            if digest is not None:  # large files only (> WHOLE_READ_BYTES): one more pass
                digest.update(head)
                while block := f.read(1 << 20):
                    digest.update(block)
    loaded = _Loaded(problem, head, text or None, False, fmt)
    if problem is not None and problem.reason in ("binary_file", "not_utf8"):  # rare: not the hot path
        utf16 = _utf16_row(path, head)
        if utf16 is not None:
            loaded.problem = utf16
        else:  # a JSONL file loses only its lines with NUL or invalid bytes, not the whole file
            lenient = _jsonl_text(path, fmt, head, data)
            if lenient is not None:
                loaded = _Loaded(None, head, lenient, True, "chat_json")
    return loaded


def _run_reader(fmt: str, src: Source) -> Iterator[Trajectory | QuarantineRow]:
    """Run reader ``fmt`` on ``src``: what it yields, then a ``reader_error`` row if it raised
    (what it already yielded is kept) or a ``no_records`` row if it yielded nothing."""
    n = 0
    try:
        for item in READERS[fmt](src):
            n += 1
            yield item
    except Exception as e:  # a reader bug or an unforeseen shape must not end the run
        yield bad("reader_error", f"{fmt}: {type(e).__name__}: {e}", src.path)
        return
    if n == 0:
        yield bad("no_records", f"no {fmt} records found", src.path, 1)
