"""The one finding registry: every check the tool runs, of every family, as one record.

A family is where a check's facts come from: the doctor's checks read the machine (``rules``), the
profile's read a trace (``profile.rules``), the load test's read the requests of a load test
(``loadtest.findings``). Each check is registered once with ``register`` naming its family:

    @register("loadtest", "serve-errors", "serving", "Requests failed", severity="warning",
              doc="...what it reads and when it fires...", why="...impact...", fix="...")
    def errors(lt: LoadTest) -> Optional[Finding]: ...

``perfstack explain`` reads every family from here, so an id the tool prints is an id it can explain.
Ids are unique across the families.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, TypeVar

from perfstack.model import LAYERS
from perfstack.severity import Severity

FAMILIES: dict[str, dict[str, "Check"]] = {"doctor": {}, "profile": {}, "loadtest": {}}
# The layers beyond the machine's stack that a family's findings name: the load test judges the server.
SERVING = "serving"
LAYER_NAMES: dict[str, str] = {**LAYERS, SERVING: "Serving"}
BY_SHARE = "by share"  # a profile finding's severity: the share of the step its fix would recover
NAMES = frozenset(("critical", "warning", "info"))

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Check:
    id: str
    layer: str
    severity: Optional[Severity]  # the worst it reports; None: by share (see BY_SHARE)
    title: str
    doc: str  # what it checks and when it fires
    why: str  # why it matters, with impact figures from the sources
    fix: str  # the general fix
    fn: Callable[..., Any]
    refs: str = ""  # where the knowledge comes from
    family: str = "doctor"
    # profile: the ``perfstack try --fix`` ids that time this fix without the profiler, what its recoverable-time
    # model takes for granted, and the model's confidence where its inputs are all in the trace
    measure: tuple[str, ...] = ()
    assumptions: str = ""
    confidence: str = ""


def register(family: str, id: str, layer: str, title: str, *, severity: Optional[str], doc: str, why: str,
             fix: str, refs: str = "", measure: tuple[str, ...] = (), assumptions: str = "",
             confidence: str = "") -> Callable[[F], F]:
    """Register the decorated function as the check ``id`` of ``family``; a function that can report two
    ids (a load-test rule that tells two causes apart) carries one decorator for each."""
    if family not in FAMILIES:
        raise ValueError(f"check {id}: unknown family {family}")
    if layer not in (LAYERS if family != "loadtest" else (SERVING,)):
        raise ValueError(f"check {id}: unknown layer {layer}")

    def add(fn: F) -> F:
        if any(id in checks for checks in FAMILIES.values()):
            raise ValueError(f"check {id} registered twice")
        FAMILIES[family][id] = Check(id, layer, Severity(severity) if severity else None, title,
                                     " ".join(doc.split()), " ".join(why.split()), fix.strip(), fn, refs, family,
                                     tuple(measure), assumptions, confidence)
        return fn

    return add


def ladder(c: Check) -> list[Severity]:
    """Every severity ``c`` can report, worst first, read from its rule's source, so that what 'perfstack
    explain' shows cannot drift from what the rule does. A doctor check's: what its rule names (in a Hit, in a
    variable or a table it reads, in a helper of its module it calls) and its default where a Hit may leave it
    out. A load-test check's: the severities its Finding(id=...) names. A check whose source cannot be read
    shows its default alone; a profile check has none (by share)."""
    import ast
    import inspect
    import sys

    if c.severity is None:
        return []
    try:
        tree = ast.parse(inspect.getsource(sys.modules[c.fn.__module__]))
    except (OSError, TypeError, KeyError, SyntaxError):
        return [c.severity]
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    if c.family == "loadtest":
        return _named_in_finding(funcs.get(c.fn.__name__), c.id) or [c.severity]
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


def _named_in_finding(fn: Any, id: str) -> list[Severity]:
    """The ``Severity.X`` that the ``Finding(id=<id>, severity=...)`` calls in ``fn`` name, worst first."""
    import ast

    found: set[str] = set()
    for node in ast.walk(fn) if fn is not None else ():
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Finding"):
            continue
        kw = {k.arg: k.value for k in node.keywords}
        named = kw.get("id")
        if not (isinstance(named, ast.Constant) and named.value == id) or "severity" not in kw:
            continue
        found |= {n.attr.lower() for n in ast.walk(kw["severity"]) if isinstance(n, ast.Attribute)
                  and isinstance(n.value, ast.Name) and n.value.id == "Severity" and n.attr.lower() in NAMES}
    return sorted((Severity(v) for v in found), key=lambda s: -s.rank)
