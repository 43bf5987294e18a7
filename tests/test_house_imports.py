"""House rule: the imports of ``pipeline``, ``sft`` and ``dags`` go one way, checked on the source with ``ast``.

The import graph has one arrow per import statement, at module level or inside a function (a lazy
import ties two modules just as firmly, it only hides it), from the importing module to the
module it names: ``from X import Y`` points at the module ``X.Y`` when there is one, else at
``X``; relative imports are resolved against their package. Two rules hold on it:

- no import cycle: a module never imports, through any chain, a module that imports it;
- the floors below the engine never reach up. The ground floor, ``pipeline/core/``, may import
  only :data:`GROUND_MAY_IMPORT`: itself, the package face ``pipeline`` (``__version__``) and
  ``pipeline/envs/`` (task knowledge per environment, a leaf that imports nothing else of the
  project). The stage contract, ``pipeline/stage/``, may import neither the stages it describes
  nor the engine that runs them (:data:`ABOVE_THE_CONTRACT`).

Each rule has a self-test on a small tree so that it cannot pass vacuously.
"""
from __future__ import annotations

import ast
import os

from tests.helpers.paths import REPO
from tests.test_house import python_files

GRAPH_DIRS = ("pipeline", "sft", "dags")
#: What the ground floor (pipeline.core.*) may import of the project: a name equal to one of
#: these or below it. Anything outside the project (the standard library, pyarrow...) is free.
GROUND_MAY_IMPORT = ("pipeline.core", "pipeline.envs")
#: The package face: ``pipeline/__init__.py`` only holds ``__version__``.
PACKAGE_FACE = "pipeline"
#: What the stage contract (pipeline.stage.*) must not import: the floors above it.
ABOVE_THE_CONTRACT = ("pipeline.stages", "pipeline.engine", "pipeline.bank", "pipeline.runconfig", "pipeline.cli",
                      "pipeline.inspect", "pipeline.report", "sft", "dags")


def module_of(relpath: str) -> tuple[str, bool]:
    """``(dotted module name, is a package)`` of a source file path relative to the repository."""
    parts = relpath[:-len(".py")].replace(os.sep, "/").split("/")
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _imported(node: ast.AST, module: str, is_package: bool) -> list[tuple[str, list[str]]]:
    """``(base module, names imported from it)`` of one import statement (names empty for ``import X``)."""
    if isinstance(node, ast.Import):
        return [(a.name, []) for a in node.names]
    package = module if is_package else module.rpartition(".")[0]
    for _ in range(node.level - 1):  # "from .. import x": one package further up per extra dot
        package = package.rpartition(".")[0]
    base = ".".join(p for p in (package if node.level else "", node.module or "") if p)
    return [(base, [a.name for a in node.names])]


def import_targets(source: str, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``source`` (module ``module``) imports anywhere in its body."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        for base, names in _imported(node, module, is_package):
            subs = {f"{base}.{n}" for n in names} & known  # "from X import Y": the module X.Y
            if subs:
                out |= subs
            if base in known and (not names or len(subs) < len(names)):
                out.add(base)
    out.discard(module)
    return out


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """``{module: modules it imports}`` of ``sources`` (``{path relative to the repository: source}``),
    arrows only between the modules of ``sources``."""
    modules = {rel: module_of(rel) for rel in sources}
    known = {name for name, _ in modules.values()}
    return {name: import_targets(sources[rel], name, is_package, known) for rel, (name, is_package) in modules.items()}


def house_graph() -> dict[str, set[str]]:
    """The import graph of :data:`GRAPH_DIRS` as they are on disk."""
    sources = {}
    for path in python_files(*GRAPH_DIRS):
        with open(path, encoding="utf-8") as f:
            sources[os.path.relpath(path, REPO)] = f.read()
    return import_graph(sources)


def _strong_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of ``graph`` (iterative: no recursion limit)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]

    def visit(root: str) -> None:
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while not component or component[-1] != node:
                        component.append(stack.pop())
                        on_stack.discard(component[-1])
                    found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter[0]
                counter[0] += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _cycle_through(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One cycle inside strongly connected ``component``, as ``[a, b, ..., a]`` (shortest from its first module)."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    todo = [start]
    while todo:
        node = todo.pop(0)
        for child in sorted(graph.get(node, ())):
            if child == start:
                return paths[node] + [start]
            if child in members and child not in paths:
                paths[child] = paths[node] + [child]
                todo.append(child)
    raise AssertionError(f"{component} is not strongly connected")


def import_cycles(graph: dict[str, set[str]]) -> list[str]:
    """``"a -> b -> a"`` for one cycle of every group of modules that import each other, followed
    by the whole group when it is larger than that cycle."""
    out = []
    for group in (c for c in _strong_components(graph) if len(c) > 1):
        cycle = _cycle_through(graph, group)
        more = f" (a group of {len(group)} that import each other: {', '.join(group)})" \
            if len(group) > len(cycle) - 1 else ""
        out.append(" -> ".join(cycle) + more)
    return out


def reaches(graph: dict[str, set[str]], floor: str, forbidden) -> list[str]:
    """``"a -> b"`` for every arrow from a module of ``floor`` (``floor`` or below it) for which
    ``forbidden(target)`` holds."""
    mine = [m for m in graph if m == floor or m.startswith(floor + ".")]
    return sorted(f"{m} -> {t}" for m in mine for t in graph[m] if forbidden(t))


def _within(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def above_the_ground(target: str) -> bool:
    """True for a module that ``pipeline.core`` must not import (see :data:`GROUND_MAY_IMPORT`)."""
    return target != PACKAGE_FACE and not _within(target, GROUND_MAY_IMPORT)


def above_the_contract(target: str) -> bool:
    """True for a module that ``pipeline.stage`` must not import (:data:`ABOVE_THE_CONTRACT`)."""
    return _within(target, ABOVE_THE_CONTRACT)


TOY = {
    "toy/__init__.py": "from toy.low import LIMIT\n",
    "toy/low.py": "import json\nLIMIT = 3\n\ndef later():\n    from toy import high\n    return high\n",
    "toy/high.py": "from toy import low, LIMIT\nfrom .mid import f\n",
    "toy/mid.py": "from . import low as _l\nfrom ..outside import z\n",
    "toy/sub/__init__.py": "from .. import mid\n",
}


def test_the_graph_reads_lazy_relative_and_from_imports():
    graph = import_graph(TOY)
    assert graph == {"toy": {"toy.low"}, "toy.low": {"toy.high"}, "toy.high": {"toy", "toy.low", "toy.mid"},
                     "toy.mid": {"toy.low"}, "toy.sub": {"toy.mid"}}


def test_a_cycle_is_found_and_named_even_through_a_function_level_import():
    cycles = import_cycles(import_graph(TOY))
    assert len(cycles) == 1
    assert cycles[0] == ("toy -> toy.low -> toy.high -> toy "
                         "(a group of 4 that import each other: toy, toy.high, toy.low, toy.mid)")
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert import_cycles({"a": {"b"}, "b": {"a"}, "c": {"b"}}) == ["a -> b -> a"]


def test_the_floor_rules_see_a_reach_upward():
    graph = {"pipeline.core.x": {"pipeline.core.y", "pipeline", "pipeline.envs.alfworld", "pipeline.engine.runner"},
             "pipeline.stage.stage": {"pipeline.core.x", "pipeline.stages"}, "pipeline.core.y": set()}
    assert reaches(graph, "pipeline.core", above_the_ground) == ["pipeline.core.x -> pipeline.engine.runner"]
    assert reaches(graph, "pipeline.stage", above_the_contract) == ["pipeline.stage.stage -> pipeline.stages"]


def test_the_house_has_no_import_cycle():
    graph = house_graph()
    assert len(graph) > 120 and sum(map(len, graph.values())) > 400  # the whole tree was read
    cycles = import_cycles(graph)
    assert not cycles, "these modules import each other (move the shared code down a floor):\n" + "\n".join(cycles)


def test_the_ground_floor_imports_nothing_above_it():
    graph = house_graph()
    assert len([m for m in graph if m.startswith("pipeline.core.")]) >= 10  # the ground floor was read
    found = reaches(graph, "pipeline.core", above_the_ground)
    assert not found, (f"pipeline.core may import only {', '.join(GROUND_MAY_IMPORT)} and {PACKAGE_FACE}:\n"
                       + "\n".join(found))
    leaf = reaches(graph, "pipeline.envs", lambda t: not _within(t, ("pipeline.envs",)))
    assert not leaf, "pipeline.envs stands below the ground floor and imports nothing else:\n" + "\n".join(leaf)


def test_the_stage_contract_imports_nothing_above_it():
    found = reaches(house_graph(), "pipeline.stage", above_the_contract)
    assert not found, "the stage contract must not import the floors above it:\n" + "\n".join(found)
