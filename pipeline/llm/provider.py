"""Open the LLM for a run: a configured endpoint, or the embedded server started on demand."""
from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Callable

from pipeline.core.config import LLMConfig


def uses_embedded(cfg: LLMConfig) -> bool:
    """True when ``cfg`` asks an embedded llama.cpp model: no ``base_url`` (the run starts it),
    or an endpoint that names an embedded model's alias (the Airflow DAG's ``start_llm``)."""
    from pipeline.llm.server import is_embedded_alias
    return not cfg.base_url or is_embedded_alias(cfg.model)


def model_id_for(cfg: LLMConfig) -> str:
    """The model identity used in fingerprints, known before any server is started.

    The embedded model (no ``base_url``, or an endpoint that names the embedded server's alias,
    as the Airflow DAG's ``start_llm`` task does) is identified by its GGUF file and hash, so a
    DAG run and a CLI run record the same model and share cached answers."""
    from pipeline.llm.server import embedded_model_id
    if not uses_embedded(cfg):
        return cfg.model or "default"
    return embedded_model_id(cfg.model)


def embedded_endpoint(stack: contextlib.ExitStack, log_dir: str, model: str = "") -> tuple[str, str, str]:
    """Start the embedded server of ``model`` (an alias; ``""`` = the default embedded model) for
    the life of ``stack``; returns ``(base_url, the alias it answers to, model id)`` (the id is
    :func:`pipeline.llm.server.embedded_model_id`: file stem and hash, as fingerprints record it).
    Used by code that talks to the server directly (a policy under evaluation) rather than
    through :class:`pipeline.llm.client.LLMClient`."""
    from pipeline.llm.server import EmbeddedServer, embedded_model_id
    srv = EmbeddedServer(log_dir=log_dir, model=model)
    return stack.enter_context(srv), srv.model, embedded_model_id(srv.model)


def llm_factory(cfg: LLMConfig, run_dir: str, stack: contextlib.ExitStack) -> Callable[[], object]:
    """A zero-argument callable that builds the run's :class:`LLMClient` on first use.

    With no ``cfg.base_url`` it starts the embedded llama.cpp server and registers its shutdown
    on ``stack``, so a run whose LLM stages are all unchanged never starts a server. Either way
    the client watches the embedded server's process when there is one: the one started here,
    or the detached one that the Airflow setup task recorded in
    ``<run_dir>/_llm_server/llm_server.json`` for this ``base_url``; a dead server fails the
    stage at once with its exit status (:class:`server.ServerDied`).
    """
    def make():
        from pipeline.llm.cache import CACHE_FILE
        from pipeline.llm.client import LLMClient
        from pipeline.llm.server import DETACHED_STATE_DIR, EmbeddedServer, detached_watch
        c = cfg
        if not c.base_url:
            srv = EmbeddedServer(ctx_size=c.ctx_size, log_dir=run_dir, model=c.model, n_threads=c.threads or None)
            base_url = stack.enter_context(srv)
            c = dataclasses.replace(c, base_url=base_url, model=srv.model)
            watch = srv.death
        else:
            watch = detached_watch(os.path.join(run_dir, DETACHED_STATE_DIR), c.base_url)
        os.makedirs(run_dir, exist_ok=True)
        return LLMClient(c, cache_path=os.path.join(run_dir, CACHE_FILE), model_id=model_id_for(cfg),
                         server_watch=watch)
    return make
