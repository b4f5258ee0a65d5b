"""The inter-node all-reduce: busbw arithmetic, the bisection and the slow-node/link naming as pure
functions over a modelled network, then on a Ray cluster of simulated machines with gloo on the CPU
(a planted slow node found and named, a node that never joins reported, not waited for)."""

from __future__ import annotations

import json
import re
import math
import sys
import time
from pathlib import Path

import pytest
from fixtures.ray_cluster import local_cluster

from perfstack.errors import InputError
from perfstack.fleet import allreduce as ar
from perfstack.fleet.allreduce import halves, localize, point, slower
from perfstack.records.fleet import Comms, Group, Point
from perfstack.fleet.analysis import FleetAnalysis
from perfstack.fleet.rank import NodeRank
from perfstack.records.meta import RunMeta


def test_busbw_is_nccl_tests_all_reduce_factor():
    p = point(1 << 20, 4, [1e-3, 2e-3, 3e-3])  # median 2 ms
    assert p.busbw_gbps == pytest.approx((1 << 20) / 2e-3 / 1e9 * 2 * 3 / 4, rel=1e-3)
    assert p.time_us == pytest.approx(2000.0) and p.samples == 3
    # groups are compared at the fast end of the samples (other traffic only adds time)
    assert p.fast_busbw_gbps == pytest.approx((1 << 20) / 1e-3 / 1e9 * 1.5, rel=1e-3)
    assert Group(["a", "b"], "pair", points=[p]).busbw == p.fast_busbw_gbps
    assert ar.fast_time([5.0] * 9 + [1.0] * 2) == 1.0 and ar.fast_time([3.0, 1.0, 2.0]) == 1.0
    assert point(1 << 20, 2, [1e-3]).busbw_gbps == pytest.approx((1 << 20) / 1e-3 / 1e9, rel=1e-3)  # 2(n-1)/n = 1


def test_halves_and_the_slower_half():
    assert halves(list("abcde")) == (list("abc"), list("de"))
    assert halves(list("abcd")) == (list("ab"), list("cd"))
    fast, slow = _group("ab", 10.0), _group("cd", 7.0)
    assert slower(fast, slow) is slow and slower(slow, fast) is slow
    assert slower(fast, _group("cd", 8.5)) is None  # within 20%: alike
    assert slower(fast, Group(["c"], "half")) is None  # no figure


def _group(machines, bw, why="half"):
    return Group(list(machines), why, points=[Point(1 << 20, 1.0, bw, 20)])


class Network:
    """A modelled fleet: each machine's link speed, some slow pairs; a group's busbw is its slowest
    member's or link's (a ring goes at its slowest hop). Counts the all-reduces asked for."""

    def __init__(self, machines, slow=None, slow_links=(), missing=(), once_slow=()):
        self.once_slow = set(once_slow)  # slow in the first probe they are in: other traffic at that moment
        self.speed = {m: 10.0 for m in machines}
        self.speed.update(slow or {})
        self.slow_links, self.missing, self.calls = [set(x) for x in slow_links], set(missing), []

    def __call__(self, machines, why):
        self.calls.append((tuple(machines), why))
        if self.missing & set(machines):
            return Group(list(machines), why, error="rendezvous timed out", missing=sorted(self.missing & set(machines)))
        bw = min(self.speed[m] for m in machines)
        hit = self.once_slow & set(machines) if why == "probe" else set()
        if hit:
            self.once_slow -= hit
            bw = 3.0
        if any(link <= set(machines) for link in self.slow_links):
            bw = min(bw, 2.0)
        return _group(machines, bw, why)


@pytest.mark.parametrize("n,slow_at", [(5, 4), (8, 5), (16, 0), (16, 11), (33, 20), (6, 2)])
def test_the_bisection_finds_one_slow_machine_in_log_rounds(n, slow_at):
    machines = [f"m{i:02d}" for i in range(n)]
    net = Network(machines, slow={machines[slow_at]: 3.0})
    c = localize(machines, net)
    assert c.method == "bisection"
    assert [(s.kind, s.machines) for s in c.suspects] == [("node", [machines[slow_at]])]
    assert c.suspects[0].text.startswith(f"node {machines[slow_at]}: all-reduce busbw 3.00 GB/s vs fleet median 10.00")
    # the fleet, two per halving, then at most three pairs or two probes, and the confirmation
    assert len(net.calls) <= 1 + 2 * math.ceil(math.log2(n)) + 3 + 1
    assert net.calls[-1] == ((machines[slow_at], net.calls[-1][0][1]), "confirm")
    assert n < 8 or len(net.calls) < n * (n - 1) // 2 / 2  # far fewer than all pairs
    assert c.fleet_gbps == 3.0 and c.per_machine[machines[slow_at]] == 3.0


def test_a_healthy_fleet_names_nothing_and_stops_after_one_split():
    machines = [f"m{i}" for i in range(8)]
    net = Network(machines)
    c = localize(machines, net)
    assert c.suspects == [] and len(net.calls) == 3 and c.median_gbps == 10.0


def test_a_machine_slow_once_is_cleared_by_the_confirmation():
    # m5 is slow; m4, in the slow half with it, is slowed once, in its probe, by other traffic
    machines = [f"m{i}" for i in range(8)]
    net = Network(machines, slow={"m5": 3.0}, once_slow={"m4"})
    c = localize(machines, net)
    assert sorted(m for m, why in net.calls if why == "confirm") == [("m4", "m0"), ("m5", "m0")]
    assert [s.machines for s in c.suspects] == [["m5"]] and c.per_machine["m4"] == 10.0


def test_all_pairs_tell_a_slow_node_from_a_slow_link():
    machines = list("abcd")
    c = localize(machines, Network(machines, slow={"c": 4.0}))
    assert c.method == "pairs" and [g.why for g in c.groups] == ["fleet"] + ["pair"] * 6 + ["confirm"]
    assert [(s.kind, s.machines) for s in c.suspects] == [("node", ["c"])]
    c = localize(machines, Network(machines, slow_links=[("b", "d")]))
    assert [(s.kind, s.machines) for s in c.suspects] == [("link", ["b", "d"])]
    assert "both nodes are fast with others" in c.suspects[0].text


def test_a_machine_that_never_joins_is_set_aside_and_the_rest_measured():
    machines = list("abcde")
    net = Network(machines, slow={"b": 2.5}, missing={"e"})
    c = localize(machines, net, names={m: f"node-{m}" for m in machines})
    assert list(c.failed) == ["e"] and "did not join" in c.failed["e"]
    assert net.calls[1] == (("a", "b", "c", "d"), "fleet")  # measured again without it
    assert [s.machines for s in c.suspects] == [["b"]] and c.suspects[0].text.startswith("node node-b:")
    assert c.fleet_gbps == 2.5


def test_two_machines_are_one_pair_and_name_nobody():
    c = localize(["a", "b"], Network(["a", "b"], slow={"a": 1.0}))
    assert c.suspects == [] and len(c.groups) == 1 and any("cannot be told" in n for n in c.notes)


def test_attach_ranks_the_slow_node_and_the_one_that_did_not_join():
    machines = list("abcd")
    net = Network(machines, slow={"c": 2.0})
    c = localize(machines, net, names={m: f"n{m}" for m in machines})
    c.failed["x"] = "did not join the all-reduce: rendezvous timed out"
    c.names["x"] = "nx"
    a = FleetAnalysis(ranking=[NodeRank("na", "warning", 10, ["kernel.swappiness = 60"])])
    ar.attach(a, c)
    by = {r.node: r for r in a.ranking}
    assert by["nc"].severity == "critical" and "all-reduce busbw 2.00 GB/s vs fleet median" in by["nc"].reasons[0]
    assert by["nx"].severity == "critical" and "did not join" in by["nx"].reasons[0]
    assert by["na"].severity == "warning" and set(by) == {"na", "nc", "nx"}
    assert a.ranking[-1].node == "na"  # criticals first
    again = FleetAnalysis.from_dict(json.loads(json.dumps(a.to_dict())))
    assert again.comms is not None and again.comms.fleet_gbps == 2.0


def test_the_reports_show_the_all_reduce():
    from rich.console import Console

    from perfstack.report.fleet_html import render_fleet_html
    from perfstack.report.fleet_text import render_fleet
    from perfstack.report.fleet_view import fleet_view
    machines = list("abcd")
    c = localize(machines, Network(machines, slow={"c": 2.0}), names={m: f"n{m}" for m in machines}, backend="gloo")
    a = ar.attach(FleetAnalysis(), c)
    con = Console(record=True, width=200)
    render_fleet(fleet_view(a, RunMeta(source="test")), con)
    text = con.export_text()
    assert "All-reduce between machines" in text and "node nc: all-reduce busbw 2.00 GB/s vs fleet median" in text
    html = render_fleet_html(fleet_view(a, RunMeta(source="test")))
    assert "All-reduce between machines" in html and "node nc: all-reduce busbw 2.00 GB/s" in html


def test_a_saved_record_loads_back_the_same_and_a_hostile_one_is_refused_naming_the_field():
    machines = list("abcd")
    c = localize(machines, Network(machines, slow={"c": 2.0}), names={m: f"n{m}" for m in machines})
    c.failed["x"] = "did not join"
    d = json.loads(json.dumps(c.to_dict()))
    assert Comms.from_dict(d, "fleet.comms").to_dict() == c.to_dict()
    for change, message in ((lambda x: x["groups"][0]["points"][0].update(busbw_gbps="fast"),
                             "fleet.comms.groups[0].points[0].busbw_gbps must be a number"),
                            (lambda x: x["groups"].insert(0, "not a group"), "fleet.comms.groups[0] must be a JSON object"),
                            (lambda x: x["per_machine"].update(a="fast"), "fleet.comms.per_machine.a must be a number, not 'fast'"),
                            (lambda x: x.pop("backend"), "fleet.comms.backend is missing")):
        bad = json.loads(json.dumps(c.to_dict()))
        change(bad)
        with pytest.raises(InputError, match=re.escape(message)):
            Comms.from_dict(bad, "fleet.comms")
    for bad in (None, [], {"groups": []}, {"backend": 3}):
        with pytest.raises(InputError):
            Comms.from_dict(bad, "fleet.comms")


def test_fleet_diff_reports_the_all_reduce_that_moved_and_the_node_it_no_longer_names():
    from rich.console import Console

    from perfstack.fleet.compare import diff_fleets
    from perfstack.report.fleet_diff import render_fleet_diff
    machines = list("abcd")
    names = {m: f"n{m}" for m in machines}
    before = ar.attach(FleetAnalysis(), localize(machines, Network(machines, slow={"c": 2.0}), names=names))
    after = ar.attach(FleetAnalysis(), localize(machines, Network(machines), names=names))
    d = diff_fleets(FleetAnalysis.from_dict(before.to_dict()), FleetAnalysis.from_dict(after.to_dict()))
    moved = {c["subject"]: c for c in d.comms}
    assert moved["nc"]["before"] == 2.0 and moved["nc"]["after"] > 2.0 and moved["nc"]["change_pct"] > 10
    assert [(x["kind"], x["nodes"]) for x in d.comms_suspects_gone] == [("node", ["nc"])]
    assert d.comms_suspects_new == [] and "na" not in moved  # a healthy node's figure did not move
    con = Console(record=True, width=200)
    render_fleet_diff(d, "before.json", "after.json", con)
    text = con.export_text()
    assert "All-reduce between machines" in text and "nc: 2.00 GB/s" in text and "- node: node nc" in text
    assert diff_fleets(after, after).comms == []


def test_fleet_report_of_saved_runs_shows_the_all_reduce_of_the_saved_fleet_run(tmp_path, capsys, monkeypatch):
    from perfstack.cli.main import main
    from perfstack.fleet.output import fleet_run
    machines = list("abcd")
    c = localize(machines, Network(machines, slow={"c": 2.0}), names={m: f"n{m}" for m in machines})
    (tmp_path / "fleet.json").write_text(fleet_run(ar.attach(FleetAnalysis(), c), "bench", "test", 1.0).to_json())
    (tmp_path / "fleet-old.json").write_text("{ not json")
    src = Path(__file__).parents[1] / "fixtures" / "bundles" / "h100-idle"
    for m in machines:
        (tmp_path / f"n{m}").symlink_to(src, target_is_directory=True)
    monkeypatch.setenv("COLUMNS", "1000")  # the warning's lines hold a temporary path, long in a test worker
    assert main(["fleet", "report", str(tmp_path), "--json", "--fail-on", "never"]) == 0
    captured = capsys.readouterr()
    run = json.loads(captured.out)
    assert run["fleet"]["comms"]["fleet_gbps"] == 2.0
    assert any("nc" == r["node"] and r["severity"] == "critical" for r in run["fleet"]["ranking"])
    assert "fleet-old.json" in captured.err and "not read" in captured.err


# -- on a Ray cluster of simulated machines, gloo on the CPU --------------------------------------------

SLOW, NO_JOIN = "mach-slow", "mach-nojoin"
HEALTHY = ("mach-a", "mach-b", "mach-c")


@pytest.fixture(scope="module")
def machines_cluster():
    pytest.importorskip("torch")
    from perfstack.fleet.allreduce_ray import DELAY_ENV, NO_JOIN_ENV
    from perfstack.fleet.ray_engine import MACHINE_ENV
    nodes = [{"num_cpus": 1, "env_vars": {MACHINE_ENV: m}} for m in HEALTHY[1:]]
    nodes += [{"num_cpus": 1, "env_vars": {MACHINE_ENV: SLOW, DELAY_ENV: "0.02"}},
              {"num_cpus": 1, "env_vars": {MACHINE_ENV: NO_JOIN, NO_JOIN_ENV: "1"}}]
    with local_cluster(sys.modules[__name__], {"num_cpus": 1, "env_vars": {MACHINE_ENV: HEALTHY[0]}}, nodes) as ray:
        yield ray


@pytest.mark.ray
def test_on_ray_the_planted_slow_machine_is_named(machines_cluster):
    from perfstack.fleet import allreduce_ray
    from perfstack.fleet.ray_engine import locate, nodes
    ray = machines_cluster
    members = [n for n in locate(ray, nodes(ray)) if n.machine != NO_JOIN]
    c = allreduce_ray.run(ray, members=members, join_timeout_s=20)
    assert c is not None and c.backend == "gloo" and c.method == "pairs" and c.failed == {}
    assert [g.error for g in c.groups if g.error] == []
    whys = [g.why for g in c.groups]
    assert whys[:7] == ["fleet"] + ["pair"] * 6 and set(whys[7:]) == {"confirm"}
    assert all(g.points and g.busbw > 0 for g in c.groups)
    assert [p.bytes for p in c.groups[1].points] == list(allreduce_ray.SIZES["gloo"])
    assert [(s.kind, s.machines) for s in c.suspects] == [("node", [SLOW])]
    assert set(c.per_machine) == {SLOW, *HEALTHY} and c.per_machine[SLOW] < 0.8 * c.median_gbps


@pytest.mark.ray
def test_on_ray_a_machine_that_never_joins_is_reported_not_waited_for(machines_cluster):
    from perfstack.fleet import allreduce_ray
    from perfstack.fleet.ray_engine import locate, nodes
    ray = machines_cluster
    runners = {n.machine: n for n in locate(ray, nodes(ray))}
    measure = allreduce_ray.RayMeasure(ray, runners, "gloo", join_timeout_s=5)
    t0 = time.monotonic()
    g = measure([HEALTHY[0], NO_JOIN, HEALTHY[1]], "fleet")
    took = time.monotonic() - t0
    assert g.missing == [NO_JOIN] and "did not join" in g.error and runners[NO_JOIN].name in g.error
    assert took < 5 + allreduce_ray.FAIL_GRACE_S + 20 < measure.deadline_s(3)  # the peers' timeout, not the deadline
    # the machines are usable again afterwards
    again = measure([HEALTHY[0], HEALTHY[1]], "pair")
    assert again.error == "" and again.busbw > 0


@pytest.mark.ray
def test_cli_fleet_bench_reports_the_all_reduce(machines_cluster, monkeypatch, capsys):
    from perfstack.cli.main import main
    from perfstack.fleet import collect
    monkeypatch.setattr(collect, "bench", lambda *a, **k: [])  # the per-machine benchmarks are tested elsewhere
    monkeypatch.setattr(ar, "ALL_PAIRS_UP_TO", 2)  # the bisection, on the four machines that join
    rc = main(["fleet", "bench", "--json", "--fail-on", "critical", "--allreduce-timeout", "5", "--timeout", "60"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1  # a critical node
    comms = doc["fleet"]["comms"]
    slow_name, nojoin_name = comms["names"][SLOW], comms["names"][NO_JOIN]
    assert list(comms["failed"]) == [NO_JOIN] and comms["fleet_gbps"] > 0
    groups = [(g["why"], g["machines"], max((p["busbw_gbps"] for p in g["points"]), default=None)) for g in comms["groups"]]
    assert comms["method"] == "bisection" and [s["machines"] for s in comms["suspects"]] == [[SLOW]], groups
    ranked = {r["node"]: r for r in doc["fleet"]["ranking"]}
    assert set(ranked) == {slow_name, nojoin_name}
    assert f"node {slow_name}: all-reduce busbw" in ranked[slow_name]["reasons"][0]
    rc = main(["fleet", "bench", "--json", "--no-allreduce", "--timeout", "60"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["fleet"]["comms"] is None
