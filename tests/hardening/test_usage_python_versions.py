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
