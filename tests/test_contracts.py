"""Promises every probe, check and bundle keeps, checked across the registries."""

import ast
import re
from importlib import import_module
from pathlib import Path

import pytest
from fakes import FakeHost

from perfstack.checks import FAMILIES, LAYER_NAMES
from perfstack.host.bundle import BundleHost
from perfstack.model import LAYERS, Facts
from perfstack.probes import PROBES, collect
from perfstack.probes import load as load_probes
from perfstack.rules import load, run_check

CHECKS = load()
load_probes()
import_module("perfstack.profile.rules")  # registers the profile's checks
import_module("perfstack.loadtest.findings")  # and the load test's
EVERY = {i: c for family in FAMILIES.values() for i, c in family.items()}
SRC = Path(__file__).parent.parent / "src" / "perfstack"
REQUIRED = """thp-mode swappiness swap-enabled numa-balancing cpu-governor memlock-limit nofile-limit shm-size
gpu-persistence-mode gpu-xid-errors gpu-ecc-errors gpu-clock-throttle gpu-power-cap mig-enabled
pcie-link-downgraded gpu-numa-affinity driver-toolkit-mismatch torch-cuda-arch nccl-p2p-disabled nccl-debug-env
tf32-override-env alloc-conf cgroup-memory-limit cgroup-cpu-quota io-scheduler""".split()


def test_required_checks_exist_and_there_are_enough():
    assert set(REQUIRED) <= set(CHECKS)
    assert len(CHECKS) >= 70
    assert {c.layer for c in CHECKS.values()} == set(LAYERS)


@pytest.mark.parametrize("cid", sorted(EVERY))
def test_check_is_documented(cid):
    """The documentation contract, over every family of the one registry (what 'perfstack explain' shows)."""
    c = EVERY[cid]
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", c.id)
    assert c.layer in LAYER_NAMES and c.family in FAMILIES
    assert c.title and c.doc and c.why and c.fix, f"{cid} lacks documentation"
    # a profile check's knowledge is its recoverable-time model, in its doc; the others cite their sources
    assert c.refs or c.family == "profile", f"{cid} cites no references"


def test_every_family_is_in_the_contract():
    assert {c.family for c in EVERY.values()} == set(FAMILIES)
    assert len(EVERY) == sum(len(f) for f in FAMILIES.values()) >= 100


@pytest.mark.parametrize("cid", sorted(CHECKS))
def test_check_never_guesses_on_no_facts(cid):
    findings, result = run_check(CHECKS[cid], Facts())
    assert not findings
    assert result.status in ("not-checked", "not-applicable")
    assert not result.reason.startswith("internal error")


@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.__name__)
def test_probe_survives_a_machine_with_nothing(probe):
    from perfstack.probes.collector import run_probes
    facts = run_probes(FakeHost(env=None), [probe])
    assert f"probe.{probe.__name__}" not in facts, facts[f"probe.{probe.__name__}"].reason


def test_empty_bundle_audits_without_errors(tmp_path):
    facts = collect(BundleHost(tmp_path))
    errors = [k for k in facts if k.startswith("probe.")]
    assert not errors
    results = [run_check(c, facts)[1] for c in CHECKS.values()]
    assert not [r for r in results if r.reason.startswith("internal error")]


@pytest.mark.parametrize("pkg", ["probes", "rules", "report", "model.py"])
def test_only_the_host_seam_touches_the_machine(pkg):
    forbidden = {"os", "subprocess", "glob", "pynvml", "shutil", "socket", "ctypes"}
    paths = [SRC / pkg] if pkg.endswith(".py") else sorted((SRC / pkg).glob("*.py"))
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            bad = {n.split(".")[0] for n in names} & forbidden
            assert not bad, f"{path.name} imports {bad}"
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "open":
                pytest.fail(f"{path.name} calls open()")
