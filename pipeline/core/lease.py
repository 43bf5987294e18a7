"""A lease on object storage: the remote counterpart of the run lock (:mod:`pipeline.engine.runlock`).

``flock`` cannot reach across machines, so a worker that runs a stage (or one shard of it) on an
object-storage root first takes a **lease**: a small JSON object
``<run>/_locks/<stage>[.<shard>].json`` naming its holder (host, pid, command) and an expiry.

* Taking it is a conditional create (S3 ``PutObject`` with ``If-None-Match: *``): of two workers,
  exactly one succeeds; the other gets :class:`LeaseHeld` naming the holder and when the lease
  expires.
* A background thread renews it every ``ttl_s / 4`` seconds with a conditional overwrite
  (``If-Match: <ETag>``), so a lease taken over by someone else is noticed (:attr:`Lease.lost`).
* A holder killed with ``kill -9`` stops renewing; after ``ttl_s`` its lease is expired and the next
  worker takes it over (again a conditional overwrite of the ETag it read, so two takers cannot
  both win). The DAG's ``retry_delay`` (150 s, ``SKILLPIPE_RETRY_DELAY_S``) is longer than the default ``ttl_s``.

On a filesystem without conditional writes (local, ``gs://`` through gcsfs, ...) the lease is
written and read back, and the write wins only when the read-back names this holder: two workers
racing within one round trip may both believe they won. That window is documented in
``docs/object_storage.md``; the artifacts stay consistent regardless (each attempt writes under
its own prefix and the manifest is one PUT), only an LLM answer may be paid twice.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
import time
import uuid
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_TTL_S = 120.0  # a killed holder blocks a retry for at most this long
ENV_TTL = "SKILLPIPE_LEASE_S"


class LeaseHeld(RuntimeError):
    """Another live worker holds the lease; ``holder`` is its recorded JSON body."""

    def __init__(self, message: str, holder: dict[str, Any]):
        super().__init__(message)
        self.holder = holder


def _conditional(fs) -> bool:
    """True when ``fs`` supports S3's conditional PUT (``If-None-Match`` / ``If-Match``)."""
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return any(p in ("s3", "s3a") for p in protocols)


def default_ttl() -> float:
    """Lease lifetime in seconds: ``$SKILLPIPE_LEASE_S`` or :data:`DEFAULT_TTL_S`. Raises
    ``ValueError`` when it is not a number of seconds > 0 (a lease that has always expired would
    let two workers run the same unit)."""
    raw = os.environ.get(ENV_TTL) or ""
    try:
        ttl = float(raw) if raw.strip() else DEFAULT_TTL_S
    except ValueError:
        ttl = -1.0
    if not ttl > 0 or ttl == float("inf"):
        raise ValueError(f"${ENV_TTL} must be a number of seconds > 0 (default {DEFAULT_TTL_S:g}), got {raw!r}")
    return ttl


def _full_uri(fs, path: str) -> str:
    """``path`` with its filesystem's scheme (``s3://bucket/...``), as the user wrote the root;
    the bare path when the filesystem cannot say."""
    try:
        return fs.unstrip_protocol(path)
    except Exception:  # a filesystem without protocol metadata: the path is all we know
        return path


def held_message(uri: str, holder: dict[str, Any], now: float | None = None) -> str:
    """What a worker refused by a live lease is told: the lease object's full ``uri``, who holds
    it (pid, host, command from the ``holder`` JSON body), until when (UTC) and what to do."""
    now = time.time() if now is None else now
    expires = float(holder.get("expires_at") or now)
    until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires))
    ttl = expires - float(holder.get("acquired_at") or expires)
    argv = " ".join(holder.get("argv") or []) or "unknown command"
    return (f"lease {uri} is held by pid {holder.get('pid')} on {holder.get('host')} ({argv}) until {until} "
            f"(in {max(expires - now, 0):.0f} s) unless renewed. Another worker is running this stage/shard: "
            f"wait for it to finish. If it was killed, its lease expires by then (lifetime {ttl:.0f} s, set by "
            f"${ENV_TTL} on the holder; default {DEFAULT_TTL_S:g}) and a retry or rerun after that takes over")


class Lease:
    """One lease object at ``path`` on the fsspec filesystem ``fs``.

    Use :meth:`acquire` (raises :class:`LeaseHeld`), then :meth:`release`. ``ttl_s``: seconds
    before an unrenewed lease may be taken over (default :func:`default_ttl`)."""

    def __init__(self, fs, path: str, ttl_s: float | None = None):
        self.fs, self.path = fs, path
        self.uri = _full_uri(fs, path)
        self.ttl_s = ttl_s or default_ttl()
        self.token = uuid.uuid4().hex
        self.etag: str | None = None
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _body(self) -> bytes:
        now = time.time()
        return json.dumps({"token": self.token, "host": socket.gethostname(), "pid": os.getpid(),
                           "argv": sys.argv[:6], "acquired_at": now, "expires_at": now + self.ttl_s}).encode()

    def _read(self) -> tuple[dict[str, Any] | None, str | None]:
        """``(body, etag)`` of the current lease object, ``(None, None)`` when there is none."""
        etag = None
        try:
            etag = self.fs.info(self.path).get("ETag") if _conditional(self.fs) else None
            return json.loads(self.fs.cat_file(self.path)), etag
        except FileNotFoundError:
            return None, None
        except ValueError:  # unreadable: treat as expired
            return {"expires_at": 0}, etag

    def _put(self, if_match: str | None = None, create: bool = False) -> bool:
        """Write the lease body; False when the condition failed (someone else wrote first)."""
        try:
            if not _conditional(self.fs):
                self.fs.pipe_file(self.path, self._body())
                body, _ = self._read()
                return bool(body) and body.get("token") == self.token
            kwargs = {"mode": "create"} if create else {"IfMatch": if_match}
            self.fs.pipe_file(self.path, self._body(), **kwargs)
        except (FileExistsError, PermissionError):
            return False
        except OSError as e:  # s3fs maps 412 Precondition Failed on If-Match to EINVAL
            if "pre-condition" in str(e).lower() or "precondition" in str(e).lower():
                return False
            raise
        self.fs.invalidate_cache(self.path)
        self.etag = self.fs.info(self.path).get("ETag") if _conditional(self.fs) else None
        return True

    def acquire(self) -> "Lease":
        """Take the lease (or take over an expired one) and start renewing it.

        Raises :class:`LeaseHeld` when a live holder has it."""
        body, etag = self._read()
        if body is None and (self._put(create=True) if _conditional(self.fs) else self._put()):
            return self._start()
        if body is None:
            body, etag = self._read()
        if body is not None and body.get("expires_at", 0) > time.time():
            raise LeaseHeld(held_message(self.uri, body), body)
        if not self._put(if_match=etag):  # expired: take it over, unless another taker was first
            body, _ = self._read()
            raise LeaseHeld(f"lease {self.uri}: another worker took over the expired lease first "
                            "and is running this stage/shard now; wait for it to finish", body or {})
        return self._start()

    def _start(self) -> "Lease":
        self._thread = threading.Thread(target=self._renew_loop, name="skillpipe-lease", daemon=True)
        self._thread.start()
        return self

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl_s / 4):
            try:
                if not self._put(if_match=self.etag):
                    self.lost = True
                    return
            except OSError:  # a transient storage error: try again at the next tick
                continue

    def release(self) -> None:
        """Stop renewing and delete the lease object if it is still this holder's (a storage
        error is logged, not raised: the lease then expires after ``ttl_s``)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            body, _ = self._read()
            if body is not None and body.get("token") == self.token:
                self.fs.rm_file(self.path)
        except OSError as e:  # storage unreachable: the lease simply expires after ttl_s
            log.warning("could not release lease %s (it expires in %.0f s): %s", self.uri, self.ttl_s, e)
