"""A Run's estimates and fleet sections are records, checked once when the Run is loaded: a wrong type
is refused naming the field (exit 2 for report), and what perfstack writes loads back byte for byte."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from fixtures.fleet_runs import fleet, slow

from perfstack.cli.main import main
from perfstack.errors import InputError
from perfstack.estimate import catalog, hardware, infer, train
from perfstack.records.estimates import EstimateSheet, EstimateTree, Figure, Leaf
from perfstack.fleet import analyze, summarize
from perfstack.model import Run
from perfstack.records.meta import FanOut, FleetLabel, RunMeta

TREE = {"memory": {"weights": {"value": 13.5, "unit": "GB", "formula": "N · 2", "source": "hand"},
                   "kv_cache": {"value": 4.0, "unit": "GB"}},
        "latency": {"decode": {"unit": "ms", "value": 9.1}}, "notes": ["by hand"], "model": "llama"}


def _run_dict(estimates: Any = None, fleet_section: Any = None) -> dict[str, Any]:
    d = Run(meta=RunMeta(command="estimate")).to_dict()
    d["estimates"] = estimates
    if fleet_section is not None:
        d["fleet"] = fleet_section
    return d


def _sheet() -> dict[str, Any]:
    return infer.estimate(catalog.get("gpt2"), hardware.resolve("h100-sxm", "bf16"),
                          infer.InferSettings(batch=2, prompt=128, gen=16)).to_dict()


def test_the_estimators_return_a_sheet_of_typed_figures():
    est = train.estimate(catalog.get("gpt2"), hardware.resolve("h100-sxm", "bf16"), train.TrainSettings(batch=2, seq=128))
    assert isinstance(est, EstimateSheet) and est.kind == "train" and est.memory and est.memory["total_bytes"] > 0
    w = est.working["total_bytes"]
    assert isinstance(w, Figure) and w.unit == "B" and w.value == est.memory["total_bytes"]


def test_a_sheet_and_a_hand_made_tree_load_back_byte_for_byte_with_unknown_keys_kept():
    sheet = _sheet()
    sheet["by_hand"] = {"x": 1}  # a key this perfstack does not know, kept in its place
    sheet["working"]["total_bytes"]["note"] = "checked"
    for est in (sheet, TREE, {"value": 3, "unit": "GB"}, {}):
        d = _run_dict(copy.deepcopy(est))
        assert json.dumps(Run.from_dict(json.loads(json.dumps(d))).to_dict()) == json.dumps(d)
    tree = Run.from_dict(_run_dict(TREE)).estimates
    assert isinstance(tree, EstimateTree) and isinstance(tree.items["memory"], EstimateTree)
    weights = tree.items["memory"].items["weights"]
    assert isinstance(weights, Leaf) and weights.unit == "GB" and weights.extra == {"source": "hand"}


@pytest.mark.parametrize("path,bad,message", [
    (("memory", "weights", "unit"), 5, "estimates.memory.weights.unit must be a string or null, not 5"),
    (("latency", "decode", "formula"), ["x"], "estimates.latency.decode.formula must be a string or null"),
])
def test_a_hand_made_tree_with_a_wrong_type_is_refused_naming_the_field(path, bad, message):
    est = copy.deepcopy(TREE)
    node = est
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = bad
    with pytest.raises(InputError, match=re.escape(message)):
        Run.from_dict(_run_dict(est))


def test_a_sheet_with_a_wrong_type_is_refused_and_report_exits_2(tmp_path: Path, capsys):
    sheet = _sheet()
    sheet["working"]["itl_s"]["unit"] = 7
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(_run_dict(sheet)))
    assert main(["report", str(p), "--no-color"]) == 2
    assert "estimates.working.itl_s.unit must be a string" in capsys.readouterr().err


@pytest.fixture(scope="module")
def fleet_section() -> dict[str, Any]:
    runs = fleet("h200x2-bench-full", 3, seed=14, gpus=2, plant={1: lambda d: slow(d, 0.7)})
    nodes = [summarize(Run.from_dict(d), f"{d['meta']['fleet']['node']}.gpu{d['meta']['fleet']['gpu']}")
             for d in runs]
    return json.loads(json.dumps(analyze(nodes).to_dict()))


def test_a_fleet_section_loads_back_byte_for_byte(fleet_section):
    d = _run_dict(fleet_section=fleet_section)
    assert json.dumps(Run.from_dict(copy.deepcopy(d)).to_dict()) == json.dumps(d)


@pytest.mark.parametrize("where,bad,message", [
    (("members", 0, "figures"), "12", "fleet.members[0].figures must be an integer, not '12'"),
    (("members", 0, "name"), None, "fleet.members[0].name must be a string"),
    (("outliers", 0, "z"), "3.1", "fleet.outliers[0].z must be a number"),
    (("outliers", 0, "slow"), 1, "fleet.outliers[0].slow must be true or false"),
    (("ranking", 0, "severity"), "urgent", "fleet.ranking[0].severity must be one of critical, warning, info"),
    (("ranking", 0, "reasons"), "slow", "fleet.ranking[0].reasons must be a list of strings"),
    (("heatmaps", 0, "rows"), {}, "fleet.heatmaps[0].rows must be a list of objects"),
    (("skus",), {"h200": "node000"}, "fleet.skus.h200 must be a list of strings"),
    (("identity_keys",), 1.5, "fleet.identity_keys must be an integer"),
    (("ranking",), {}, "fleet.ranking must be a list"),
    (("comms",), [], "fleet.comms must be a JSON object or null, not a list"),
])
def test_a_fleet_section_with_a_wrong_type_is_refused_naming_the_field(fleet_section, where, bad, message):
    f = copy.deepcopy(fleet_section)
    node = f
    for k in where[:-1]:
        node = node[k]
    node[where[-1]] = bad
    with pytest.raises(InputError, match=message.replace(".", r"\.").replace("[", r"\[")):
        Run.from_dict(_run_dict(fleet_section=f))


def test_a_node_label_and_a_fan_out_are_records_that_load_back_as_written():
    d = _run_dict()
    d["meta"]["fleet"] = {"node": "n1", "gpu": 0, "ray_node_id": "ab", "machine": "m", "part": None, "rack": 4}
    d["meta"]["fanout"] = {"tasks": 2, "failed": 0, "overhead_s_median": 0.01, "overhead_s_max": 0.02, "per_task": []}
    run = Run.from_dict(copy.deepcopy(d))
    assert isinstance(run.meta.fleet, FleetLabel) and run.meta.fleet.gpu == 0 and run.meta.fleet.extra == {"rack": 4}
    assert isinstance(run.meta.fanout, FanOut) and run.meta.fanout.tasks == 2
    assert json.dumps(run.to_dict()) == json.dumps(d)
    built = Run(meta=RunMeta(fleet=FleetLabel(node="n2", gpu=None, ray_node_id="cd", machine="m", part=None))).to_dict()
    assert built["meta"]["fleet"] == {"node": "n2", "gpu": None, "ray_node_id": "cd", "machine": "m", "part": None}


@pytest.mark.parametrize("key,bad,message", [
    ("fleet", {"node": "n1", "gpu": "0"}, "meta.fleet.gpu must be an integer or null, not '0'"),
    ("fleet", "n1", "meta.fleet must be a JSON object"),
    ("fanout", {"tasks": 2, "overhead_s_median": "fast"}, "meta.fanout.overhead_s_median must be a number or null"),
    ("fanout", {"per_task": [1]}, "meta.fanout.per_task[0] must be a JSON object, not 1"),
])
def test_a_hostile_node_label_or_fan_out_is_refused_naming_the_field(key, bad, message):
    d = _run_dict()
    d["meta"][key] = bad
    with pytest.raises(InputError, match=re.escape(message)):
        Run.from_dict(d)
