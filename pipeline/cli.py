"""`skillpipe` command line: run stages, inspect artifacts, serve the embedded LLM.

Examples::

    skillpipe run --input data/samples --run-id sample            # whole pipeline, embedded LLM
    skillpipe run --run-id sample --stages distill,build_pairs,export  # rerun later stages of a run
    skillpipe inspect runs/sample/export                           # schema, counts, sample rows
    skillpipe inspect runs/sample/export --lineage pair-0123abcd    # one SFT pair back to its source
    skillpipe serve-llm --port 8080                                # embedded endpoint, foreground

The CLI and the Airflow DAG call the same entry points (:mod:`pipeline.engine.runner`).
"""
from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import sys
import time
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pipeline.confighelp import section_names
from pipeline.report.runinfo import DEFAULT_PRICE_CACHED, DEFAULT_PRICE_COMPLETION, DEFAULT_PRICE_PROMPT
from pipeline.stages import STAGES

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="skillpipe: turn agent rollout traces into a skill bank and SFT pairs (SkillRL method).")
from pipeline.bank.cli import app as bank_app  # noqa: E402
from pipeline.llm.cli import models_app  # noqa: E402

app.add_typer(bank_app, name="bank", help="Versioned skill banks: list, show, diff, restore, export.")
app.add_typer(models_app, name="models", help="Embedded teacher models: list, fetch (pinned, verified), verify.")

#: Commands that live outside ``pipeline`` (``skillpipe sft ...``, ``skillpipe rl ...``,
#: ``skillpipe eval``) register through this entry-point group in pyproject.toml, so that
#: ``pipeline`` never imports ``sft`` (``sft`` builds on ``pipeline``, not the reverse).
COMMAND_GROUP = "skillpipe.commands"
#: Top-level names kept for one release: ``skillpipe grpo`` is now ``skillpipe rl grpo``.
OLD_COMMANDS = {"grpo": "rl", "rollout": "rl"}


def _old_name(group: str, cmd) -> None:
    import functools
    name = cmd.name or cmd.callback.__name__

    @functools.wraps(cmd.callback)
    def run(*args, **kwargs):
        Console(stderr=True).print(f"note: `skillpipe {name}` is now `skillpipe {group} {name}`; the old "
                                   "name will stop working in the next release", highlight=False, markup=False)
        return cmd.callback(*args, **kwargs)
    app.command(name, hidden=True)(run)


def _add_plugin_commands() -> None:
    from importlib.metadata import entry_points
    for ep in sorted(entry_points(group=COMMAND_GROUP), key=lambda e: e.name):
        obj = ep.load()
        if isinstance(obj, typer.Typer):
            app.add_typer(obj, name=ep.name)
            for cmd in obj.registered_commands:
                if OLD_COMMANDS.get(cmd.name or cmd.callback.__name__) == ep.name:
                    _old_name(ep.name, cmd)
        else:
            app.command(ep.name)(obj)


_add_plugin_commands()
# Not a terminal (a log file, Airflow's task log, CI): rich would assume 80 columns and cut the
# summary table's stage names and reasons; 160 keeps them whole. A terminal keeps its own width.
console = Console(stderr=False, width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160)
err = Console(stderr=True)


def _parse_stages(stages: str | None) -> list[str] | None:
    if stages is None:
        return None
    from pipeline.stages import RENAMED_STAGES, canonical_stage
    given = [s.strip() for s in stages.split(",") if s.strip()]
    for old in sorted({s for s in given if s in RENAMED_STAGES}):
        err.print(f"note: stage {old!r} is now {RENAMED_STAGES[old]!r}; the old name will stop working in the "
                  "next release", highlight=False, markup=False)
    names = list(dict.fromkeys(canonical_stage(s) for s in given))
    if not names:  # `--stages ""` (an unset shell variable) must not mean "everything"
        raise typer.BadParameter(f"no stage given; choose from {', '.join(STAGES)} or omit --stages for all",
                                 param_hint="--stages")
    bad = [s for s in names if s not in STAGES]
    if bad:
        raise typer.BadParameter(f"unknown stage(s) {', '.join(bad)}; choose from {', '.join(STAGES)}",
                                 param_hint="--stages")
    return names


def _previous_input(root: str, run_id: str) -> str:
    """The input path run ``run_id``'s parse artifact recorded (``""``: none), read from the
    remote run for an object-storage root (one GET), so a rerun there needs no --input either."""
    from pipeline.core.storage import is_remote
    from pipeline.engine.remote import remote_manifest
    if is_remote(root):
        manifest = remote_manifest(root, run_id, "parse") or {}
        return manifest.get("input_path", "")
    from pipeline.core.artifacts import ArtifactStore
    art = ArtifactStore(root, run_id).load("parse")
    return art.manifest.get("input_path", "") if art else ""


def _plain_path(path: str) -> str:
    """``path`` without a ``file://`` scheme (a local folder given as a URI), else unchanged."""
    return path[len("file://"):] if path.startswith("file://") else path


def _storage_errors() -> tuple[type, ...]:
    """Exceptions of a storage backend that reach the CLI: ``OSError`` (s3fs maps S3 errors to
    it) and botocore's own (an unreachable endpoint, missing credentials) when it is installed."""
    try:
        from botocore.exceptions import BotoCoreError
    except ImportError:  # no s3fs: only fsspec's own filesystems
        return (OSError,)
    return (OSError, BotoCoreError)


def _storage_message(e: BaseException, root: str) -> str:
    """One line for a storage error ``e`` under ``root``, saying what to check."""
    from pipeline.core.storage import is_remote
    what = f"{type(e).__name__}: {e}".replace("\n", " ")
    local = getattr(e, "filename", None)
    if is_remote(root) and isinstance(local, str) and os.path.isabs(local):  # the mirror, not the store
        return (f"local mirror of {root}: {what}; $SKILLPIPE_CACHE_DIR (default ~/.cache/skillpipe) must be a "
                "writable folder with room for the run")
    if is_remote(root):
        return (f"object storage {root}: {what}; check the endpoint (AWS_ENDPOINT_URL or "
                "SKILLPIPE_STORAGE_OPTIONS), the credentials and that the bucket exists")
    return f"{root}: {what}"


def _missing_package_message(e: ImportError, uri: str, option: str = "--root") -> str:
    """One line for fsspec's ``ImportError`` ``e`` when the package of ``uri``'s scheme (gcsfs for
    ``gs://``, adlfs for ``az://``) is not installed: which package, and the pip command that
    installs it into the environment running skillpipe. ``option``: the CLI option that gave
    ``uri`` ("" for an argument)."""
    scheme = uri.split("://", 1)[0]
    cause = e.__cause__ if isinstance(e.__cause__, ImportError) else e
    package = (getattr(cause, "name", None) or "").split(".")[0]
    if not package:  # fsspec's registry names the class, whose top module is the package
        from fsspec.registry import known_implementations
        package = known_implementations.get(scheme, {}).get("class", "").split(".")[0]
    pip = os.path.join(os.path.dirname(sys.executable), "pip")
    if pip.startswith(os.getcwd() + os.sep):
        pip = os.path.relpath(pip)
    what = f"package {package}" if package else "a package that is not installed"
    how = f"; install it into this environment: {pip} install {package}" if package else ""
    return f"{option + ' ' if option else ''}{uri}: the {scheme}:// scheme needs {what} ({e}){how}"


def _storage_failure(e: BaseException, uri: str, option: str = "--root") -> str:
    """The one error line for ``e`` raised by the storage behind ``uri``: the scheme's package is
    missing (:func:`_missing_package_message`), else a backend error (:func:`_storage_message`)."""
    if isinstance(e, ImportError):
        return _missing_package_message(e, uri, option)
    return _storage_message(e, uri)


def _user_message(msg: str, root: str) -> str:
    """``msg`` as the user should read it: for an object-storage root the local mirror folder is
    named by the root URI, and a suggested ``skillpipe run`` command gets the ``--root`` given."""
    from pipeline.core.storage import is_remote
    from pipeline.engine.remote import mirror_dir
    if is_remote(root):
        msg = msg.replace(mirror_dir(root), root.rstrip("/"))
    if os.path.normpath(root) != ".":
        msg = msg.replace("skillpipe run --run-id", f"skillpipe run --root {root} --run-id")
    return msg


def _show_uri(local_path: str, root: str) -> str:
    """Where the user finds the artifact at ``local_path``: the remote URI for an object-storage
    root (``local_path`` is then in its mirror), else the path itself."""
    from pipeline.core.storage import is_remote
    from pipeline.engine.remote import mirror_dir
    if not is_remote(root):
        return local_path
    rel = os.path.relpath(local_path, mirror_dir(root)).replace(os.sep, "/")
    return f"{root.rstrip('/')}/{rel}"


LLM_MODE_HELP = ("online (one concurrent call per request) or batch (each LLM stage as one job of the endpoint's "
                 "Batch API: half price, answers within 24 h; a killed run resumes polling the same job); default: "
                 "llm.mode of --config, else online")


@app.command()
def run(
    input: Optional[str] = typer.Option(None, "--input", "-i", help="trace file or folder (default: the run's previous input)"),
    env: str = typer.Option("auto", help="environment of every record: auto (detect per record) | alfworld | "
                                         "webshop | search | textworld"),
    format: Optional[str] = typer.Option(None, "--format", help="input format for every file (default: auto-detect per file)"),
    run_id: str = typer.Option("default", "--run-id", help="run id (letters, digits, -_. ; at most 128 bytes); outputs "
                                                        "go to ROOT/runs/RUN_ID/<stage>/. One process at a time per "
                                                        "run id: a second one exits 1 at once, naming the holder"),
    root: str = typer.Option(".", help="folder that holds runs/, or an fsspec URI (s3://bucket/prefix, gs://...) "
                             "shared by workers: stages then work on a local mirror under $SKILLPIPE_CACHE_DIR "
                             "(default ~/.cache/skillpipe) and commit each artifact to the URI; endpoint and credentials "
                             "from the AWS variables or $SKILLPIPE_STORAGE_OPTIONS (JSON for fsspec, e.g. "
                             "{\"client_kwargs\": {\"endpoint_url\": \"http://127.0.0.1:9000\"}}); a stage or shard "
                             "is leased while it runs ($SKILLPIPE_LEASE_S seconds, default 120, renewed). "
                             "See docs/object_storage.md"),
    stages: Optional[str] = typer.Option(None, help=f"comma-separated subset of: {', '.join(STAGES)} (default: all)"),
    config: Optional[str] = typer.Option(None, "--config", "-c", help=f"YAML config file (sections: {', '.join(section_names())}); "
                                         "every key with its default and help: skillpipe config --show"),
    llm_base_url: Optional[str] = typer.Option(None, help="OpenAI-compatible endpoint (default: start the embedded server)"),
    llm_model: Optional[str] = typer.Option(None, help="model name at that endpoint"),
    llm_api_key_env: Optional[str] = typer.Option(None, help="name of the env var holding the API key"),
    llm_mode: Optional[str] = typer.Option(None, "--llm-mode", help=LLM_MODE_HELP),
    force: bool = typer.Option(False, help="rerun stages even when their fingerprint is unchanged"),
    shards: Optional[int] = typer.Option(None, "--shards", min=0,
                                         help="split the input into N shards of whole folders, balanced by bytes; the "
                                              "map stages (parse, remove_loops, verify, memory, distill, build_pairs) run per "
                                              "shard, one after another (under Airflow: in parallel), into "
                                              "<stage>/shard-NNNNN/, and an unchanged shard is skipped; the export is "
                                              "the same as with one shard. 0 = one shard per 256 MB of input; never "
                                              "more shards than input folders. Default: the run's previous plan, "
                                              "else 0. A new count is taken when parse runs (--stages parse,...)"),
):
    """Run the pipeline (or some stages of it) and print a summary table.

    Exit 0 when every requested stage was written (a stage whose failed LLM requests stay under
    llm.max_endpoint_failure_rate is written, its raw answers quarantined, shown "incomplete" and
    retried by the next plain run; no trajectory read: with a warning); 1 when a stage failed or
    another process holds the run; 2 for a usage error (also: --stages leaves out an upstream
    stage the run has not written, checked before any stage runs)."""
    root = _plain_path(root)
    cfg = _checked_run_config(run_id, config, env, format, llm_base_url, llm_model, llm_api_key_env, llm_mode)
    names = _parse_stages(stages)
    reads_input = names is None or "parse" in names
    if input and not reads_input:
        err.print(f"note: --input is read by the parse stage only; stages {','.join(names)} read run "
                  f"{run_id}'s artifacts (add parse to --stages to read {input})", highlight=False, markup=False)
    input_path = _input_path(input, root, run_id, reads_input)
    _check_upstreams(root, run_id, names, input_path)
    exit_on_sigterm()
    _run_and_summarise(root, run_id, os.path.abspath(input_path) if input_path else "", cfg,
                       dict(env=env, stages=names, force=force, shards=shards))


def _checked_run_config(run_id: str, *options: str | None):
    """The run's config (:func:`pipeline.runconfig.run_config` of ``options``: config file,
    env, format, LLM URL, model, key variable, mode) once ``run_id`` is valid; a usage error
    (exit 2) naming the option otherwise."""
    from pipeline.runconfig import OptionError, run_config
    from pipeline.engine.runner import check_run_id
    try:
        check_run_id(run_id)
        return run_config(*options)
    except OptionError as e:
        raise typer.BadParameter(str(e), param_hint=e.option)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--run-id")


_fork_hook_registered = False


def _exit_143(signum, frame):
    sys.exit(128 + signum)


def _default_sigterm_in_child() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def exit_on_sigterm() -> None:
    """Make SIGTERM (timeout, Slurm, Kubernetes, systemd, Airflow) unwind like Ctrl-C, exit
    status 143: ``finally`` blocks run, the embedded server and the pool workers are stopped.

    A process forked from this one (a pool worker) gets SIGTERM's default action back: a Python
    handler only sets a flag that the main thread acts on between bytecodes, so a child blocked
    in C (a lock, a pipe) would never act on it and would outlive its parent's ``terminate``."""
    global _fork_hook_registered
    signal.signal(signal.SIGTERM, _exit_143)
    if not _fork_hook_registered:  # os.register_at_fork hooks cannot be removed: register once
        os.register_at_fork(after_in_child=_default_sigterm_in_child)
        atexit.register(ignore_late_sigterm)
        _fork_hook_registered = True


def ignore_late_sigterm() -> None:
    """Ignore SIGTERM from here on (an ``atexit`` hook of :func:`exit_on_sigterm`): the process
    is exiting with the status it reached (0, 1 or the handler's 143). Python drops its own
    handler after the ``atexit`` hooks, while the interpreter shuts down (~0.15 s with pyarrow
    and pandas loaded), and a SIGTERM landing then killed the process by the signal (status
    -15). Run at exit only, so that a process calling the CLI in-process (tests) keeps SIGTERM's
    disposition for the children it starts later: an ignored signal stays ignored across exec."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _input_path(given: str | None, root: str, run_id: str, reads_input: bool) -> str:
    """The input the run reads: ``given``, else the one run ``run_id`` recorded; a usage error
    (exit 2) when parse runs and there is none, one ``error:`` line when the storage fails."""
    from pipeline.runconfig import OptionError, check_run_input
    from pipeline.core.storage import RootMissing, check_bucket, is_remote
    try:
        if is_remote(root):
            check_bucket(root)
        previous = _previous_input(root, run_id) if reads_input or not given else ""
    except RootMissing as e:
        _fail(str(e))
    except (ImportError, ValueError) + _storage_errors() as e:  # ImportError: fsspec lacks the scheme's package
        _fail(_storage_failure(e, root))
    if given and previous and reads_input and os.path.abspath(given) != previous:
        err.print(f"note: run {run_id} was built from {previous}; parse now reads {os.path.abspath(given)} and the "
                  "later stages follow it (another --run-id keeps both runs)", highlight=False, markup=False)
    input_path = given or previous
    try:
        check_run_input(input_path, reads_input)
    except OptionError as e:
        msg = str(e)
        if not input_path:  # no input given nor recorded: name where the previous run was looked for
            msg = (f"required for a new run ({root.rstrip('/')}/runs/{run_id} has no parse artifact to take the "
                   "previous input from)")
        raise typer.BadParameter(msg, param_hint=e.option)
    return input_path


def _has_artifact(root: str, run_id: str, stage: str) -> bool:
    """Whether run ``run_id`` under ``root`` has anything written for ``stage``: its stage
    manifest, or a shard folder (a sharded stage whose collect step has not run yet). Whether
    that artifact is complete, intact and fresh is the runner's check (its errors say which)."""
    from pipeline.core.artifacts import MANIFEST, ArtifactStore
    from pipeline.core.storage import is_remote, remote_fs
    from pipeline.engine.remote import RemoteRun
    from pipeline.core.layout import is_shard_id
    if is_remote(root):
        fs, base = remote_fs(root)
        has_manifest, shards = RemoteRun(fs, base, run_id).listing(stage)  # one LIST
        return has_manifest or bool(shards)
    folder = ArtifactStore(root, run_id).stage_dir(stage)
    if os.path.exists(os.path.join(folder, MANIFEST)):
        return True
    return os.path.isdir(folder) and any(is_shard_id(d) and os.path.exists(os.path.join(folder, d, MANIFEST))
                                         for d in os.listdir(folder))


def _check_upstreams(root: str, run_id: str, names: list[str] | None, input_path: str) -> None:
    """Exit 2 before any stage runs when a stage in ``names`` (the ``--stages`` given; ``None``:
    every stage, nothing to check) reads an upstream stage that is neither in ``names`` nor
    written in run ``run_id``: one ``error:`` line naming each such upstream and a ``skillpipe
    run`` command whose ``--stages`` adds every stage missing, transitively. One look per
    upstream not requested (a LIST on object storage); a storage error is the usual one
    ``error:`` line (exit 1)."""
    from pipeline.stages import get_stage
    if names is None:
        return
    present: dict[str, bool] = {}

    def missing(stage: str, wanted: set[str]) -> list[str]:
        out = []
        for up in get_stage(stage).inputs:
            if up not in wanted:
                if up not in present:
                    present[up] = _has_artifact(root, run_id, up)
                if not present[up]:
                    out.append(up)
        return out

    try:
        gaps = {s: missing(s, set(names)) for s in names}
        wanted = set(names)
        while True:  # the stages to add: the missing upstreams, then theirs
            more = {up for s in wanted for up in missing(s, wanted)}
            if not more:
                break
            wanted |= more
    except (ImportError, ValueError) + _storage_errors() as e:  # ImportError: fsspec lacks the scheme's package
        _fail(_storage_failure(e, root))
    gaps = {s: ups for s, ups in gaps.items() if ups}
    if not gaps:
        return
    order = [s for s in STAGES if s in wanted]
    command = ["skillpipe run"] + ([f"--root {root}"] if os.path.normpath(root) != "." else []) + [f"--run-id {run_id}"]
    if "parse" in wanted:
        command.append(f"--input {input_path or 'PATH'}")
    if len(order) < len(STAGES):
        command.append(f"--stages {','.join(order)}")
    needs = "; ".join(f"{s} reads {', '.join(ups)}" for s, ups in gaps.items())
    _fail(f"--stages {','.join(names)}: nothing was run: {needs}, which --stages does not include and run "
          f"{run_id} has not written yet. Run them too: {' '.join(command)}"
          f"{'' if len(order) < len(STAGES) else ' (every stage)'}", code=2)


def _run_and_summarise(root: str, run_id: str, input_path: str, cfg, options: dict) -> None:
    """``run_pipeline`` with ``options`` (env, stages, force, shards), then the summary; every
    failure a user can meet is one ``error:`` line (exit 1; 130 for Ctrl-C)."""
    from pipeline.core.artifacts import ArtifactError
    from pipeline.engine.runner import CountMismatch, run_pipeline
    t0 = time.monotonic()
    try:
        results = run_pipeline(root, run_id, input_path, cfg, log=lambda m: err.print(m, highlight=False, markup=False),
                               **options)
    except (ArtifactError, CountMismatch, ValueError, RuntimeError) as e:
        _fail(_user_message(str(e), root))
    except ImportError as e:  # fsspec: the package of a protocol (gcsfs, adlfs) is not installed
        _fail(_missing_package_message(e, root))
    except _storage_errors() as e:
        _fail(_user_message(_storage_message(e, root), root))
    except KeyboardInterrupt:
        _fail("interrupted: the stages and shards written so far are kept (each is written whole or not at all); "
              "rerun to go on from there (without --force, what is done is skipped)", code=130)
    print_summary(results, time.monotonic() - t0, root)
    _warn_nothing_read(results, root, input_path)


def _warn_nothing_read(results, root: str, input_path: str) -> None:
    """One ``warning:`` line on stderr when parse (in ``results``) kept no trajectory: the run
    then succeeds (exit 0: every unreadable file is quarantined as designed) with nothing to
    work on. The line gives parse's quarantine reasons and the command that lists them."""
    parse = next((r for r in results if r.stage == "parse"), None)
    if parse is None or parse.manifest.get("counts", {}).get("out", 0):
        return
    c = parse.manifest.get("counts", {})
    reasons = ", ".join(f"{k}={v}" for k, v in c.get("quarantine_reasons", {}).items())
    why = (f"parse quarantined all {c.get('quarantined', 0)} item(s) it found ({reasons})" if c.get("quarantined")
           else "parse found no trace record in it")
    source = input_path or parse.manifest.get("input_path") or "the input"
    err.print(f"warning: no trajectory was read from {source}: {why}; see each file and reason with "
              f"skillpipe inspect {_show_uri(parse.uri, root)} --quarantine", highlight=False, markup=False,
              soft_wrap=True)


def _fail(message: str, code: int = 1):
    """Print ``error: message`` (one line, markup-escaped: messages start with "[stage]") and exit."""
    err.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)  # one line: commands stay copyable
    raise typer.Exit(code)


def _llm_cell(llm: dict, skipped: bool) -> str:
    """The summary's LLM cell of a stage: ``calls / cache hits / tokens``, the cached prompt
    tokens in brackets when the endpoint reported any, the batch jobs in batch mode."""
    if not llm:
        return "-"
    if skipped:
        return "0 (unchanged)"
    cell = f"{llm.get('calls', 0)} / {llm.get('cache_hits', 0)} / {llm.get('prompt_tokens', 0) + llm.get('completion_tokens', 0)}"
    if llm.get("cached_prompt_tokens"):
        cell += f" ({llm['cached_prompt_tokens']})"
    return cell + (f", batch ({llm.get('batches', 0)} jobs)" if llm.get("mode") == "batch" else "")


def _status(result) -> str:
    """The status cell of a stage in the run summary: ``incomplete`` when its manifest says a plain
    rerun retries failed LLM requests (:func:`pipeline.core.manifest.request_failures`), else
    ``ran`` or ``skipped (unchanged)``; ``(see below)`` when the sentence under the table says more."""
    from pipeline.core.manifest import request_failures
    f = request_failures(result.manifest)
    status = "incomplete" if f.retried else "skipped (unchanged)" if result.skipped else "ran"
    return f"{status} (see below)" if f.total else status


def print_summary(results, wall: float, root: str = ".") -> None:
    """Rich table: rows in/out/quarantined per stage with reasons, LLM use, wall time, status, and
    under it what failed LLM requests mean (:func:`pipeline.core.manifest.failure_sentence`) and
    where each artifact is (its URI under an object-storage ``root``, with the local mirror named
    once)."""
    from pipeline.core.manifest import failure_sentence
    t = Table(title="skillpipe run summary", show_lines=False)
    for col in ("stage", "in", "out", "quarantined (reasons)", "LLM calls / cache / tokens (cached)", "wall s",
                "status"):
        t.add_column(col)
    calls = tokens = cached = 0
    for r in results:
        c = r.manifest.get("counts", {})
        llm = r.manifest.get("llm") or {}
        reasons = ", ".join(f"{k}={v}" for k, v in c.get("quarantine_reasons", {}).items())
        n_in = str(c.get("in", ""))
        if c.get("units_in") not in (None, c.get("in")):
            n_in += f" (→{c['units_in']})"
        tok = llm.get("prompt_tokens", 0) + llm.get("completion_tokens", 0)
        if not r.skipped:
            calls += llm.get("calls", 0)
            tokens += tok
            cached += llm.get("cached_prompt_tokens", 0)
        llm_s = _llm_cell(llm, r.skipped)
        n_out = str(c.get("out", ""))
        if c.get("units_out") not in (None, c.get("out")):
            n_out += f" ({c['units_out']} used)"
        t.add_row(r.stage, n_in, n_out, f"{c.get('quarantined', 0)} {reasons}".strip(),
                  llm_s, f"{r.manifest.get('wall_s', 0):.1f}", _status(r))
    console.print(t)
    for r in results:  # what each manifest records about failed LLM requests, in every reader's words
        if failure_sentence(r.manifest):
            console.print(f"  stage {r.stage} {failure_sentence(r.manifest)}", highlight=False, soft_wrap=True)
    console.print("in (→N): the N units a stage expands its input into (build_pairs: candidate pairs); out (N used): "
                  "N inputs went into the output (skills: memories -> skills). Units in = used + quarantined.",
                  highlight=False)
    console.print(f"LLM calls this run: {calls}, tokens: {tokens} (cached prompt tokens: {cached}); wall time "
                  f"{wall:.1f} s")
    verify = next((r for r in results if r.stage == "verify"), None)
    if verify is not None:
        print_verify(verify.manifest.get("counters") or {}, _show_uri(verify.uri, root))
    for r in results:
        console.print(f"  {r.stage:12s} {_show_uri(r.uri, root)}", highlight=False, soft_wrap=True)
    export = next((r for r in results if r.stage == "export"), None)
    if export:
        for f in ("sft_train.jsonl", "sft_val.jsonl", "skill_bank.json", "DATASET_CARD.md"):
            p = os.path.join(export.uri, f)
            if os.path.exists(p):  # on object storage the committed copy sits under export/_attempts/<id>/
                local = " (local copy of the committed export)" if _show_uri(p, root) != p else ""
                console.print(f"  output: {p}{local}", highlight=False, soft_wrap=True)
    if results and _show_uri(results[0].uri, root) != results[0].uri:
        console.print(f"  local mirror: {os.path.dirname(results[0].uri.rstrip(os.sep))} "
                      "(a working copy; read remote artifacts with skillpipe inspect URI)",
                      highlight=False, soft_wrap=True)



def print_verify(counters: dict, uri: str) -> None:
    """The verify stage's counts: one table by source (verdicts, findings per rule), one by rule."""
    from pipeline.verify import summary
    t = Table(title="verify: environment rules by source", show_lines=False)
    for col in ("source", *summary.COLUMNS, "findings (steps per rule)"):
        t.add_column(col)
    for r in summary.source_rows(counters):
        t.add_row(r["source"], *(str(r[k]) for k in summary.COLUMNS), r["rules"])
    console.print(t)
    rules = Table(title="verify: findings by rule", show_lines=False)
    for col in ("checker.rule", "steps", "trajectories"):
        rules.add_column(col)
    for r in summary.rule_rows(counters):
        rules.add_row(r["rule"], str(r["steps"]), str(r["trajectories"]))
    console.print(rules)
    console.print(summary.headline(counters) + f"; why each demoted success left the SFT path: skillpipe inspect "
                  f"{uri} --quarantine", highlight=False, soft_wrap=True)


@app.command()
def inspect(
    path: str = typer.Argument(..., help="a stage folder (runs/<id>/<stage>), one shard of it (<stage>/shard-NNNNN), "
                              "a run folder (runs/<id>), its quarantine folder, or a .parquet file; on object "
                              "storage the URI of one of these folders (s3://bucket/prefix/runs/<id>/<stage>), "
                              "pulled into the local mirror (see skillpipe run --help, --root)"),
    rows: int = typer.Option(3, help="sample rows to show"),
    quarantine: bool = typer.Option(False, help="show the stage's quarantine artifact"),
    lineage: Optional[str] = typer.Option(None, help="PAIR_ID: walk one SFT pair back to its sources"),
    html: Optional[str] = typer.Option(None, "--html", help="write the artifact as a self-contained HTML page "
                                       "to this file instead (schema, counts, a table of --rows sample rows)"),
):
    """Show schema, row counts and sample rows of an artifact, or the lineage of one SFT pair."""
    from pipeline.core.artifacts import ArtifactError
    from pipeline.core.storage import check_bucket, is_remote
    from pipeline.inspect import describe, lineage_report
    path = _plain_path(path)
    try:
        if is_remote(path):
            check_bucket(path, option="")  # else "no complete artifact" for a bucket that is not there
        if html:
            from pipeline.engine.remote import open_artifact
            from pipeline.report.artifact import write_artifact_html
            local = open_artifact(path)  # an object-storage URI: pulled into the mirror; a path: itself
            console.print(f"wrote {write_artifact_html(local, html, rows=rows, quarantine=quarantine)}",
                          highlight=False, markup=False)
        elif lineage:
            console.print(lineage_report(path, lineage))
        else:
            console.print(describe(path, rows=rows, quarantine=quarantine))
    except (FileNotFoundError, KeyError, ValueError, ArtifactError) as e:
        err.print(f"[bold red]error:[/] {escape(str(e).strip(chr(34) + chr(39)))}")
        raise typer.Exit(1)
    except (ImportError,) + _storage_errors() as e:  # ImportError: fsspec lacks the scheme's package
        _fail(_storage_failure(e, path, option=""))


@app.command()
def report(
    run_id: str = typer.Argument(..., help="the run to report on (ROOT/runs/RUN_ID)"),
    root: str = typer.Option(".", help="folder that holds runs/ and banks/, or the object-storage URI the run was "
                             "written to (s3://bucket/prefix; the run is pulled into the local mirror first, and the "
                             "report is written there unless --out is given)"),
    out: Optional[str] = typer.Option(None, "--out", help="HTML file to write (default: ROOT/runs/RUN_ID/report.html); "
                                      "the PNGs go to <out stem>_png/"),
    price_prompt: float = typer.Option(DEFAULT_PRICE_PROMPT, min=0,
                                       help="USD per 1M prompt tokens, for the cost estimate (default: gpt-4o-mini)"),
    price_completion: float = typer.Option(DEFAULT_PRICE_COMPLETION, min=0,
                                           help="USD per 1M completion tokens, for the cost estimate"),
    price_cached: float = typer.Option(DEFAULT_PRICE_CACHED, min=0,
                                       help="USD per 1M cached prompt tokens (the endpoint's "
                                            "prompt_tokens_details.cached_tokens), for the cost estimate"),
):
    """Write one self-contained HTML report of a run (funnel, LLM use and cost, skill bank, data
    quality, training, lineage explorer) and print its path."""
    from pipeline.core.storage import check_bucket, is_remote
    from pipeline.engine.remote import pull_run
    from pipeline.report import build_report
    root = bank_root = _plain_path(root)  # on object storage the bank history is read in the bucket
    try:
        if is_remote(root):
            check_bucket(root)  # else s3fs's bare "The specified bucket does not exist"
            root = os.path.dirname(os.path.dirname(pull_run(root, run_id)))  # the mirror's root folder
    except FileNotFoundError as e:
        _fail(str(e))
    except (ImportError, ValueError) + _storage_errors() as e:  # ImportError: fsspec lacks the scheme's package
        _fail(_storage_failure(e, root))
    try:
        res = build_report(root, run_id, out, price_prompt=price_prompt, price_completion=price_completion,
                           price_cached=price_cached, bank_root=bank_root,
                           progress=lambda m: err.print(f"[report] {m}", highlight=False, markup=False))
    except (FileNotFoundError, ValueError, OSError) as e:
        err.print(f"[bold red]error:[/] {escape(str(e))}")
        raise typer.Exit(1)
    err.print(f"[report] {res['bytes'] / 1e6:.2f} MB, {len(res['pngs'])} charts (PNGs in {res['png_dir']})",
              highlight=False, markup=False)
    console.print(res["path"], highlight=False, markup=False, soft_wrap=True)


@app.command("config")
def config_show(
    ctx: typer.Context,
    show: bool = typer.Option(False, "--show", help="print the effective config: the defaults merged with "
                              "--config FILE, as YAML with each key's help text as a comment"),
    config: Optional[str] = typer.Option(None, "--config", "-c", help="YAML config file to merge over the defaults "
                                         "(the file skillpipe run --config reads)"),
    as_json: bool = typer.Option(False, "--json", help="with --show: plain JSON, no comments"),
):
    """Show the pipeline config: every section and key with its effective value and help text.
    The YAML printed is itself a valid --config file."""
    if not show:
        console.print(ctx.get_help(), highlight=False, markup=False)
        return
    from pipeline.confighelp import commented_yaml
    from pipeline.core.config import to_dict
    cfg = _load_config_option(config)
    if as_json:  # typer.echo, not rich: values are printed verbatim (no markup, emoji or wrapping)
        typer.echo(json.dumps(to_dict(cfg), indent=2, ensure_ascii=False))
        return
    origin = f"the defaults merged with {config}" if config else "the defaults (no --config file)"
    typer.echo(commented_yaml(cfg, f"skillpipe effective config: {origin}"), nl=False)


def _load_config_option(path: Optional[str]):
    """The config of a ``--config`` option (``None`` = defaults); a file that cannot be read or
    holds a bad value is a usage error (exit 2) naming the file and the key."""
    import yaml
    from pipeline.runconfig import load_run_config
    try:
        return load_run_config(path)
    except (ValueError, TypeError, OSError, yaml.YAMLError) as e:
        raise typer.BadParameter(f"config {path}: {e}".replace("\n", " "), param_hint="--config")


@app.command("serve-llm")
def serve_llm(port: int = typer.Option(8080, help="loopback port"),
              ctx_size: int = typer.Option(8192, help="context window in tokens"),
              model: str = typer.Option("", "--model", help="embedded model alias (default: the default teacher, "
                                        "qwen2.5-coder-1.5b-instruct); see `skillpipe models list`"),
              check: bool = typer.Option(False, "--check", help="start the server on a free loopback port, "
                                         "ask one tiny completion, stop it; print the model and latency, "
                                         "exit 1 with the cause when it cannot answer")):
    """Start the embedded OpenAI-compatible endpoint (a pinned local GGUF) in the foreground."""
    from pipeline.llm.weights import MODELS
    if model and model not in MODELS:
        raise typer.BadParameter(f"unknown embedded model {model!r}; known: {', '.join(MODELS)}", param_hint="--model")
    if check:
        _check_llm(model)
        return
    from pipeline.llm.server import serve_foreground
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            err.print(f"[bold red]error:[/] cannot listen on 127.0.0.1:{port}: {e.strerror}")
            raise typer.Exit(1)
    try:
        rc = serve_foreground(port=port, ctx_size=ctx_size, model=model)
    except RuntimeError as e:  # WeightsError: not installed or not verified
        err.print(f"[bold red]error:[/] {escape(str(e))}")
        raise typer.Exit(1)
    if rc not in (0, None, -2, -15):  # Ctrl-C / SIGTERM are normal stops
        err.print(f"[bold red]error:[/] the LLM server exited with code {rc} (is port {port} in use?)")
        raise typer.Exit(1)


def _check_llm(model: str = "") -> None:
    """``serve-llm --check`` (the install step runs it): one tiny completion or a named cause."""
    from pipeline.llm.server import check_embedded
    try:
        r = check_embedded(model=model)
    except (RuntimeError, TimeoutError, FileNotFoundError) as e:  # ServerDied is a RuntimeError
        err.print(f"[bold red]error:[/] the embedded LLM server cannot answer: {escape(str(e))}")
        raise typer.Exit(1)
    console.print(f"ok: embedded LLM {r['model']} ({r['engine']}) answered {r['completion_tokens']} tokens in "
                  f"{r['latency_s']:.2f} s (server start {r['startup_s']:.1f} s): {r['text']!r}",
                  highlight=False, markup=False, soft_wrap=True)


def main():  # pragma: no cover - console entry
    """Run the ``skillpipe`` Typer app on ``sys.argv`` (the console script calls ``app`` itself)."""
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
