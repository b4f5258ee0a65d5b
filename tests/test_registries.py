"""Every probe, check, profile check, load-test check and benchmark defined in the source is registered, and
ids are unique.

The definitions are found by reading the source (any function decorated with ``@probe``, ``@check(...)``,
``@profile_check(...)``, ``@register(...)`` or ``@benchmark(...)``), not by importing it: a module the registry
does not load, or a profile check missing from ``ORDER``, would otherwise be silently never run.
"""

import ast
from pathlib import Path

import pytest

from perfstack import bench, probes, rules
from perfstack.bench import benchmark
from perfstack.checks import FAMILIES, register
from perfstack.probes.collector import PROBES, probe
from perfstack.profile.registry import PROFILE_CHECKS, profile_check
from perfstack.profile.rules import ORDER
from perfstack.rules.registry import check

SRC = Path(__file__).parent.parent / "src" / "perfstack"


def _defined(decorator: str, arg: int = 0) -> dict[str, str]:
    """{id (the decorator's argument ``arg``, or the function's name for a bare decorator): file} over the source."""
    out: dict[str, str] = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef):
                continue
            for d in node.decorator_list:
                if isinstance(d, ast.Name) and d.id == decorator:
                    key = node.name
                elif (isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == decorator
                      and len(d.args) > arg and isinstance(d.args[arg], ast.Constant)):
                    key = d.args[arg].value
                else:
                    continue
                assert key not in out, f"{decorator} {key} defined in {out[key]} and {path}"
                out[key] = str(path.relative_to(SRC))
    return out


def test_every_check_in_the_source_is_registered():
    defined = _defined("check")
    assert len(defined) >= 70
    assert set(defined) == set(rules.load())


def test_every_probe_in_the_source_is_registered():
    probes.load()
    defined = _defined("probe")
    assert len(defined) >= 10
    assert set(defined) == {p.__name__ for p in PROBES}


def test_every_benchmark_in_the_source_is_registered_and_ordered():
    defined = _defined("benchmark")
    assert set(defined) == set(bench.load()) == set(bench.ORDER)
    assert list(bench.load()) == list(bench.ORDER)


def test_every_profile_check_in_the_source_is_registered_and_ordered():
    defined = _defined("profile_check")
    assert set(defined) == set(PROFILE_CHECKS) == set(ORDER)
    assert len(ORDER) == len(set(ORDER))


def test_every_load_test_check_in_the_source_is_registered():
    import perfstack.loadtest.findings  # noqa: F401 — registers them
    defined = _defined("register", arg=1)  # register(family, id, ...)
    assert len(defined) >= 8
    assert set(defined) == set(FAMILIES["loadtest"])


def test_registries_reject_a_duplicate_id():
    rules.load()
    probes.load()
    bench.load()
    taken_check = next(iter(rules.load()))
    with pytest.raises(ValueError, match="registered twice"):
        check(taken_check, "kernel", "info", "t", doc="d", why="w", fix="f")(lambda f: None)
    def twin(c):
        pass
    twin.__name__ = PROBES[0].__name__
    with pytest.raises(ValueError, match="registered twice"):
        probe(twin)
    with pytest.raises(ValueError, match="registered twice"):
        benchmark("gemm", needs_cuda=True, host_bound=False, doc="d")(lambda ctx: [])
    with pytest.raises(ValueError, match="registered twice"):
        profile_check(ORDER[0], "framework", "t", doc="d", why="w", fix="f", assumptions="a",
                      confidence="high")(lambda p, ctx: None)
    with pytest.raises(ValueError, match="registered twice"):  # ids are unique across the families
        register("loadtest", taken_check, "serving", "t", severity="info", doc="d", why="w", fix="f")(lambda lt: None)
