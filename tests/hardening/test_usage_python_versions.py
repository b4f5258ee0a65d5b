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


def _type_like(node: ast.expr) -> bool:
    """An operand that names a type: None, a builtin type, a capitalised name, or a subscripted one."""
    if isinstance(node, ast.Constant):
        return node.value is None
    if isinstance(node, ast.Name):
        return node.id in _TYPE_NAMES or (node.id[:1].isupper() and not node.id.isupper())
    if isinstance(node, ast.Subscript):
        return _type_like(node.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _type_like(node.left) or _type_like(node.right)
    return False


def _annotations(tree: ast.AST) -> set[int]:
    """ids of every node inside an annotation (left unevaluated by ``from __future__ import annotations``)."""
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


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_union_of_types_evaluated_at_run_time(path: Path):
    """``A | B`` between types runs only from Python 3.10: in an annotation it is a string under
    ``from __future__ import annotations``, but an alias (``X = A | B``), an ``isinstance`` argument or a
    default is evaluated when the module is imported, and 3.9 raises TypeError there."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skip = _annotations(tree)
    for node in ast.walk(tree):
        if id(node) in skip or not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr)):
            continue
        assert not (_type_like(node.left) and _type_like(node.right)), (
            f"{path.name}:{node.lineno}: '{ast.unparse(node)}' is evaluated at run time and fails on Python 3.9; "
            "use typing.Union / Optional")
