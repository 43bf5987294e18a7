"""`skillpipe bank ...`: list, show, diff, restore and export the versioned skill banks.

Mounted by ``pipeline/cli.py`` as ``app.add_typer(bank_app, name="bank")``. Examples::

    skillpipe bank list --root .                      # versions, parents, creators; * = HEAD
    skillpipe bank list --root s3://bucket/prefix     # the banks of runs written to object storage
    skillpipe bank show bank-3f2a                     # one version (a unique prefix is enough)
    skillpipe bank diff bank-3f2a HEAD                # added / removed skills, source changes
    skillpipe bank restore bank-3f2a                  # make an older version current again
    skillpipe bank export HEAD --out out/ --format skillrl    # skill_bank[_<env>].json (SkillRL)
    skillpipe bank export HEAD --out skills/ --format skill-md  # one SKILL.md folder per skill
"""
from __future__ import annotations

import json

import typer
from rich.console import Console

from pipeline.bank.export import export_skill_md, export_skillrl
from pipeline.bank.store import BankError, BankStore, diff, label

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Versioned skill banks under ROOT/banks: list, show, diff, restore, export.")
console = Console()
ROOT = typer.Option(".", "--root", help="folder that holds runs/ and banks/, or the object-storage URI the runs "
                    "were given (s3://bucket/prefix: banks/ is read and written in the bucket)")


def _store(root: str) -> BankStore:
    """The bank history of ``root``; for an object-storage root its bucket must exist (else one
    error line naming it) and its storage options be valid."""
    from pipeline.core.storage import RootMissing, check_bucket, is_remote
    try:
        if is_remote(root):
            check_bucket(root)
        return BankStore(root)
    except (RootMissing, ImportError, ValueError) as e:  # ImportError: fsspec lacks the scheme's package
        _fail(e)


def _fail(e: Exception) -> None:
    Console(stderr=True).print(f"[red]error:[/red] {e}")
    raise typer.Exit(1)


@app.command("list")
def list_(root: str = ROOT) -> None:
    """Every stored version, oldest first; the current one (HEAD) is marked with *."""
    store = _store(root)
    head = store.head()
    if not store.versions():  # say so: an empty listing reads like a broken command
        console.print(f"no bank registered under {store.dir} yet (the skills stage stores a bank only when it "
                      "keeps a skill; rl grpo stores the bank it starts from)", markup=False, highlight=False)
        return
    for v in store.versions():  # plain lines, not a table: full ids stay copyable and greppable
        r = store.get(v).record
        c = r["counts"]
        console.print(f"{'*' if v == head else ' '} {v}  parent={r['parent'] or '-'}  {r['created_at']}  "
                      f"{r['run_id']}/{r['stage']}  general={c['general']} task_specific={c['task_specific']} "
                      f"mistake={c['mistake']}", markup=False, highlight=False, soft_wrap=True)


@app.command()
def show(ref: str = typer.Argument("HEAD", help="version id, unique prefix or HEAD"), root: str = ROOT,
         as_json: bool = typer.Option(False, "--json", help="print the record and rows as JSON")) -> None:
    """One version: its record, then its skills by kind and category, each with its measured
    usefulness (score, 95 % interval, held-out steps) when the skills stage scored it."""
    try:
        bank = _store(root).get(ref)
    except BankError as e:
        _fail(e)
    if as_json:
        console.print_json(json.dumps({"record": bank.record, "rows": bank.rows}, ensure_ascii=False))
        return
    r = bank.record
    console.print(f"{r['version']}  parent={r['parent'] or '-'}  created {r['created_at']} by "
                  f"{r['run_id']}/{r['stage']}  envs={','.join(r['envs'])}")
    for s in bank.rows:
        where = f"{s['kind']}/{s['category']}" if s["category"] else s["kind"]
        u = s.get("usefulness")
        score = f"  usefulness {u['score']:+.3f} [{u['lo']:+.3f}, {u['hi']:+.3f}] n={u['n']}" if u else ""
        console.print(f"  {s['skill_id']}  [{s.get('env') or '-'}] {where}: {label(s)}  "
                      f"(memories: {len(s['source_memory_ids'])}){score}", markup=False, highlight=False, soft_wrap=True)


@app.command("diff")
def diff_(old: str = typer.Argument(..., help="older version (id, unique prefix or HEAD)"),
          new: str = typer.Argument("HEAD", help="newer version (id, unique prefix or HEAD)"),
          root: str = ROOT) -> None:
    """Skills added (+), removed (-) and with changed source memories (~) from OLD to NEW."""
    store = _store(root)
    try:
        d = diff(store.get(old), store.get(new))
    except BankError as e:
        _fail(e)
    for r in d["added"]:
        console.print(f"+ {r['skill_id']}  {r['kind']}  {label(r)}", markup=False, highlight=False, soft_wrap=True)
    for r in d["removed"]:
        console.print(f"- {r['skill_id']}  {r['kind']}  {label(r)}", markup=False, highlight=False, soft_wrap=True)
    for c in d["sources_changed"]:
        console.print(f"~ {c['skill_id']}  {c['title']}  memories +{len(c['added_memory_ids'])} "
                      f"-{len(c['removed_memory_ids'])}", markup=False, highlight=False, soft_wrap=True)
    console.print(f"{len(d['added'])} added, {len(d['removed'])} removed, {len(d['sources_changed'])} re-sourced")


@app.command()
def restore(ref: str = typer.Argument(..., help="version to make current"), root: str = ROOT,
            note: str = typer.Option("", help="why (kept in banks/history.jsonl)")) -> None:
    """Make an older version HEAD again (an event in the history; no version is deleted)."""
    try:
        bank = _store(root).restore(ref, note=note)
    except BankError as e:
        _fail(e)
    console.print(f"HEAD -> {bank.version}")


@app.command()
def export(ref: str = typer.Argument("HEAD", help="version to write (id, unique prefix or HEAD)"), out: str = typer.Option(..., "--out", help="output folder"),
           format: str = typer.Option("skillrl", "--format", help="skillrl (SkillRL JSON: skill_bank.json, or one skill_bank_<env>.json per env of a mixed bank) | skill-md"),
           root: str = ROOT) -> None:
    """Write a version as SkillRL JSON (``skill_bank.json``; a bank of several envs gives one
    ``skill_bank_<env>.json`` each) or as one SKILL.md folder per skill."""
    if format not in ("skillrl", "skill-md"):
        _fail(ValueError(f"--format must be skillrl or skill-md, got {format!r}"))
    try:
        bank = _store(root).get(ref)
    except BankError as e:
        _fail(e)
    paths = export_skillrl(bank, out) if format == "skillrl" else export_skill_md(bank, out)
    console.print(f"{bank.version}: wrote {len(paths)} file(s) under {out}")
