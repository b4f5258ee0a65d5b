from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# Keep the bytecode of the test modules (as assertion-rewritten) and of perfstack's own modules, even where
# PYTHONDONTWRITEBYTECODE is set: without it every run, each worker and each `python -m perfstack` child
# compiles them all again (a quarter of the collection's time). The caches are __pycache__ folders in the
# checkout, which git ignores.
sys.dont_write_bytecode = False

FIXTURES = Path(__file__).parent / "fixtures"


def _has_cuda() -> bool:
    try:
        import torch
    except Exception:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
