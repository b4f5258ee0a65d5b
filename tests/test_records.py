"""Every record a Run is made of keeps what it does not know and refuses what it cannot hold.

One test over every subclass of ``records.base.Record``: a JSON object with every field (a value of the field's
annotation) and a key no perfstack writes is read, and written back with that key and value; the same object
with one field of the wrong type is refused with an InputError naming that field. The classes are found, not
listed, so a new record is covered by existing.
"""

from __future__ import annotations

import enum
import importlib
import json
import pkgutil
import typing
from pathlib import Path
from typing import Any, Literal, Union

import pytest

import perfstack.records
from perfstack.errors import InputError
from perfstack.records.base import Record, Spelled, convert, hints_of, written_fields

for _m in pkgutil.walk_packages(perfstack.records.__path__, "perfstack.records."):
    importlib.import_module(_m.name)
importlib.import_module("perfstack.model")


def _all(cls: type) -> list[type]:
    return [c for s in cls.__subclasses__() for c in (s, *_all(s))]


RECORDS = sorted(set(_all(Record)), key=lambda c: f"{c.__module__}.{c.__name__}")

# Values a field's annotation allows but a check beyond it does not (a vocabulary kept in a check, settings
# that depend on a sheet's kind).
VALID: dict[tuple[str, str], Any] = {
    ("ArmResult", "verdict"): "works",
    ("ArmResult", "ci_pct"): [1.0, 2.0],
    ("Finding", "confidence"): "high",
    ("EstimateSheet", "kind"): "infer",
    ("EstimateSheet", "settings"): {"batch": 1, "prompt": 8, "gen": 8, "dtype": "bf16", "tp": 1},
    ("EstimateSheet", "fit"): [{"gpu": "h100-sxm", "gpus_needed": 1}],
    ("EstimateSheet", "model"): {"name": "m"},
    ("EstimateSheet", "gpu"): {"name": "g"},
    ("EstimateSheet", "regime"): {"decode": "memory-bound"},
    ("FleetAnalysis", "schema_version"): 1,
    ("Diff", "schema_version"): 1,
    ("UnevenFinding", "severity"): "warning",
    ("SharedFinding", "severity"): "info",
    ("NodeRank", "severity"): "critical",
}
DERIVED = {"FleetAnalysis": "summary", "Diff": "summary"}  # keys to_dict figures again from the fields, and adds
# A saved Diff names its kind, and writes its keys in its own order whatever order it was read in.
HEAD = {"Diff": {"kind": "perfstack-diff"}}
OWN_ORDER = {"Diff"}
UNKNOWN = {"a-key-no-perfstack-writes": [1, {"nested": "kept"}]}


def _sample(hint: Any, depth: int = 0) -> Any:
    """A JSON value of the annotation ``hint``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return "any"
    if hint in (str, int, float, bool):
        return {str: "text", int: 3, float: 2.5, bool: True}[hint]
    if origin is Union:
        return _sample(next(a for a in args if a is not type(None)), depth)
    if origin is typing.Annotated:  # a value JSON has no word for (records.base.Spelled): its word
        return next(m.word for m in args[1:] if isinstance(m, Spelled))
    if origin is Literal:
        return args[-1]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return next(iter(hint)).value
    if origin in (list, tuple):
        return [] if depth > 3 else [_sample(args[0] if args else Any, depth + 1)]
    if origin is dict or origin is typing.get_origin(typing.Mapping[str, Any]):
        return {} if depth > 3 else {"k": _sample(args[1] if len(args) == 2 else Any, depth + 1)}
    if isinstance(hint, type) and issubclass(hint, Record):
        return _object(hint, depth + 1)
    raise AssertionError(f"no sample for {hint!r}")


# Keys a record writes figured from its fields, with the value they have in a sample (read back, they are
# figured again in their place).
FIGURED = {"Comms": {"fleet_gbps": None}}


def _object(cls: type, depth: int = 0) -> dict[str, Any]:
    hints = hints_of(cls)
    return {**{cls.KEYS.get(f.name, f.name): VALID.get((cls.__name__, f.name), _sample(hints[f.name], depth))
               for f in written_fields(cls)}, **FIGURED.get(cls.__name__, {})}


def _wrong(hint: Any) -> Any:
    """A JSON value the annotation ``hint`` does not allow: null where it does not, else another kind."""
    for v in (None, 12345, "not-this-kind", [12345], {"k": 12345}, True):
        try:
            convert(hint, v, "probe")
        except InputError:
            return v
    raise AssertionError(f"every value fits {hint!r}")


def test_every_record_class_is_found():
    names = {c.__name__ for c in RECORDS}
    assert {"RunMeta", "FleetLabel", "Finding", "Measurement", "Section", "Step", "Trial", "EstimateSheet",
            "FleetAnalysis", "HeatRow"} <= names


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_an_unknown_key_round_trips_and_a_wrong_type_is_refused_naming_the_field(cls):
    assert "extra" in hints_of(cls), f"{cls.__name__} has no extra: it would drop keys it does not know"
    d = {**HEAD.get(cls.__name__, {}), **_object(cls), **UNKNOWN}
    rec = cls.from_dict(json.loads(json.dumps(d)), "rec")
    out = rec.to_dict()
    out.pop(DERIVED.get(cls.__name__, ""), None)
    assert out["a-key-no-perfstack-writes"] == UNKNOWN["a-key-no-perfstack-writes"]
    if cls.__name__ in OWN_ORDER:
        assert out == d
    else:
        assert json.dumps(out) == json.dumps(d)  # every key, in the order read
    assert cls.from_dict(json.loads(json.dumps(out)), "rec") == rec
    hints = hints_of(cls)
    checked = [f for f in written_fields(cls) if hints[f.name] is not Any]
    assert checked, f"{cls.__name__} checks nothing"
    for f in checked:
        key = cls.KEYS.get(f.name, f.name)
        with pytest.raises(InputError, match=rf"^rec\.{key}\b"):
            cls.from_dict({**d, key: _wrong(hints[f.name])}, "rec")


def test_a_run_with_keys_this_perfstack_does_not_know_reports_and_saves_them_back(tmp_path, capsys):
    """Through the CLI: a Run whose finding, measurement, meta and profile carry keys of a newer perfstack is
    rendered (exit 0) and its JSON report holds those keys as they were."""
    from perfstack.cli.main import main
    src = Path(__file__).parent / "fixtures" / "runs" / "h100-doctor-bench.json"
    d = json.loads(src.read_text())
    d["meta"]["newer"] = {"x": 1}
    d["findings"][0]["newer"] = [1, 2]
    d["measurements"][0]["newer"] = "kept"
    d["profile"] = {"busy_ms": 12.0, "newer": True}
    run = tmp_path / "newer.json"
    run.write_text(json.dumps(d))
    assert main(["report", str(run), "-f", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["meta"]["newer"] == {"x": 1} and out["findings"][0]["newer"] == [1, 2]
    assert out["measurements"][0]["newer"] == "kept" and out["profile"] == {"busy_ms": 12.0, "newer": True}


LOADTEST_RUN = Path(__file__).parents[1] / "docs" / "examples" / "loadtest-h100" / "decode-eager.json"


def test_a_load_test_run_keeps_what_it_does_not_know_through_report(tmp_path, capsys):
    """Through the CLI: a recorded load-test Run whose sections carry keys of a newer perfstack, at every depth
    (the load test, a level, a request, a summary and its distribution, a server sample, the client's load, the
    SLO), is rendered and its JSON report holds the whole section as it was read."""
    from perfstack.cli.main import main
    d = json.loads(LOADTEST_RUN.read_text())
    lt = d["loadtest"]
    lv = lt["levels"][0]
    lv["server"] = [{"t_s": 1.5, "running": 4.0}]
    for i, where in enumerate((lt, lv, lv["requests"][0], lv["summary"], lv["summary"]["ttft"], lv["server"][0],
                               lv["client"], lt.setdefault("slo", {"ttft_ms": 500.0}))):
        where[f"newer-{i}"] = {"kept": [i, "as it was"]}
    run = tmp_path / "newer.json"
    run.write_text(json.dumps(d))
    assert main(["report", str(run), "-f", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["loadtest"] == lt


@pytest.mark.parametrize("path, value, message", [
    (("levels", 0, "requests", 2, "ttft_ms"), "fast", "loadtest.levels[0].requests[2].ttft_ms must be a number or null"),
    (("levels", 0, "summary", "ttft", "p99"), None, "loadtest.levels[0].summary.ttft.p99 must be a number"),
    (("levels", 0, "load"), "all", 'loadtest.levels[0].load must be a number or "inf"'),
    (("levels", 0, "client", "processes"), 1.5, "loadtest.levels[0].client.processes must be an integer"),
    (("workload",), [], "loadtest.workload must be an object"),
])
def test_a_wrong_type_in_a_load_test_is_refused_naming_the_field(tmp_path, capsys, path, value, message):
    from perfstack.cli.main import main
    d = json.loads(LOADTEST_RUN.read_text())
    where = d["loadtest"]
    for k in path[:-1]:
        where = where[k]
    where[path[-1]] = value
    run = tmp_path / "bad.json"
    run.write_text(json.dumps(d))
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_an_unbounded_load_is_written_inf_and_read_back():
    """JSON has no infinity: a load of everything at once is written "inf" (in the sweep's lists too), and read
    back as infinity."""
    import math
    from perfstack.records.loadtest import Level, LoadTest, Summary
    lv = Level(mode="rate", load=math.inf, requests=[], summary=Summary(duration_s=1.0, completed=0, failed=0))
    lt = LoadTest(url="u", api="chat", model="m", workload={}, levels=[lv], sweep={"loads": [1.0, math.inf],
                                                                                    "knee": math.inf})
    d = json.loads(json.dumps(lt.to_dict(), allow_nan=False))
    assert d["levels"][0]["load"] == "inf" and d["sweep"] == {"loads": [1.0, "inf"], "knee": "inf"}
    # a producer's record writes only what differs from the defaults, as the load test's Runs always have
    assert d["levels"][0] == {"mode": "rate", "load": "inf", "requests": [],
                              "summary": {"duration_s": 1.0, "completed": 0, "failed": 0}}
    back = LoadTest.from_dict(d, "loadtest")
    assert back.levels[0].load == math.inf and back.sweep == {"loads": [1.0, math.inf], "knee": math.inf}
    assert back.to_dict() == d
