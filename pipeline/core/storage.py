"""Object storage as the ground floor sees it: whether a root is a URI, the filesystem it opens
with the run's storage options, and whether its bucket exists.

The engine's mirror of a remote run (:mod:`pipeline.engine.remote`) and the skill bank history in
a bucket (:mod:`pipeline.bank.files`) both open their storage here, so they read the same
``$SKILLPIPE_STORAGE_OPTIONS`` and name a missing bucket the same way.
"""
from __future__ import annotations

import json
import os
from typing import Any

ENV_STORAGE_OPTIONS = "SKILLPIPE_STORAGE_OPTIONS"


def is_remote(root: str) -> bool:
    """True for a URI with a scheme other than ``file`` (``s3://...``); False for a local path."""
    return "://" in root and not root.startswith("file://")


def storage_options() -> dict[str, Any]:
    """The JSON object in ``$SKILLPIPE_STORAGE_OPTIONS`` (``{}`` when unset).

    Raises ``ValueError`` when it is not a JSON object."""
    raw = os.environ.get(ENV_STORAGE_OPTIONS, "").strip()
    try:
        opts = json.loads(raw) if raw else {}
    except ValueError as e:
        raise ValueError(f"${ENV_STORAGE_OPTIONS} is not valid JSON: {e}") from e
    if not isinstance(opts, dict):
        raise ValueError(f"${ENV_STORAGE_OPTIONS} must be a JSON object, got {type(opts).__name__}")
    return opts


def remote_fs(uri: str):
    """``(fsspec filesystem, path without protocol and trailing '/')`` for ``uri`` with
    :func:`storage_options`. Raises ``ValueError`` for an unknown protocol (``ImportError`` from
    fsspec when its package, e.g. gcsfs, is not installed)."""
    import fsspec
    fs, path = fsspec.core.url_to_fs(uri, **storage_options())
    return fs, path.rstrip("/")


class RootMissing(FileNotFoundError):
    """The bucket (container) of an object-storage root does not exist; the message names it."""


def check_bucket(root: str, option: str = "--root") -> None:
    """Raise :class:`RootMissing`, naming the bucket and the endpoint, when the store answers that
    the bucket of the object-storage ``root`` does not exist (one HEAD request); ``option``: the
    CLI option that gave ``root`` ("" for an argument: the message then says "the URI"). Nothing is raised
    when it exists, when the credentials may not look at the bucket itself (a policy scoped to a
    prefix: ``PermissionError``), or for a filesystem without buckets (``memory://``). Other
    storage errors (an unreachable endpoint, botocore's) are raised as they come."""
    fs, base = remote_fs(root)
    if not hasattr(fs, "split_path"):  # s3fs, gcsfs, adlfs have buckets/containers; memory:// has none
        return
    bucket = fs.split_path(base)[0]
    try:
        fs.info(bucket)
    except PermissionError:
        return
    except FileNotFoundError:
        endpoint = (getattr(fs, "client_kwargs", None) or {}).get("endpoint_url") or os.environ.get("AWS_ENDPOINT_URL")
        where = f" at {endpoint}" if endpoint else ""
        how = f" (`aws s3 mb s3://{bucket}`)" if root.startswith(("s3://", "s3a://")) else ""
        raise RootMissing(f"{option + ' ' if option else ''}{root}: bucket {bucket!r} does not exist{where}; "
                          f"create it{how}, or fix {option or 'the URI'} or the endpoint") from None
