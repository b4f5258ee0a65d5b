"""Host<->device copies: the size sweeps, the headline figure, the link peak and the NUMA plan."""

import pytest

from perfstack.bench import _gpu, transfer
from perfstack.model import Fact, Facts, Measurement, Run

KIB, MIB, GIB = transfer.KIB, transfer.MIB, transfer.GIB


def test_sweeps():
    assert transfer.sizes("quick") == (64 * KIB, MIB, 16 * MIB, 256 * MIB)
    full = transfer.sizes("full")
    assert full[0] == 4 * KIB and full[-1] == GIB and len(full) == 10
    assert all(b == 4 * a for a, b in zip(full, full[1:]))
    assert transfer.point_name("h2d", "pinned", 256 * MIB) == "h2d.pinned.256MiB"
    assert _gpu.gbps(GIB, GIB / 55e9) == pytest.approx(55.0)


def point(n, gbps, status="ok"):
    return Measurement(bench="h2d", name=f"p{n}", value=gbps, unit="GB/s", params={"bytes": n}, status=status)


def test_headline_is_the_best_point_of_16MiB_or_more():
    pts = [point(64 * KIB, 80.0), point(16 * MIB, 50.0), point(256 * MIB, 55.0), point(GIB, None, "skipped")]
    assert transfer.headline(pts).params["bytes"] == 256 * MIB  # the 80 GB/s small copy does not count
    assert transfer.headline([point(MIB, 20.0)]) is None


def test_link_peak_from_recorded_h100_facts(fixtures):
    facts = Run.load(fixtures / "runs" / "h100-doctor.json").facts
    peak, src, notes = transfer.link_peak(facts.value("gpu.list")[0])
    assert peak == pytest.approx(63.02, abs=0.01) and src == "PCIe Gen5 x16 per direction" and notes == []
    # a link that trained down is judged against what the link could do, and said so
    peak, _, notes = transfer.link_peak({"pcie_gen_max": 5, "pcie_width_max": 16, "pcie_gen": 3, "pcie_width": 8})
    assert peak == pytest.approx(63.02, abs=0.01) and "Gen3 x8" in notes[0]
    assert transfer.link_peak({})[0] is None


def numa(nodes, gpu_node=None, topo_node=None):
    f = Facts({"numa.nodes": Fact("numa.nodes", nodes, "t")})
    if topo_node is not None:
        f.add(Fact("pcie.topology", {"numa_affinity": {"GPU0": topo_node}}, "t"))
    return f, {"index": 0, "numa_node": gpu_node}


TWO = [{"id": 0, "cpus": [0, 1], "distances": [10, 21]}, {"id": 1, "cpus": [2, 3], "distances": [21, 10]}]


def test_numa_plan_local_and_remote():
    f, e = numa(TWO, gpu_node=1)
    local, remote = transfer.numa_plan(f, e)
    assert (local["id"], remote["id"]) == (1, 0)
    f, e = numa(TWO, topo_node="0")  # sysfs said -1; nvidia-smi topo -m knows
    assert [n["id"] for n in transfer.numa_plan(f, e)] == [0, 1]


def test_numa_plan_picks_the_farthest_remote_node():
    four = [{"id": i, "cpus": [i], "distances": d} for i, d in
            enumerate([[10, 12, 32, 32], [12, 10, 32, 32], [32, 32, 10, 12], [32, 32, 12, 10]])]
    f, e = numa(four, gpu_node=0)
    assert transfer.numa_plan(f, e)[1]["id"] in (2, 3)


def test_numa_plan_reasons():
    f, e = numa(TWO[:1], gpu_node=0)
    assert "1 NUMA node(s) with CPUs" in transfer.numa_plan(f, e)
    f, e = numa(TWO)
    assert "unknown" in transfer.numa_plan(f, e)
    f, e = numa([TWO[0], {"id": 1, "cpus": [], "distances": [21, 10]}], gpu_node=0)  # memory-only node
    assert "1 NUMA node(s)" in transfer.numa_plan(f, e)
    f, e = numa(TWO + [{"id": 2, "cpus": [], "distances": []}], gpu_node=2)
    assert "has no CPUs" in transfer.numa_plan(f, e)
