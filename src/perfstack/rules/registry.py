"""The check registry: each check is a pure function of facts, with its metadata.

    @check("swappiness", "kernel", "warning", "vm.swappiness above 10",
           doc="...what it reads and when it fires...", why="...impact...", fix="...")
    def swappiness(f: Facts) -> Hits:
        v = f.need("kernel.swappiness")          # NotChecked if unavailable
        if v > 10:
            yield Hit(f"vm.swappiness = {v}", commands=["sysctl -w vm.swappiness=10"])

A rule yields zero or more Hits; the engine turns each into a Finding with the check's id,
layer, title and docs, and cites the sources of the facts the rule read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Literal

from perfstack.model import LAYERS, Facts, Severity
from perfstack.rules.shell import Commands


SeverityName = Literal["critical", "warning", "info"]  # Severity's values, as a rule writes them


@dataclass
class Hit:
    evidence: str  # what was observed, with values
    fix: str | None = None  # specific fix; defaults to the check's
    severity: SeverityName | None = None  # overrides the check's default severity
    # Idempotent fixes for --fix-script, built with rules.shell.sh from any value read from outside.
    commands: Commands = field(default_factory=list)
    subject: str = ""
    host_action: bool = False
    why: str | None = None


# What a rule returns: a rule is a generator that yields each Hit it finds (a bare `return` when it
# finds none). A Union with Hit or None would read as "or return one", which no rule does, and a
# generator cannot be typed as such a Union.
Hits = Iterator[Hit]
Rule = Callable[[Facts], Iterable[Hit]]


@dataclass(frozen=True)
class Check:
    id: str
    layer: str
    severity: Severity  # the worst severity this check reports
    title: str
    doc: str  # what it checks and when it fires
    why: str  # why it matters, with impact figures from the sources
    fix: str  # the general fix
    fn: Rule
    refs: str = ""  # where the knowledge comes from


CHECKS: dict[str, Check] = {}
NAMES = frozenset(("critical", "warning", "info"))


def ladder(c: Check) -> list[Severity]:
    """Every severity ``c`` can report, worst first: what its rule names (in a Hit, in a variable or a
    table it reads, in a helper of its module it calls) and its default where a Hit may leave it out.
    Read from the rule's source, so that what 'perfstack explain' shows cannot drift from what the rule
    does; a check whose source cannot be read shows its default alone."""
    import ast
    import inspect
    import sys

    try:
        tree = ast.parse(inspect.getsource(sys.modules[c.fn.__module__]))
    except (OSError, TypeError, KeyError, SyntaxError):
        return [c.severity]
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    tables = {t.id: n.value for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None
              for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    found: set[str] = set()
    todo, seen = [c.fn.__name__], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for node in ast.walk(funcs[name] if name in funcs else tables[name]):
            if isinstance(node, ast.Constant) and node.value in NAMES:
                found.add(node.value)
            elif isinstance(node, ast.Name) and (node.id in funcs or node.id in tables):
                todo.append(node.id)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Hit":
                given = next((k.value for k in node.keywords if k.arg == "severity"), None)
                if given is None or not (isinstance(given, ast.Constant) and given.value in NAMES):
                    found.add(c.severity.value)  # left out, or an expression that may be None
    return sorted((Severity(v) for v in found), key=lambda s: -s.rank)


def check(id: str, layer: str, severity: SeverityName, title: str, *, doc: str, why: str, fix: str,
          refs: str = "") -> Callable[[Rule], Rule]:
    if layer not in LAYERS:
        raise ValueError(f"check {id}: unknown layer {layer}")

    def register(fn: Rule) -> Rule:
        if id in CHECKS:
            raise ValueError(f"check {id} registered twice")
        CHECKS[id] = Check(id, layer, Severity(severity), title, " ".join(doc.split()), " ".join(why.split()),
                           fix.strip(), fn, refs)
        return fn

    return register
