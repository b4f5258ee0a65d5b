"""The layers of DESIGN.md ("Layers, from the ground up"), pinned: every module of perfstack stands on a floor,
imports only from its own floor and the floors below, and no two modules import each other, directly or around
a loop.

The source is read with ast, nothing is run. Every import counts, those inside functions too (a lazy import ties
two files as surely as one at the top); an ``if TYPE_CHECKING:`` import counts for circles, as it does for
../shared/tools/import_circles.py, but not for floors, since it never runs. An import ties to the module it
names: ``from perfstack.records.fleet import FleetAnalysis`` is an import of records.fleet, not of the records
package's ``__init__``, which Python runs on the way; for circles, a package ``__init__`` that only hands names
on (its face) ties nothing itself, as in import_circles.py. Imports by name at run time (``discover``'s
registries, ``perfstack.profile`` reached through the package's ``__getattr__``) are not seen.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "perfstack"

# DESIGN.md's floors, from the ground up. A key names a module or a package (and everything under it that a
# longer key does not name); a module stands on the floor of its longest key. The package itself
# ("perfstack": __version__, the step()/report_loss() hooks) is its own key and covers nothing under it.
FLOORS: dict[str, int] = {
    # 1: words everything uses
    "perfstack": 1,
    "perfstack.errors": 1,
    "perfstack.units": 1,
    "perfstack.sources": 1,
    # Not in DESIGN.md's list; their real floor:
    "perfstack.severity": 1,  # the severities a Finding and the fleet's records name; model re-exports it
    "perfstack.discover": 1,  # standard library only; probes (6), rules and bench (7) find their modules with it,
    #                           so it cannot stand with audit and fleet (8)
    "perfstack._child": 1,  # standard library only: loaded by path into the user's process (profile, try)
    "perfstack.extras": 1,  # standard library only: the "pip install 'perfstack[x]'" hints
    # 2: reading and writing safely; the hardware table
    "perfstack.jsonload": 2,
    "perfstack.outfile": 2,
    "perfstack.specs": 2,
    "perfstack.redact": 2,
    # 3: the one seam to the machine
    "perfstack.host": 3,
    # 4: the section records, one tolerant record base
    "perfstack.records": 4,  # the record base (records.base) and every section's records
    "perfstack.loadtest.vocabulary": 4,  # the load test's fixed sets of words (mode, api): the records name them too
    # 5: the Run, made of the records below it
    "perfstack.model": 5,
    "perfstack.checks": 5,  # the one finding registry: the doctor's (7), the profile's and the load test's (6) checks
    # 6: collect and analyse
    "perfstack.probes": 6,
    "perfstack.profile": 6,
    "perfstack.profile.traceread": 6,  # reads a trace serially or in two halves; knows no event type of trace.py
    "perfstack.profile.tracehalf": 6,  # the second process of a split reading: trace.py's builder, traceread's frames
    "perfstack.profile.interrupt": 6,  # Ctrl-C held around the capture's own work: capture and the CLI
    "perfstack.estimate": 6,
    "perfstack.loadtest": 6,
    "perfstack.compare": 6,
    # 7: judge and measure
    "perfstack.rules": 7,
    "perfstack.bench": 7,
    "perfstack.trial": 7,  # perfstack try
    # 8: compose the jobs
    "perfstack.audit": 8,
    "perfstack.fleet": 8,
    # 9: render a Run
    "perfstack.report": 9,
    # 10: parse, call, print, exit
    "perfstack.cli": 10,  # cli.try_ included
    "perfstack.__main__": 10,  # python -m perfstack: the CLI's entry
}


def _modules() -> dict[str, Path]:
    mods = {}
    for f in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(f.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = f
    return mods


MODULES = _modules()


def floor(module: str) -> int | None:
    if module == PACKAGE:
        return FLOORS[PACKAGE]
    name = module
    while name != PACKAGE:
        if name in FLOORS:
            return FLOORS[name]
        name = name.rpartition(".")[0]
    return None


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            t = node.test
            if (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
                    isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"):
                for child in node.body:
                    lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imports() -> list[tuple[str, str, int, bool]]:
    """(importer, imported module, line, under TYPE_CHECKING) for every import of a perfstack module."""
    out = []
    for mod, f in MODULES.items():
        tree = ast.parse(f.read_text(encoding="utf-8"))
        typing_only = _type_checking_lines(tree)
        here = mod if f.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                subs = [f"{base}.{a.name}" for a in node.names]
                targets = [t for t in subs if t in MODULES] or [base]  # a name that is a module ties to it alone
            else:
                continue
            for t in targets:
                if t.split(".")[0] != PACKAGE:
                    continue
                target = _resolve(t)
                if target and target != mod:
                    out.append((mod, target, node.lineno, node.lineno in typing_only))
    return out


IMPORTS = _imports()


def _is_face(f: Path) -> bool:
    """An __init__.py that only hands names on (imports, a docstring, __all__)."""
    if f.name != "__init__.py":
        return False
    body = ast.parse(f.read_text(encoding="utf-8")).body
    return all(isinstance(n, (ast.Import, ast.ImportFrom))
               or (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
               or (isinstance(n, ast.Assign) and all(getattr(t, "id", "") == "__all__" for t in n.targets))
               for n in body)


def _where(mod: str, line: int) -> str:
    return f"{MODULES[mod].relative_to(SRC.parent)}:{line}"


def test_every_module_stands_on_a_floor():
    """A new module says where it stands: add it (or its package) to FLOORS."""
    missing = [m for m in MODULES if floor(m) is None]
    assert not missing, "modules with no floor in tests/test_layers.py FLOORS: " + ", ".join(missing)
    assert sorted(set(FLOORS.values())) == list(range(1, 11))


def test_every_floor_names_a_module():
    """FLOORS keeps up with the code: a key whose module or package is gone (renamed, moved) is removed."""
    gone = [k for k in FLOORS if k not in MODULES]
    assert not gone, "FLOORS names modules that do not exist: " + ", ".join(gone)


def upward(imports: list[tuple[str, str, int, bool]]) -> list[str]:
    """The imports that run and point up a floor, each named with its file and line."""
    return [f"{_where(a, line)}: {a} (floor {floor(a)}) imports {b} (floor {floor(b)})"
            for a, b, line, typing_only in imports if not typing_only and (floor(b) or 0) > (floor(a) or 0)]


def circles(imports: list[tuple[str, str, int, bool]]) -> list[str]:
    """The sets of modules that import each other, directly or around a loop, each with its imports."""
    faces = {m for m, f in MODULES.items() if _is_face(f)}
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for a, b, _, _ in imports:
        if b not in faces:
            edges[a].add(b)
    # Tarjan's strongly connected components, iteratively
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in MODULES:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        work = [(root, iter(sorted(edges[root])))]
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return [", ".join(c) + ": " + "; ".join(f"{a} -> {b}" for a in c for b in sorted(edges[a] & set(c)))
            for c in found]


def test_no_import_points_up_a_floor():
    up = upward(IMPORTS)
    assert not up, "imports that point up a floor (DESIGN.md, Layers):\n" + "\n".join(up)


def test_no_import_circle():
    found = circles(IMPORTS)
    assert not found, "import circles:\n" + "\n".join(found)


def test_the_checks_see_what_they_must():
    """The reading of imports itself: an import inside a function and one under TYPE_CHECKING are both seen,
    and an upward import or a circle is named."""
    seen = {(a, b, typing_only) for a, b, _, typing_only in IMPORTS}
    assert ("perfstack.model", "perfstack.records.fleet", False) in seen  # inside Run.from_dict's _fleet()
    assert ("perfstack.model", "perfstack.records.fleet", True) in seen  # the annotation of Run.fleet
    assert floor("perfstack.records.trial") == 4 and floor("perfstack.trial.runner") == 7
    assert floor("perfstack.cli.try_") == 10 and floor("perfstack") == 1
    assert floor("perfstack.records.base") == 4 and floor("perfstack.profile.summary") == 6
    up = ("perfstack.model", "perfstack.fleet.analysis", 3, False)
    assert upward([up]) == ["src/perfstack/model.py:3: perfstack.model (floor 5) imports perfstack.fleet.analysis "
                            "(floor 8)"]
    assert upward([(*up[:3], True)]) == []  # never runs
    loop = [("perfstack.compare.diff", "perfstack.compare.loadtest", 1, False),
            ("perfstack.compare.loadtest", "perfstack.compare.diff", 1, True)]
    assert circles(loop) == ["perfstack.compare.diff, perfstack.compare.loadtest: perfstack.compare.diff -> "
                             "perfstack.compare.loadtest; perfstack.compare.loadtest -> perfstack.compare.diff"]
