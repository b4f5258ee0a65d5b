"""perfstack fleet on a real local Ray cluster of several simulated nodes (ray.cluster_utils.Cluster).

Each node audits its own recorded bundle (chosen by an environment variable given to that node's
raylet): three healthy copies of the H100 recording, one with its PCIe link at Gen4 x8, one with
driver 550 under a CUDA 13 torch, one with vm.swappiness 60. The fleet must name exactly the three
planted nodes, for their planted reasons. Skipped where Ray is not installed (pip install
'perfstack[fleet]').
"""

from __future__ import annotations

import os
import sys
import time

import pytest

ray = pytest.importorskip("ray")
from fixtures.ray_cluster import local_cluster  # noqa: E402
from fixtures.variants import VARIANTS, healthy  # noqa: E402
from perfstack.cli.main import main  # noqa: E402
from perfstack.fleet import analyze, collect  # noqa: E402
from perfstack.fleet.jobs import Target  # noqa: E402
from perfstack.fleet.ray_engine import fan_out, nodes  # noqa: E402

pytestmark = pytest.mark.ray
BUNDLES = ("healthy-a", "healthy-b", "healthy-c", "pcie-gen4-x8-busy", "driver-550-torch-cu130", "swappiness-60")


class BundleDoctor:
    """The doctor on the bundle this node was given, standing in for the node's live machine."""

    def __call__(self, target: Target):
        from pathlib import Path

        from perfstack.audit import audit
        from perfstack.host.bundle import BundleHost
        from perfstack.rules import select_checks
        path = os.environ["FLEET_TEST_BUNDLE"]
        run = audit(BundleHost(path), select_checks(), f"bundle {path}")
        run.meta.extra["test_bundle"] = Path(path).name
        return [run]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet-bundles")
    for name in BUNDLES:
        healthy(root / name)
        if name in VARIANTS:
            VARIANTS[name][1](root / name)
    nodes = [{"num_cpus": 1, "env_vars": {"FLEET_TEST_BUNDLE": str(root / name)}} for name in BUNDLES[1:]]
    with local_cluster(sys.modules[__name__], {"num_cpus": 1, "env_vars": {"FLEET_TEST_BUNDLE": str(root / BUNDLES[0])}},
                       nodes):
        yield root


def _by_bundle(results):
    return {r.node: r.runs[0]["meta"]["test_bundle"] for r in results if r.runs}


def test_the_fleet_names_exactly_the_planted_nodes(cluster):
    assert len(nodes(ray)) == len(BUNDLES)
    results = collect.doctor(ray, BundleDoctor(), timeout_s=240)
    assert [r.error for r in results if r.error] == []
    which = _by_bundle(results)
    assert sorted(which.values()) == sorted(BUNDLES)  # one task per node, each on its own node
    a = analyze(collect.summaries(results))
    flagged = {which[r.node]: r for r in a.ranking}
    assert set(flagged) == {"pcie-gen4-x8-busy", "driver-550-torch-cu130", "swappiness-60"}
    reasons = {k: " ".join(r.reasons) for k, r in flagged.items()}
    assert "pcie-link-downgraded" in reasons["pcie-gen4-x8-busy"]
    assert "driver.version" in reasons["driver-550-torch-cu130"]
    assert "kernel.swappiness" in reasons["swappiness-60"] and "swappiness" in reasons["swappiness-60"]
    assert all(r.overhead_s is not None and r.overhead_s >= 0 for r in results)


def test_a_node_that_raises_or_hangs_is_reported_and_the_rest_complete(cluster):
    members = nodes(ray)
    results = fan_out(ray, _Misbehave(), [(n, None) for n in members], timeout_s=15)
    errors = {r.node: r.error for r in results if r.error}
    assert len(results) == len(members)
    assert len(errors) == 2, errors
    assert any("crashed on this node" in e for e in errors.values())
    assert any("no result within 15 s" in e for e in errors.values())
    assert sum(1 for r in results if r.runs) == len(members) - 2


class _Misbehave:
    """Two nodes misbehave: one raises, one hangs past the deadline; the others answer at once."""

    def __call__(self, target: Target):
        from perfstack.model import Run
        from perfstack.records.meta import RunMeta
        name = os.path.basename(os.environ["FLEET_TEST_BUNDLE"])
        if name == "healthy-b":
            raise RuntimeError("the doctor crashed on this node")
        if name == "healthy-c":
            time.sleep(600)
        return [Run(meta=RunMeta(command="doctor", extra={"test_bundle": name}))]


def test_cli_fleet_doctor_saves_node_runs_that_fleet_report_reads_back(cluster, tmp_path, capsys):
    runs_dir = tmp_path / "runs"
    rc = main(["fleet", "doctor", "--json", "--fail-on", "never", "--save-runs", str(runs_dir), "--timeout", "240",
               "-o", str(tmp_path / "fleet.json")])
    out = capsys.readouterr().out
    assert rc == 0
    import json
    doc = json.loads(out)
    assert doc["meta"]["command"] == "fleet" and doc["fleet"]["summary"]["nodes"] == len(BUNDLES)
    assert doc["meta"]["fanout"]["tasks"] == len(BUNDLES)
    # every node's Run, and the fleet Run beside them (fleet report DIR takes what no node Run holds from it)
    assert len([p for p in runs_dir.glob("*.json") if p.name != "fleet.json"]) == len(BUNDLES)
    assert json.loads((runs_dir / "fleet.json").read_text())["meta"]["command"] == "fleet"
    rc = main(["fleet", "report", str(runs_dir), "--json", "--fail-on", "never"])
    again = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert sorted(m["name"] for m in again["fleet"]["members"]) == sorted(m["name"] for m in doc["fleet"]["members"])
