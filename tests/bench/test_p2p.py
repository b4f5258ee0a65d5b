"""GPU<->GPU peak selection: NVLink from the topology matrix or the NVLink states, else PCIe."""

import pytest

from perfstack.bench import _gpu, p2p
from perfstack.model import Fact, Facts, Run


def test_nvlink_cells():
    assert p2p.nvlinks("NV18") == 18 and p2p.nvlinks("SYS") is None and p2p.nvlinks(None) is None


def test_recorded_h200_pair_is_nvlink_at_half_the_aggregate(fixtures):
    facts = Run.load(fixtures / "runs" / "h200x2-doctor.json").facts
    g0, g1 = facts.value("gpu.list")
    spec = _gpu.spec_for(g0)
    assert p2p.pair_link(facts, 0, 1) == "NV18"
    peak, source, path = p2p.peer_peak(facts, spec, g0, g1)
    assert (peak, path) == (450.0, "nvlink") and "NVLink (NV18)" in source


def test_share_of_links_scales_the_peak():
    class Spec:
        nvlink_gbps_per_gpu = 900.0
    assert p2p.nvlink_peak(Spec(), 18, 18) == 450.0
    assert p2p.nvlink_peak(Spec(), 4, 18) == pytest.approx(100.0)
    assert p2p.nvlink_peak(Spec(), None, None) == 450.0
    assert p2p.nvlink_peak(None, 18, 18) is None


def test_no_topology_but_active_nvlinks_is_nvlink():
    g = {"index": 0, "nvlink_active": 18}
    assert p2p.peer_peak(Facts(), _gpu.spec_for("NVIDIA H200"), g, {**g, "index": 1})[2] == "nvlink"


def test_pcie_pair_takes_the_slower_link():
    facts = Facts({"pcie.topology": Fact("pcie.topology", {"links": {"GPU0": {"GPU1": "SYS"}}}, "t")})
    a = {"index": 0, "pcie_gen_max": 5, "pcie_width_max": 16}
    b = {"index": 1, "pcie_gen_max": 4, "pcie_width_max": 16}
    peak, source, path = p2p.peer_peak(facts, None, a, b)
    assert path == "pcie" and peak == pytest.approx(31.51, abs=0.01) and "Gen4 x16" in source and "SYS" in source
    assert p2p.peer_peak(Facts(), None, {"index": 0}, {"index": 1}) == (None, "", "unknown")
