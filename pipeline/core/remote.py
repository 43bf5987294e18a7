"""Where a run's artifacts live: a local folder, or any fsspec URI (``s3://bucket/prefix``, ``gs://``...).

The stages themselves only ever read and write a **local** folder (Parquet through pyarrow, plain
``os`` calls): :func:`open_root` maps the ``--root`` the user gave to that local folder and to the
:class:`StageHooks` the runner calls around every stage (or shard of a stage).

* A local root (a path, or ``file://``): the local folder is the root itself and the hooks do
  nothing.
* An object-storage root: the local folder is a working mirror; ``before`` pulls what the stage
  reads, ``after`` publishes what it wrote with the manifest-last commit protocol. (Filled in by
  the object-storage work; until then such a root raises ``NotImplementedError``.)
"""
from __future__ import annotations

import contextlib
from typing import Iterator


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


def is_remote(root: str) -> bool:
    """True for a URI with a scheme other than ``file`` (``s3://...``); False for a local path."""
    return "://" in root and not root.startswith("file://")


@contextlib.contextmanager
def open_root(root: str, run_id: str) -> Iterator[tuple[str, StageHooks]]:
    """``(local root folder, hooks)`` for the run ``run_id`` under ``root``.

    Raises ``NotImplementedError`` for an object-storage URI until that backend exists."""
    if is_remote(root):
        raise NotImplementedError(f"object-storage roots are not supported yet: {root}")
    yield (root[len("file://"):] if root.startswith("file://") else root), StageHooks()
