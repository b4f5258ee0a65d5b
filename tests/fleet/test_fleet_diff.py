"""perfstack diff of two fleet Runs: what drifted since last time, node by node."""

from __future__ import annotations

import json

from fixtures.fleet_runs import fleet, set_fact, slow, write
from perfstack.cli.main import main
from perfstack.fleet.compare import diff_fleets
from perfstack.fleet.gather import entries, gather
from perfstack.fleet import analyze


def _fleet_run(tmp_path, name, plant):
    d = tmp_path / name
    write(fleet("h100-doctor-bench", 9, seed=41, plant=plant), d)
    out = tmp_path / f"{name}.json"
    assert main(["fleet", "report", str(d), "-q", "--fail-on", "never", "-o", str(out)]) == 0
    return out


def test_last_week_vs_this_week(tmp_path, capsys):
    week1 = _fleet_run(tmp_path, "w1", {2: lambda d: set_fact(d, "driver.version", "550.54.15")})
    week2 = _fleet_run(tmp_path, "w2", {5: lambda d: slow(d, 0.7, ("hbm",))})
    capsys.readouterr()
    rc = main(["diff", str(week1), str(week2), "--json", "--fail-on-regression"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 1  # node005 is newly flagged
    assert d["kind"] == "perfstack-fleet-diff"
    assert [x["node"] for x in d["newly_flagged"]] == ["node005"]
    assert [x["node"] for x in d["no_longer_flagged"]] == ["node002"]
    assert [(x["key"], x["node"]) for x in d["drift_gone"]] == [("driver.version", "node002")]
    assert {x["node"] for x in d["outliers_new"]} == {"node005"} and d["outliers_gone"] == []
    assert main(["diff", str(week1), str(week2), "--no-color"]) == 0
    text = capsys.readouterr().out
    assert "NEW" in text and "node005" in text and "CLEARED" in text and "node002" in text


def test_the_same_fleet_twice_has_nothing_to_say(tmp_path, capsys):
    a = analyze(gather(entries([_w(tmp_path)])))
    assert diff_fleets(a, a).empty()


def _w(tmp_path):
    d = tmp_path / "same"
    write(fleet("h100-doctor", 4, seed=42), d)
    return d


def test_a_rollout_to_every_node_moves_the_median_without_flagging_anyone(tmp_path):
    before = analyze(gather(entries([_dir(tmp_path, "b", None)])))
    after = analyze(gather(entries([_dir(tmp_path, "a", 0.9)])))
    d = diff_fleets(before, after)
    assert d.newly_flagged == [] and d.outliers_new == []
    moved = {m["figure"]: m["change_pct"] for m in d.medians}
    assert moved and all(k.startswith("gemm.") for k in moved) and all(-11 < v < -9 for v in moved.values())


def _dir(tmp_path, name, factor):
    plant = {i: (lambda d: slow(d, factor, ("gemm",))) for i in range(6)} if factor else None
    d = tmp_path / name
    write(fleet("h100-doctor-bench", 6, seed=43, plant=plant), d)
    return d


def test_report_renders_a_fleet_run_and_diff_refuses_a_fleet_against_a_node(tmp_path, capsys):
    week1 = _fleet_run(tmp_path, "w1", {2: lambda d: set_fact(d, "driver.version", "550.54.15")})
    capsys.readouterr()
    assert main(["report", str(week1), "--no-color"]) == 0
    assert "node002" in capsys.readouterr().out
    assert main(["report", str(week1), "-o", str(tmp_path / "r.html")]) == 0
    assert 'class="heatmap"' in (tmp_path / "r.html").read_text()
    node_run = tmp_path / "w1" / "node000.json"
    assert main(["diff", str(week1), str(node_run)]) == 2
    assert "not a fleet Run" in capsys.readouterr().err
