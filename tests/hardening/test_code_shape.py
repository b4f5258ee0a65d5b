"""Shapes of the code that a reader pays for and no other gate sees: functions that take so many loose
parameters that a call cannot be read without the signature beside it.

The source is read with ast, nothing is run.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "perfstack"

MANY = 10  # parameters (self and cls not counted) from which a function has too many
# The few that keep that many, and why: each parameter is a knob a user sets by name.
MANY_ALLOWED = {
    "checks.py:register",  # a check's declaration: id, layer, title, doc, why, fix... (keyword-only)
    "profile/api.py:Profile.__init__",  # the public perfstack.profile(): the profile command's flags, by keyword
    "estimate/memory.py:training",  # the training memory model's inputs: the parallelism degrees and precision
}
MOST_ALLOWED = 3


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    out = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append((prefix + node.name, node))
            out += _functions(node, prefix + node.name + ".")
        elif isinstance(node, ast.ClassDef):
            out += _functions(node, prefix + node.name + ".")
    return out


def parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    return [n for n in names if n not in ("self", "cls")]


def many_parameters(src: Path = SRC) -> dict[str, int]:
    """``path:qualified name`` -> parameter count, for every function with MANY or more."""
    found = {}
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for name, fn in _functions(tree):
            n = len(parameters(fn))
            if n >= MANY:
                found[f"{path.relative_to(src).as_posix()}:{name}"] = n
    return found


def test_the_count_sees_every_kind_of_parameter():
    tree = ast.parse("class C:\n    def f(self, a, /, b, *c, d, **e): pass\n"
                     "def g(a, b, c, d, e, f, g, h, i, j): pass\n")
    (_, f), (_, g) = _functions(tree)
    assert parameters(f) == ["a", "b", "d", "c", "e"]
    assert len(parameters(g)) == MANY


def test_few_functions_take_ten_parameters_or_more():
    """A function that takes ten loose values wants a parameter object (a LevelSpec, a plan): named once,
    passed whole, checked in one place."""
    found = many_parameters()
    unexpected = sorted(set(found) - MANY_ALLOWED)
    assert not unexpected, (f"{len(unexpected)} new function(s) with {MANY} or more parameters: "
                            + ", ".join(f"{k} ({found[k]})" for k in unexpected)
                            + "; pass a parameter object instead")
    assert len(found) <= MOST_ALLOWED, found
