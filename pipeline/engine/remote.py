"""Where a run's artifacts live: a local folder, or any fsspec URI (``s3://bucket/prefix``, ``gs://``...).

The stages themselves only ever read and write a **local** folder (Parquet through pyarrow, plain
``os`` calls): :func:`open_root` maps the ``--root`` the user gave to that local folder and to the
:class:`StageHooks` the runner calls around every stage (or shard of a stage).

* A local root (a path, or ``file://``): the local folder is the root itself and the hooks do
  nothing.
* An object-storage root: the local folder is a working **mirror**
  (``$SKILLPIPE_CACHE_DIR/mirror/<hash of the root URI>``, default ``~/.cache/skillpipe``) and
  :class:`RemoteHooks` keep it in step with the remote run:

  - ``before``: take the stage's lease (:mod:`pipeline.core.lease`), pull every stage manifest of
    the run and the data files of what the stage reads (its ancestors; one shard of a sharded
    ancestor when a shard is given) and of its own previous artifact, each checked against the
    SHA-256 the remote manifest records; import the stage's LLM cache parts.
  - ``after``: publish the artifact folder with the **manifest-last commit**: its files go under
    ``<folder>/_attempts/<attempt id>/``, then one PUT writes ``<folder>/_manifest.json`` naming
    them. No rename is needed; readers trust only the manifest, so an attempt killed half-way
    is never read, and its files are removed at the start of the next attempt (under the lease).

An artifact folder is ``<stage>`` or ``<stage>/<shard>``: any folder with a ``_manifest.json``
whose ``files`` list names its files relative to it. The remote manifest is the local one plus
one key, ``attempt`` (``{"id", "files": {name: [bytes, sha256]}}``), which is dropped again when
the manifest is pulled, so fingerprints and ``content_sha256`` are those of a local run.

Storage options (endpoint, credentials) come from the usual places of the filesystem's library
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, the AWS shared config file for s3fs) and from
``$SKILLPIPE_STORAGE_OPTIONS``, a JSON object passed to ``fsspec.url_to_fs`` (:mod:`pipeline.core.storage`) (e.g.
``{"client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"}}``).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
import uuid
from typing import Any, Callable, Iterator

from pipeline.core.fsutil import atomic_write, atomic_write_json, sha256_file, temp_name
from pipeline.core.layout import ARTIFACT_MANIFEST, SHARD_PREFIX, run_dir
from pipeline.core.storage import is_remote, remote_fs

log = logging.getLogger(__name__)

ENV_CACHE_DIR = "SKILLPIPE_CACHE_DIR"
ENV_CKPT_ANSWERS = "SKILLPIPE_LLM_CHECKPOINT_ANSWERS"
ENV_CKPT_S = "SKILLPIPE_LLM_CHECKPOINT_S"
CKPT_ANSWERS = 20  # new LLM answers that trigger a cache checkpoint ...
CKPT_S = 30.0  # ... or seconds since the last one, whichever comes first
MANIFEST = ARTIFACT_MANIFEST  # the name is declared in pipeline.core.layout
ATTEMPTS_DIR = "_attempts"
LLM_PARTS_DIR = "_llm_cache"
LOCKS_DIR = "_locks"
ATTEMPT_KEY = "attempt"
RUN_FILE_DIRS = ("_plan",)  # run-level files (the shard plan), mirrored as plain files


class StageHooks:
    """Called by the runner around each unit of work of a run.

    ``stage``: the stage name; ``shard``: ``"shard-NNNNN"`` for one shard of a sharded stage, or
    ``None`` for the stage as a whole (an unsharded stage, or the collect step of a sharded one).
    The local-root implementation does nothing.
    """

    def before(self, stage: str, shard: str | None = None) -> None:
        """Make the inputs of ``stage`` (``shard``) and its previous artifact, if any, readable locally."""

    def after(self, stage: str, shard: str | None = None) -> None:
        """Publish the artifact just written for ``stage`` (``shard``)."""

    def uri(self, local_path: str) -> str:
        """Where others find the artifact folder ``local_path``: the path itself for a local root."""
        return local_path

    def close(self) -> None:
        """End of the run (also after an error): flush and release what is still held."""


def mirror_dir(uri: str) -> str:
    """The local working mirror of ``uri``: ``$SKILLPIPE_CACHE_DIR/mirror/<16 hex of sha256(uri)>``
    (default cache dir ``~/.cache/skillpipe``)."""
    base = os.environ.get(ENV_CACHE_DIR) or os.path.join(os.path.expanduser("~"), ".cache", "skillpipe")
    return os.path.join(base, "mirror", hashlib.sha256(uri.rstrip("/").encode()).hexdigest()[:16])


def new_attempt_id() -> str:
    """A unique, time-ordered attempt id: ``<UTC yyyymmddThhmmssZ>-<8 hex>``."""
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:8]}"


def strip_attempt(manifest: dict[str, Any] | None) -> dict[str, Any] | None:
    """The manifest as a local run writes it (without the remote ``attempt`` key)."""
    return None if manifest is None else {k: v for k, v in manifest.items() if k != ATTEMPT_KEY}


def read_local_manifest(folder: str) -> dict[str, Any] | None:
    """The manifest in ``folder``, or ``None`` when absent or unreadable."""
    try:
        with open(os.path.join(folder, MANIFEST), encoding="utf-8") as f:
            m = json.load(f)
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) else None


def _local_files(folder: str, keep_subfolders: bool) -> set[str]:
    """Files under ``folder`` (relative, ``/``-separated) except the manifest, temporary files,
    and, with ``keep_subfolders``, anything inside ``shard-*`` (artifact folders of their own)."""
    found = set()
    for dirpath, dirnames, filenames in os.walk(folder):
        rel_dir = os.path.relpath(dirpath, folder).replace(os.sep, "/")
        if rel_dir == "." and keep_subfolders:
            dirnames[:] = [d for d in dirnames if not d.startswith(SHARD_PREFIX)]
        for f in filenames:
            name = f if rel_dir == "." else f"{rel_dir}/{f}"
            if name != MANIFEST and ".tmp-" not in f:
                found.add(name)
    return found


def _matches(path: str, size: int, sha: str, check_sha: bool) -> bool:
    if not os.path.isfile(path) or os.path.getsize(path) != size:
        return False
    return not check_sha or sha256_file(path) == sha


def _stored_at(info: dict[str, Any], name: str, entry: list) -> str:
    """Where file ``name`` of a committed folder is stored, relative to the folder: the location
    its entry records (``[bytes, sha256, where]``), else ``_attempts/<attempt id>/<name>``."""
    return entry[2] if len(entry) > 2 else f"{ATTEMPTS_DIR}/{info.get('id')}/{name}"


def pull_folder(fs, rpath: str, manifest: dict[str, Any] | None, local: str, data: bool = True,
                skip: tuple[str, ...] = ()) -> int:
    """Make the local artifact folder ``local`` hold the remote one at ``rpath`` whose remote
    manifest is ``manifest`` (``None``: there is none; the local manifest is removed so the
    folder reads as incomplete). Returns the number of files downloaded.

    With ``data`` the files the manifest names are fetched (from its attempt prefix, or from
    the location the manifest records for a file, e.g. a shard's own attempt), except those
    inside the subfolders named in ``skip`` (shard folders pulled on their own); a local file
    of the right size and SHA-256 is kept (when the local manifest already equals the remote one,
    the right size is enough) and local files it does not name are removed. Without ``data`` only
    the manifest is written, and local data files of another version are removed. Nothing is
    touched when the folder is already up to date; otherwise the manifest is removed first and
    written last. Raises ``OSError`` when a downloaded file does not match its recorded SHA-256."""
    if manifest is None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(local, MANIFEST))
        return 0
    same = read_local_manifest(local) == strip_attempt(manifest)
    info = manifest.get(ATTEMPT_KEY) or {}
    files: dict[str, list] = info.get("files") or {}
    wanted = {n: v for n, v in files.items() if n.split("/", 1)[0] not in skip} if data else {}
    todo = [(n, v) for n, v in wanted.items() if not _matches(os.path.join(local, n), v[0], v[1], not same)]
    kept = set(wanted) | {n for n in files if n.split("/", 1)[0] in skip}
    strays = sorted(_local_files(local, True) - kept) if os.path.isdir(local) and (data or not same) else []
    if same and not todo and not strays:
        return 0
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(local, MANIFEST))
    for name in strays:
        os.remove(os.path.join(local, name))
    _download(fs, [(f"{rpath}/{_stored_at(info, n, v)}", os.path.join(local, n), v) for n, v in todo])
    os.makedirs(local, exist_ok=True)
    atomic_write_json(os.path.join(local, MANIFEST), strip_attempt(manifest))
    return len(todo)


def _download(fs, items: list[tuple[str, str, list]]) -> None:
    """Fetch ``(remote path, local path, [size, sha256])`` items (concurrently where the
    filesystem can), check each, then move it into place. Raises ``OSError`` on a mismatch."""
    if not items:
        return
    tmps = []
    for _, lpath, _ in items:
        os.makedirs(os.path.dirname(lpath), exist_ok=True)
        tmps.append(temp_name(lpath))
    try:
        fs.get([r for r, _, _ in items], tmps)
        for (rpath, lpath, (size, sha, *_)), tmp in zip(items, tmps):
            if os.path.getsize(tmp) != size or sha256_file(tmp) != sha:
                raise OSError(f"{rpath}: downloaded file does not match its manifest (size {size}, sha256 {sha[:12]})")
            os.replace(tmp, lpath)
    finally:
        for tmp in tmps:
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)


class RemoteRun:
    """The remote side of run ``run_id`` under ``base`` on the fsspec filesystem ``fs``: paths,
    listings, manifests, publication and the LLM cache parts of its artifact folders. ``rel``
    arguments are artifact folders relative to the run (``"memory"``, ``"memory/shard-00003"``)."""

    def __init__(self, fs, base: str, run_id: str):
        self.fs, self.run_id = fs, run_id
        self.run = f"{base}/runs/{run_id}"

    def path(self, *parts: str) -> str:
        """The filesystem path (no protocol) of ``parts`` joined under the run: ``<base>/runs/<run_id>/...``."""
        return "/".join((self.run,) + parts)

    def uri(self, rel: str) -> str:
        """The full URI (with protocol, e.g. ``s3://``) of the run's folder ``rel``."""
        return self.fs.unstrip_protocol(self.path(rel))

    def listing(self, stage: str) -> tuple[bool, list[str]]:
        """``(stage folder has a manifest, names of its shard folders)``; one LIST call."""
        try:
            names = [n.rstrip("/").rsplit("/", 1)[-1] for n in self.fs.ls(self.path(stage), detail=False)]
        except FileNotFoundError:
            return False, []
        return MANIFEST in names, sorted(n for n in names if n.startswith(SHARD_PREFIX))

    def manifests(self, rels: list[str]) -> dict[str, dict[str, Any]]:
        """The complete remote manifests among ``rels`` (one batched GET); others are left out."""
        if not rels:
            return {}
        blobs = self.fs.cat([self.path(r, MANIFEST) for r in rels], on_error="omit")
        out = {}
        for r in rels:
            try:
                m = json.loads(blobs[self.path(r, MANIFEST)])
            except (KeyError, ValueError):
                continue
            if isinstance(m, dict) and m.get("status") == "complete" and ATTEMPT_KEY in m:
                out[r] = m
        return out

    def publish(self, local: str, rel: str, manifest: dict[str, Any], attempt: str,
                shard_manifests: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
        """Upload the files ``manifest`` names from the local folder ``local`` under the attempt
        prefix, then write the remote manifest (one PUT, last); returns it.

        A file ``shard-NNNNN/<name>`` (a sharded stage's manifest lists its shards' files) that
        the shard's committed manifest (``shard_manifests[shard]``) holds with the same size and
        SHA-256 is not uploaded again: its entry records where the shard stored it. Raises
        ``OSError`` (e.g. ``FileNotFoundError`` for a listed file that is missing locally)."""
        files: dict[str, list] = {}
        for n in sorted(manifest.get("files", [])):
            entry = [os.path.getsize(os.path.join(local, n)), sha256_file(os.path.join(local, n))]
            head, _, rest = n.partition("/")
            shard_m = (shard_manifests or {}).get(head) if rest else None
            info = (shard_m or {}).get(ATTEMPT_KEY) or {}
            theirs = (info.get("files") or {}).get(rest)
            files[n] = entry + [f"{head}/{_stored_at(info, rest, theirs)}"] if theirs and theirs[:2] == entry else entry
        uploads = [n for n, v in files.items() if len(v) == 2]
        if uploads:
            self.fs.put([os.path.join(local, n) for n in uploads],
                        [self.path(rel, ATTEMPTS_DIR, attempt, n) for n in uploads])
        remote = dict(manifest, **{ATTEMPT_KEY: {"id": attempt, "files": files}})
        self.fs.pipe_file(self.path(rel, MANIFEST), json.dumps(remote, indent=2, ensure_ascii=False,
                                                               default=str).encode("utf-8"))
        return remote

    def gc_attempts(self, rel: str, keep: str | None) -> list[str]:
        """Remove the attempt prefixes of ``rel`` other than ``keep`` (the current manifest's);
        returns their ids. Only safe while holding the folder's lease."""
        try:
            ids = [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self.path(rel, ATTEMPTS_DIR), detail=False)]
        except FileNotFoundError:
            return []
        old = sorted(i for i in ids if i != keep)
        for i in old:
            self.fs.rm(self.path(rel, ATTEMPTS_DIR, i), recursive=True)
        return old

    def _part_paths(self, rel: str) -> list[str]:
        """Paths of the ``.parquet`` files in ``rel``'s cache part folder, in name order (fresh listing)."""
        folder = self.path(rel, LLM_PARTS_DIR)
        self.fs.invalidate_cache(folder)
        try:
            return sorted(p for p in self.fs.ls(folder, detail=False) if p.endswith(".parquet"))
        except FileNotFoundError:
            return []

    def cache_parts(self, rel: str, rounds: int = 3) -> list[bytes]:
        """The bytes of every LLM cache part of ``rel``, in name order.

        A part may vanish between the listing and the read: :meth:`compact_cache` on another
        worker wrote its entries to a new part first, then deleted it. The folder is then listed
        again and the parts not read yet are fetched, up to ``rounds`` listings in all."""
        got: dict[str, bytes] = {}
        for _ in range(rounds):
            todo = [p for p in self._part_paths(rel) if p not in got]
            blobs = self.fs.cat(todo, on_error="omit") if todo else {}
            got.update({p: b for p, b in blobs.items() if isinstance(b, bytes)})
            if all(p in got for p in todo):
                break
        return [got[p] for p in sorted(got)]

    def put_cache_part(self, rel: str, name: str, data: bytes) -> None:
        """Write ``data`` (an encoded LLM cache part) as ``rel/_llm_cache/<name>``, one PUT."""
        self.fs.pipe_file(self.path(rel, LLM_PARTS_DIR, name), data)

    def compact_cache(self, rel: str, name: str) -> int:
        """Merge the LLM cache parts of ``rel`` into the one part ``name``, one entry per key
        (:func:`pipeline.llm.cache.compact_entries`), and delete the merged parts; returns how
        many were deleted (0 with fewer than two readable parts). The merged part is written
        before anything is deleted, so a reader listing the folder meanwhile still finds every
        entry (:meth:`cache_parts`); a file that is not a cache part is left alone, and a part
        written after the listing is kept. Call it while holding the folder's lease."""
        from pipeline.llm.cache import compact_entries, decode_part, encode_part
        paths = self._part_paths(rel)
        blobs = self.fs.cat(paths, on_error="omit") if len(paths) > 1 else {}
        used, parts = [], []
        for p in paths:
            try:
                parts.append(decode_part(blobs[p]))
            except (KeyError, TypeError, ValueError):  # vanished, or not a cache part: not merged, not deleted
                continue
            used.append(p)
        if len(used) < 2:
            return 0
        self.put_cache_part(rel, name, encode_part(compact_entries(parts)))
        old = [p for p in used if p != self.path(rel, LLM_PARTS_DIR, name)]
        self.fs.rm(old)
        return len(old)


class CacheCheckpointer:
    """Copies the LLM answers a stage receives from the worker's local SQLite cache to immutable
    remote cache parts ``<folder>/_llm_cache/<attempt>-<seq 5 digits>.parquet``: every
    ``every_answers`` new answers or ``every_s`` seconds (polled by a daemon thread every
    ``poll_s``), and on :meth:`stop`. ``put(name, bytes)`` writes one part."""

    def __init__(self, cache_path: str, put: Callable[[str, bytes], None], attempt: str,
                 every_answers: int | None = None, every_s: float | None = None, poll_s: float = 0.2):
        from pipeline.llm.cache import ResponseCache
        self.cache = ResponseCache(cache_path)
        self.put, self.attempt, self.poll_s = put, attempt, poll_s
        self.every_answers = every_answers or int(os.environ.get(ENV_CKPT_ANSWERS) or CKPT_ANSWERS)
        self.every_s = every_s or float(os.environ.get(ENV_CKPT_S) or CKPT_S)
        self.mark = self.cache.max_rowid()
        self.parts = 0
        self.error: Exception | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="skillpipe-llm-checkpoint", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            pending = self.cache.max_rowid() - self.mark
            if pending >= self.every_answers or (pending and time.monotonic() - self._last >= self.every_s):
                try:
                    self.flush()
                except Exception as e:  # storage hiccup: keep answering, retry at the next tick
                    self.error = e
                    log.warning("LLM cache checkpoint failed: %s", e)

    def flush(self) -> int:
        """Write the answers received since the last checkpoint as one part; returns how many."""
        from pipeline.llm.cache import encode_part
        with self._lock:
            entries, mark = self.cache.entries_after(self.mark)
            if entries:
                self.put(f"{self.attempt}-{self.parts:05d}.parquet", encode_part(entries))
                self.parts += 1
            self.mark, self._last = mark, time.monotonic()
            return len(entries)

    def stop(self, flush: bool = True) -> None:
        """Stop the thread; with ``flush`` write what is left. Raises the storage error, if any."""
        self._stop.set()
        self._thread.join(timeout=10)
        try:
            if flush:
                self.flush()
        finally:
            self.cache.close()


#: Seconds a unit waits for another process's pull into the same mirror ($SKILLPIPE_MIRROR_LOCK_S).
MIRROR_LOCK_S = 1800.0


@contextlib.contextmanager
def mirror_lock(local_run_dir: str, timeout_s: float | None = None) -> Iterator[None]:
    """Exclusive ``flock`` on ``<local_run_dir>/.mirror.lock`` while a unit pulls into the mirror:
    worker processes of one machine share the mirror, so the second waits and then finds the
    folders up to date (and leaves them untouched) instead of rewriting them while the first
    reads them. The holder writes its pid into the file; a waiter gives up after ``timeout_s``
    (default :data:`MIRROR_LOCK_S`) with :class:`~pipeline.core.waits.WaitTimeout` naming it."""
    import fcntl
    from pipeline.core.waits import WaitTimeout, seconds_from_env
    timeout_s = timeout_s or seconds_from_env("SKILLPIPE_MIRROR_LOCK_S", MIRROR_LOCK_S)
    os.makedirs(local_run_dir, exist_ok=True)
    path = os.path.join(local_run_dir, ".mirror.lock")
    with open(path, "a+") as f:
        end = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= end:
                    f.seek(0)
                    holder = f.read().strip()
                    raise WaitTimeout(f"the pull holding {path}", int(holder) if holder.isdigit() else None,
                                      timeout_s, "another process of this machine is still pulling this run into "
                                      "the mirror; raise $SKILLPIPE_MIRROR_LOCK_S if it is just large") from None
                time.sleep(0.2)
        try:
            f.truncate(0)
            f.write(str(os.getpid()))
            f.flush()
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def needs(stage: str, shard: str | None = None) -> dict[str, set[str] | None]:
    """What a unit of work reads: ``{stage: shard names, or None for the whole stage}`` for
    ``stage`` itself and every stage it reads, directly or through its inputs
    (``Stage.inputs``, transitively). A shard of a map stage reads the same shard of a sharded
    input and the whole of a reduce, and a whole stage reads its inputs whole (as the runner's
    freshness check walks them)."""
    from pipeline.stages import get_stage
    need: dict[str, set[str] | None] = {stage: None if shard is None else {shard}}
    todo = [(stage, shard)]
    while todo:
        st, sh = todo.pop()
        for up in get_stage(st).inputs:
            sub = sh if sh is not None and getattr(get_stage(up), "sharded", False) else None
            cur = need.get(up, set())
            if cur is None or (sub is not None and sub in cur):
                continue
            need[up] = None if sub is None else cur | {sub}
            todo.append((up, sub))
    return need


def _rel(stage: str, shard: str | None) -> str:
    if shard is not None and (not shard.startswith(SHARD_PREFIX) or "/" in shard or ".." in shard):
        raise ValueError(f"invalid shard name {shard!r}: expected {SHARD_PREFIX}NNNNN")
    return stage if shard is None else f"{stage}/{shard}"


class RemoteHooks(StageHooks):
    """The hooks of a run on object storage (see the module docstring); ``local_run_dir`` is the
    run's folder in the mirror. Raises :class:`~pipeline.core.lease.LeaseHeld` from ``before``
    when another worker runs the same stage/shard.

    Run-level files (the shard plan under ``_plan/``) are pulled when the hooks are opened and
    pushed, when changed, at each ``before`` and at ``close``."""

    def __init__(self, remote: RemoteRun, local_run_dir: str):
        self.remote, self.local_run_dir = remote, local_run_dir
        self._leases: dict[str, Any] = {}
        self._seen: dict[str, dict[str, Any]] = {}  # rel -> committed remote manifest, as last seen
        self._attempt: dict[str, str] = {}
        self._ckpt: dict[str, CacheCheckpointer] = {}
        self._run_files: dict[str, bytes] = {}
        self.stats = {"downloaded": 0, "published": 0, "gc_attempts": 0, "cache_imported": 0, "cache_compacted": 0}

    def uri(self, local_path: str) -> str:
        """The remote URI of the artifact folder ``local_path`` of this run's mirror."""
        rel = os.path.relpath(local_path, self.local_run_dir).replace(os.sep, "/")
        return self.remote.uri(rel)

    def pull_run_files(self) -> None:
        """Make the mirror's run-level files (``_plan/``) those of the remote run."""
        for d in RUN_FILE_DIRS:
            remote = {p[len(self.remote.path()) + 1:]: p for p in self.remote.fs.find(self.remote.path(d))}
            blobs = self.remote.fs.cat(list(remote.values())) if remote else {}
            self._run_files.update({rel: blobs[p] for rel, p in remote.items()})
            local = os.path.join(self.local_run_dir, d)
            for name in _local_files(local, False) if os.path.isdir(local) else ():
                if f"{d}/{name}" not in remote:
                    os.remove(os.path.join(local, name))
            for rel in remote:
                data = self._run_files[rel]
                os.makedirs(os.path.dirname(os.path.join(self.local_run_dir, rel)), exist_ok=True)
                atomic_write(os.path.join(self.local_run_dir, rel), data)

    def push_run_files(self) -> None:
        """Upload the mirror's run-level files that differ from the remote ones (one PUT each)."""
        for d in RUN_FILE_DIRS:
            local = os.path.join(self.local_run_dir, d)
            for name in sorted(_local_files(local, False)) if os.path.isdir(local) else ():
                rel = f"{d}/{name}"
                with open(os.path.join(local, name), "rb") as f:
                    data = f.read()
                if self._run_files.get(rel) != data:
                    self.remote.fs.pipe_file(self.remote.path(rel), data)
                    self._run_files[rel] = data

    def before(self, stage: str, shard: str | None = None) -> None:
        """:meth:`StageHooks.before` on object storage: push changed run-level files, take the
        lease ``_locks/<stage>[.<shard>].json`` (:class:`~pipeline.core.lease.LeaseHeld` when
        held), pull what the unit reads and its previous artifact, delete stale attempt prefixes
        and, for an LLM stage, import the remote cache parts and start checkpointing new answers.
        On any error the lease is released."""
        from pipeline.core.lease import Lease
        from pipeline.stages import get_stage
        rel = _rel(stage, shard)
        self.push_run_files()
        lease_name = stage if shard is None else f"{stage}.{shard}"
        self._leases[rel] = Lease(self.remote.fs, self.remote.path(LOCKS_DIR, f"{lease_name}.json")).acquire()
        try:
            self.remote.fs.invalidate_cache()
            with mirror_lock(self.local_run_dir):
                self._sync(stage, shard)
            self._attempt[rel] = new_attempt_id()
            keep = (self._seen.get(rel) or {}).get(ATTEMPT_KEY, {}).get("id")
            self.stats["gc_attempts"] += len(self.remote.gc_attempts(rel, keep))
            if get_stage(stage).uses_llm:
                self._start_cache(rel)
        except BaseException:
            self._attempt.pop(rel, None)
            self._release(rel)
            raise

    def _sync(self, stage: str, shard: str | None) -> None:
        """Pull every stage manifest of the run, and the data of what ``stage`` (``shard``)
        reads (:func:`needs`) and of its own previous artifact."""
        from pipeline.stages import STAGES
        need = needs(stage, shard)
        plan: dict[str, tuple[bool, tuple[str, ...]]] = {}  # rel -> (pull data, shard folders pulled apart)
        for st in STAGES:
            if st not in need:
                plan[st] = (False, ())  # the manifest only (also removes a stale local one)
                continue
            shards = self.remote.listing(st)[1]
            chosen = shards if need[st] is None else [s for s in shards if s in need[st]]
            # a whole stage, or a flat one; of a sharded stage read by one shard, only its stage-level
            # files (parse's _selection/ drop lists, written by the collect step) besides that shard
            plan[st] = (True, tuple(chosen) if need[st] is None or not shards else tuple(shards))
            plan.update({f"{st}/{s}": (True, ()) for s in chosen})
        if shard is not None:
            plan.setdefault(_rel(stage, shard), (True, ()))
        manifests = self.remote.manifests(sorted(plan))
        self._seen.update(manifests)
        for rel, (data, skip) in plan.items():
            if rel not in manifests:
                self._seen.pop(rel, None)
            self.stats["downloaded"] += pull_folder(self.remote.fs, self.remote.path(rel), manifests.get(rel),
                                                    os.path.join(self.local_run_dir, rel), data=data, skip=skip)

    def _start_cache(self, rel: str) -> None:
        """Import the remote LLM cache parts of ``rel`` into the local cache, then start
        checkpointing new answers."""
        from pipeline.llm.cache import CACHE_FILE, ResponseCache, decode_part
        path = os.path.join(self.local_run_dir, CACHE_FILE)
        cache = ResponseCache(path)
        try:
            for data in self.remote.cache_parts(rel):
                try:
                    self.stats["cache_imported"] += cache.import_entries(decode_part(data))
                except ValueError as e:  # a foreign file: its answers are simply asked again
                    log.warning("skipping an unreadable LLM cache part of %s: %s", rel, e)
        finally:
            cache.close()
        self._ckpt[rel] = CacheCheckpointer(path, lambda name, data: self.remote.put_cache_part(rel, name, data),
                                            self._attempt[rel])

    def after(self, stage: str, shard: str | None = None) -> None:
        """:meth:`StageHooks.after` on object storage: flush the LLM cache checkpoint, publish the
        local artifact unless the remote already holds it, compact the cache parts, and always
        release the lease. Raises ``RuntimeError`` without a matching :meth:`before`, and
        :class:`~pipeline.core.lease.LeaseHeld` (nothing published) when the lease was lost."""
        rel = _rel(stage, shard)
        if rel not in self._attempt:
            raise RuntimeError(f"after({stage!r}, {shard!r}) without before(): nothing was pulled or leased")
        try:
            ckpt = self._ckpt.pop(rel, None)
            if ckpt is not None:
                try:
                    ckpt.stop(flush=True)
                except Exception as e:  # the answers are in the artifact; only a --force rerun would miss them
                    log.warning("final LLM cache checkpoint of %s failed: %s", rel, e)
            self._publish(rel)
            if ckpt is not None:
                self._compact_cache(rel)
        finally:
            self._attempt.pop(rel, None)
            self._release(rel)

    def _publish(self, rel: str) -> None:
        """Commit the local folder ``rel`` unless the remote already holds this manifest."""
        from pipeline.core.lease import LeaseHeld
        lease = self._leases.get(rel)
        if lease is not None and lease.lost:
            raise LeaseHeld(f"lease {lease.uri}: the lease was taken over while this worker ran {rel}; "
                            "its result is not published", {})
        local = read_local_manifest(os.path.join(self.local_run_dir, rel))
        if local is None or local == strip_attempt(self._seen.get(rel)):
            return
        shards = {r.split("/", 1)[1]: m for r, m in self._seen.items() if r.startswith(f"{rel}/{SHARD_PREFIX}")}
        self._seen[rel] = self.remote.publish(os.path.join(self.local_run_dir, rel), rel, local,
                                              self._attempt[rel], shards)
        self.stats["published"] += 1
        if isinstance(local.get("shards"), list):  # as the local collect step: shards of an earlier plan go
            keep = {s["id"] for s in local["shards"]}
            for name in self.remote.listing(rel)[1]:
                if name not in keep:
                    self.remote.fs.rm(self.remote.path(rel, name), recursive=True)

    def _compact_cache(self, rel: str) -> None:
        """Merge the committed unit's LLM cache parts into one (a failure is logged: the parts
        stay as they are, still complete)."""
        try:
            self.stats["cache_compacted"] += self.remote.compact_cache(rel, f"{self._attempt[rel]}-compact.parquet")
        except Exception as e:
            log.warning("could not compact the LLM cache parts of %s (they are kept as they are): %s", rel, e)

    def _release(self, rel: str) -> None:
        lease = self._leases.pop(rel, None)
        if lease is not None:
            lease.release()

    def close(self) -> None:
        """Flush the LLM answers of a stage that failed (they stay paid for), release its lease,
        and push changed run-level files."""
        for rel in list(self._ckpt):
            try:
                self._ckpt.pop(rel).stop(flush=True)
            except Exception as e:
                log.warning("final LLM cache checkpoint of %s failed: %s", rel, e)
        for rel in list(self._leases):
            self._release(rel)
        self.push_run_files()


@contextlib.contextmanager
def open_root(root: str, run_id: str) -> Iterator[tuple[str, StageHooks]]:
    """``(local root folder, hooks)`` for the run ``run_id`` under ``root``: the folder itself and
    no-op hooks for a local path (or ``file://``), a mirror and :class:`RemoteHooks` for any other
    fsspec URI. Raises ``ValueError`` for a bad ``$SKILLPIPE_STORAGE_OPTIONS`` or protocol."""
    if not is_remote(root):
        yield (root[len("file://"):] if root.startswith("file://") else root), StageHooks()
        return
    fs, base = remote_fs(root)
    local = mirror_dir(root)
    hooks = RemoteHooks(RemoteRun(fs, base, run_id), run_dir(local, run_id))
    hooks.pull_run_files()
    try:
        yield local, hooks
    finally:
        hooks.close()


def pull_run(root: str, run_id: str) -> str:
    """The local folder holding run ``run_id`` of the object-storage ``root`` with every
    committed stage pulled (manifests and data, checked against their SHA-256s), for readers of a
    whole run (``skillpipe report``, ``inspect --lineage``); read-only: no lease is taken and no
    attempt removed. Returns ``<mirror>/runs/<run_id>``. Raises ``FileNotFoundError`` when the run
    has no committed stage; a storage error (``OSError``, botocore's) when the endpoint fails."""
    from pipeline.stages import STAGES
    fs, base = remote_fs(root)
    hooks = RemoteHooks(RemoteRun(fs, base, run_id), run_dir(mirror_dir(root), run_id))
    hooks.pull_run_files()
    with mirror_lock(hooks.local_run_dir):
        hooks._sync(STAGES[-1], None)  # the last stage reads every earlier one, whole
    if not hooks._seen:
        raise FileNotFoundError(f"no run {run_id!r} under {root} (no committed stage manifest)")
    return hooks.local_run_dir


def remote_manifest(root: str, run_id: str, stage: str) -> dict[str, Any] | None:
    """The committed manifest of ``stage`` of run ``run_id`` under the object-storage ``root``
    (without the ``attempt`` key), or ``None`` when there is none or it is not a committed
    manifest. One GET; a storage error other than a missing object (an unreachable endpoint,
    refused credentials) is raised, not taken for "no manifest"."""
    fs, base = remote_fs(root)
    try:
        m = json.loads(fs.cat_file(RemoteRun(fs, base, run_id).path(stage, MANIFEST)))
    except (FileNotFoundError, ValueError):
        return None
    ok = isinstance(m, dict) and m.get("status") == "complete" and ATTEMPT_KEY in m
    return strip_attempt(m) if ok else None


def open_artifact(uri: str) -> str:
    """A local folder holding the artifact folder at ``uri`` (a stage ``.../runs/<id>/<stage>``
    or one shard of it) as its manifest names it, pulled into the mirror of ``uri``; a local path
    is returned as is. Raises ``FileNotFoundError`` when there is no complete artifact there."""
    if not is_remote(uri):
        return uri[len("file://"):] if uri.startswith("file://") else uri
    fs, path = remote_fs(uri)
    try:
        manifest = json.loads(fs.cat_file(f"{path}/{MANIFEST}"))
    except (FileNotFoundError, ValueError):
        manifest = None
    if not isinstance(manifest, dict) or ATTEMPT_KEY not in manifest:
        raise FileNotFoundError(f"no complete artifact at {uri} (no committed {MANIFEST})")
    local = mirror_dir(uri)
    pull_folder(fs, path, manifest, local)
    return local


def read_table(uri: str, quarantine: bool = False):
    """The rows (or quarantine rows) of the artifact at ``uri`` as one ``pyarrow.Table``: what
    ``pd.read_parquet`` cannot do on object storage, since the committed files sit under
    ``_attempts/`` (skipped by dataset readers). Raises ``FileNotFoundError`` / ``ArtifactError``."""
    from pipeline.core.artifacts import StageArtifact
    folder = open_artifact(uri)
    return StageArtifact(folder, read_local_manifest(folder) or {}).read_table(quarantine)
