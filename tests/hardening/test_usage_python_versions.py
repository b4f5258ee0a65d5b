"""Every Python that pyproject's requires-python admits can import perfstack.

CI runs one interpreter, so the oldest declared one is checked statically: the grammar of every
module with ast's feature_version, and the standard-library keywords that arrived later.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "src" / "perfstack").rglob("*.py"))

# keyword arguments of the standard library that the oldest supported Python lacks, by the version
# that added them
LATER_KEYWORDS = {
    ("dataclass", "slots"): (3, 10),
    ("dataclass", "kw_only"): (3, 10),
    ("dataclass", "match_args"): (3, 10),
    ("zip", "strict"): (3, 10),
}


def _oldest() -> tuple[int, int]:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    m = re.search(r'^requires-python\s*=\s*">=\s*(\d+)\.(\d+)"', text, re.M)
    assert m, "pyproject.toml declares requires-python as '>=X.Y'"
    return int(m.group(1)), int(m.group(2))


def test_sources_found():
    assert len(SOURCES) > 50


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_module_parses_and_calls_only_what_the_oldest_python_has(path: Path):
    oldest = _oldest()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=oldest)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        for kw in node.keywords:
            added = LATER_KEYWORDS.get((name, kw.arg or ""))
            assert added is None or added <= oldest, (
                f"{path.name}:{node.lineno}: {name}({kw.arg}=...) needs Python {added[0]}.{added[1]}, "
                f"but requires-python admits {oldest[0]}.{oldest[1]}")


_TYPE_NAMES = {"int", "float", "str", "bytes", "bool", "dict", "list", "tuple", "set", "frozenset", "type", "object"}


def _type_name(name: str) -> bool:
    """A builtin type, or a capitalised name that is not a constant (``Path``, not ``SIGINT``)."""
    return name in _TYPE_NAMES or (name[:1].isupper() and not name.isupper())


def _type_like(node: ast.expr) -> bool:
    """An operand that names a type: None, a type's name (``Path``, ``torch.Tensor``), or a subscripted one."""
    if isinstance(node, ast.Constant):
        return node.value is None
    if isinstance(node, ast.Name):
        return _type_name(node.id)
    if isinstance(node, ast.Attribute):
        return _type_name(node.attr)
    if isinstance(node, ast.Subscript):
        return _type_like(node.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _type_like(node.left) or _type_like(node.right)
    return False


def _postponed(tree: ast.Module) -> bool:
    """``from __future__ import annotations``: the module's annotations stay strings, never evaluated."""
    return any(isinstance(n, ast.ImportFrom) and n.module == "__future__" and any(a.name == "annotations" for a in n.names)
               for n in tree.body)


def _annotations(tree: ast.AST) -> set[int]:
    """ids of every node inside an annotation."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        roots: list[ast.expr | None] = []
        if isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
        elif isinstance(node, ast.arg):
            roots.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            roots.append(node.returns)
        for r in roots:
            if r is not None:
                inside.update(id(n) for n in ast.walk(r))
    return inside


def runtime_unions(source: str) -> list[str]:
    """Every ``A | B`` between types that Python evaluates when the module runs: an alias (``X = A | B``),
    an ``isinstance`` argument, a default, a ``cast``, and annotations too unless the module postpones them
    (``from __future__ import annotations``; without it a def's or a dataclass field's annotation is
    evaluated when the def or class statement runs)."""
    tree = ast.parse(source)
    skip = _annotations(tree) if _postponed(tree) else set()
    found = []
    for node in ast.walk(tree):
        if id(node) in skip or not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr)):
            continue
        if _type_like(node.left) and _type_like(node.right):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
            skip.update(id(n) for n in ast.walk(node))  # ``A | B | C`` once, not again for its ``A | B``
    return found


FUTURE = "from __future__ import annotations\n"


@pytest.mark.parametrize("source", [
    FUTURE + "Estimates = EstimateSheet | EstimateTree | Leaf\n",  # the alias that broke 3.9 once
    FUTURE + "ok = isinstance(x, int | float)\n",
    FUTURE + "def f(x=cast(Path | None, y)): pass\n",
    FUTURE + "T = Optional[int] | str\n",
    FUTURE + "T = torch.Tensor | None\n",
    "def f(x: int | None) -> None: pass\n",  # no postponed annotations: evaluated at the def
    "class C:\n    x: Path | None = None\n",
], ids=["alias", "isinstance", "cast", "subscripted", "attribute", "def-annotation", "class-annotation"])
def test_the_union_check_finds_what_3_9_cannot_run(source: str):
    assert runtime_unions(source)


@pytest.mark.parametrize("source", [
    FUTURE + "def f(x: int | None) -> Path | None: pass\n",
    FUTURE + "class C:\n    x: Path | None = None\n",
    "flags = re.I | re.M\nn = a | b\nm = 1 | 2\n",
], ids=["postponed-def", "postponed-class", "bit-or"])
def test_the_union_check_lets_through_what_3_9_runs(source: str):
    assert runtime_unions(source) == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_union_of_types_evaluated_at_run_time(path: Path):
    """``A | B`` between types runs only from Python 3.10, and 3.9 raises TypeError where it is evaluated."""
    found = runtime_unions(path.read_text(encoding="utf-8"))
    assert not found, (f"{path.name}: {'; '.join(found)}: evaluated at run time, which fails on Python 3.9; "
                       "use typing.Union / Optional")
