"""The fleet analysis over perturbed copies of the Runs recorded on real H100 and 2×H200 machines:
the planted odd node or GPU is named, for the planted reason, and the healthy ones are not."""

from __future__ import annotations

import random

import pytest
from fixtures.fleet_runs import fleet, node, recorded, set_env, set_fact, slow

from perfstack.errors import InputError
from perfstack.fleet import analyze, summarize
from perfstack.fleet.analysis import FleetAnalysis
from perfstack.model import Run


def analysis_of(runs: list[dict]) -> FleetAnalysis:
    from perfstack.fleet.summary import merge
    nodes: dict = {}
    for d in runs:
        s = summarize(Run.from_dict(d), d["meta"]["fleet"]["node"])
        nodes[s.name] = merge(nodes[s.name], s) if s.name in nodes else s
    return analyze(nodes.values())


def flagged(a: FleetAnalysis) -> dict[str, str]:
    return {r.node: r.severity for r in a.ranking}


def test_healthy_fleet_flags_nobody():
    a = analysis_of(fleet("h100-doctor-bench", 12, seed=1))
    assert a.ranking == []
    assert a.drift == []
    assert [o for o in a.outliers if o.slow] == []
    assert a.summary()["ok"] == 12


def test_one_slow_gpu_among_twelve_is_named_with_its_figures():
    a = analysis_of(fleet("h100-doctor-bench", 12, seed=2, plant={7: lambda d: slow(d, 0.85, ("gemm",))}))
    assert flagged(a) == {"node007": "warning"}  # 15% slower: a warning (critical from 20%)
    slow_figs = [o for o in a.outliers if o.slow]
    assert slow_figs and {o.node for o in slow_figs} == {"node007"}
    assert all(o.figure.startswith("gemm.") for o in slow_figs)
    assert all(-16 < o.deviation_pct < -14 for o in slow_figs)


def test_a_gpu_a_quarter_slower_is_critical():
    a = analysis_of(fleet("h100-doctor-bench", 8, seed=3, plant={0: lambda d: slow(d, 0.7, ("hbm",))}))
    assert flagged(a) == {"node000": "critical"}
    assert {o.figure for o in a.outliers if o.slow} == {"hbm.copy", "hbm.read", "hbm.write"}


def test_one_gpu_of_a_two_gpu_node_is_named_by_its_index():
    def second_gpu_slow(d, gpu):
        if gpu == 1:
            slow(d, 0.9, ("hbm",))
    runs = fleet("h200x2-bench-full", 6, seed=4, gpus=2, plant={2: second_gpu_slow})
    a = analysis_of(runs)
    slow_figs = [o for o in a.outliers if o.slow]
    assert {(o.node, o.subject) for o in slow_figs} == {("node002", "gpu1")}
    assert set(flagged(a)) == {"node002"}
    # the heat map has one row per GPU
    assert len(a.heatmaps) == 1 and len(a.heatmaps[0].rows) == 12


def _noisy(d: dict, spread: float, shift: float) -> None:
    """Re-draw the samples of hbm.copy with a relative spread, and move its median by ``shift``."""
    rng = random.Random(99)
    for m in d["measurements"]:
        if m["name"] == "hbm.copy":
            med = sorted(m["samples"])[len(m["samples"]) // 2]
            m["samples"] = [med * rng.gauss(1, spread) / shift for _ in m["samples"]]
            m["value"] *= shift


@pytest.mark.parametrize("spread, expect_flag", [(0.002, True), (0.25, False)])
def test_a_figure_is_judged_against_its_own_noise(spread, expect_flag):
    """The same 6% lower median is an outlier when the node measured it tightly, and not when its own
    samples scatter by 25%: that node's figure cannot tell 6% apart from its noise."""
    a = analysis_of(fleet("h100-doctor-bench", 10, seed=5, plant={4: lambda d: _noisy(d, spread, 0.94)}))
    hit = [o for o in a.outliers if o.figure == "hbm.copy" and o.node == "node004"]
    assert bool(hit) is expect_flag
    if hit:
        assert hit[0].noise_pct < 1


def test_drift_of_one_node_among_many_is_one_row():
    plant = {5: lambda d: set_fact(d, "driver.version", "550.54.15"),
             8: lambda d: set_env(d, "NCCL_P2P_DISABLE", "1")}
    a = analysis_of(fleet("h100-doctor", 16, seed=6, plant=plant))
    rows = {d.key: d for d in a.drift}
    assert set(rows) == {"driver.version", "env.NCCL_P2P_DISABLE"}
    dv = rows["driver.version"]
    assert dv.baseline == "580.159.04" and dv.baseline_count == 15
    assert [(g.value, g.nodes) for g in dv.odd] == [("550.54.15", ["node005"])]
    p2p = rows["env.NCCL_P2P_DISABLE"]
    assert p2p.odd[0].nodes == ["node008"] and p2p.baseline == "(not collected)"
    assert flagged(a) == {"node005": "warning", "node008": "warning"}


def test_per_node_identities_and_volatile_readings_are_not_drift():
    runs = fleet("h100-doctor", 5, seed=7)
    for i, d in enumerate(runs):  # a boot disk UUID on the kernel command line is each node's own
        set_fact(d, "kernel.iommu", f"uuid-{i}")
    a = analysis_of(runs)
    assert a.drift == [] and a.identity_keys == 1  # temperatures and host ids differ too, silently


def test_two_nodes_that_differ_are_a_split_without_a_culprit():
    runs = fleet("h100-doctor", 2, seed=8, plant={1: lambda d: set_fact(d, "kernel.swappiness", 10)})
    a = analysis_of(runs)
    [d] = a.drift
    assert d.split and d.baseline is None and sorted(n for g in d.odd for n in g.nodes) == ["node000", "node001"]
    assert {r.severity for r in a.ranking} == {"info"}


def test_skus_are_compared_within_themselves():
    runs = fleet("h100-doctor", 4, seed=9) + fleet("h200x2-doctor", 4, seed=9, prefix="big")
    a = analysis_of(runs)
    assert set(a.skus) == {"NVIDIA H100 80GB HBM3", "NVIDIA H200"}
    assert a.drift == [] and a.ranking == []  # the H200 nodes differ from the H100 ones, not from each other
    assert any("compared within their SKU" in n for n in a.notes)


def test_a_node_on_another_perfstack_version_is_listed_not_compared():
    runs = fleet("h100-doctor-bench", 6, seed=10, plant={2: lambda d: slow(d, 0.5)})
    runs[2]["meta"]["tool_version"] = "0.0.9"
    a = analysis_of(runs)
    m = {x.name: x for x in a.members}
    assert m["node002"].status == "other version" and "0.0.9" in m["node002"].reason
    assert not any(o.node == "node002" for o in a.outliers)  # its halved figures are not compared
    assert flagged(a) == {"node002": "info"}


def test_findings_on_a_minority_of_nodes():
    base = recorded("h100-doctor")
    runs = fleet("h100-doctor", 6, seed=11)
    extra = dict(next(f for f in base["findings"] if f["id"] == "swappiness"))
    extra.update(id="pcie-link-downgraded", layer="pcie-topology", severity="critical", subject="gpu0",
                 evidence="GPU 0 link at Gen4 x8 (capable of Gen5 x16)")
    runs[3]["findings"].append(extra)
    runs[3]["checks"].append({"id": "pcie-link-downgraded", "status": "found", "reason": ""})
    for d in runs[:3] + runs[4:]:
        d["checks"].append({"id": "pcie-link-downgraded", "status": "passed", "reason": ""})
    a = analysis_of(runs)
    [u] = [u for u in a.uneven if u.minority]
    assert (u.id, u.nodes, u.of, u.subjects) == ("pcie-link-downgraded", ["node003"], 6, {"node003": ["gpu0"]})
    assert flagged(a) == {"node003": "critical"}
    assert "swappiness" in {s.id for s in a.shared}  # on every node: the image's setting, not a node's


def test_a_bench_only_node_does_not_lack_the_doctors_findings():
    runs = fleet("h100-doctor", 3, seed=12) + fleet("h100-bench-full", 1, seed=12, prefix="b")
    a = analysis_of(runs)
    assert not [u for u in a.uneven if u.minority]


def test_failed_nodes_rank_first():
    from perfstack.fleet.summary import failed
    nodes = [summarize(Run.from_dict(d), d["meta"]["fleet"]["node"]) for d in fleet("h100-doctor", 3, seed=13)]
    a = analyze(nodes + [failed("node-x", "no result within 300 s")])
    assert a.ranking[0].node == "node-x" and a.ranking[0].severity == "critical"
    assert a.summary()["failed"] == 1


def test_the_analysis_saves_and_loads_back():
    a = analysis_of(fleet("h200x2-bench-full", 4, seed=14, gpus=2, plant={1: lambda d: slow(d, 0.7)}))
    d = a.to_dict()
    import json
    b = FleetAnalysis.from_dict(json.loads(json.dumps(d)))
    assert b.to_dict() == json.loads(json.dumps(d))


@pytest.mark.parametrize("bad", [{"schema_version": 99}, {"schema_version": 1, "drift": [{"nope": 1}]}, [1, 2]])
def test_a_malformed_fleet_section_is_a_clear_input_error(bad):
    with pytest.raises(InputError):
        FleetAnalysis.from_dict(bad)


@pytest.mark.parametrize("version, says", [(None, "must be a positive integer, not missing"),
                                            (True, "must be a positive integer"), (99, "reads up to")])
def test_a_fleet_section_without_a_usable_schema_version_says_which(version, says):
    with pytest.raises(InputError) as e:
        FleetAnalysis.from_dict({} if version is None else {"schema_version": version})
    assert says in e.value.message and ("upgrade" in (e.value.hint or "")) == (version == 99)


def test_node_copies_keep_their_recorded_noise():
    base = recorded("h100-doctor-bench")
    d = node(base, "n", random.Random(0))
    s0 = summarize(Run.from_dict(base), "a").figures[("hbm.copy", "")]
    s1 = summarize(Run.from_dict(d), "b").figures[("hbm.copy", "")]
    assert s0.noise > 0 and s1.noise == pytest.approx(s0.noise, rel=1e-6)
