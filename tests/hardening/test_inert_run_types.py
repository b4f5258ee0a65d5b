"""A saved Run is checked once, when loaded: a wrong type, an unknown status, NaN, a huge number
or deep nesting is exit 2 naming the file and the field, never an internal error in a renderer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfstack.cli.main import main

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def _doctor() -> dict:
    return json.loads((RUNS / "h100-doctor.json").read_text())


def _bench() -> dict:
    return json.loads((RUNS / "h100-bench-full.json").read_text())


def _set(data: dict, section: str, field: str, value) -> dict:
    data[section][0][field] = value
    return data


CASES = [
    (lambda: _set(_doctor(), "findings", "recoverable_ms", "12"), "findings[0].recoverable_ms must be a number"),
    (lambda: _set(_doctor(), "findings", "recoverable_ms", -3.0), "findings[0].recoverable_ms must not be negative"),
    (lambda: _set(_doctor(), "findings", "severity", "catastrophic"), "findings[0].severity must be one of"),
    (lambda: _set(_doctor(), "findings", "evidence", 5), "findings[0].evidence must be a string"),
    (lambda: _set(_doctor(), "findings", "sources", "abc"), "findings[0].sources must be a list of strings"),
    (lambda: _set(_bench(), "measurements", "value", "x"), "measurements[0].value must be a number"),
    (lambda: _set(_bench(), "measurements", "status", "great"), "measurements[0].status must be one of"),
    (lambda: _set(_bench(), "measurements", "samples", [1.0, None]), "measurements[0].samples[1] must be a number, not None"),
    (lambda: _set(_bench(), "measurements", "peak", -1), "measurements[0].peak must not be negative"),
    (lambda: _set(_doctor(), "checks", "status", "maybe"), "checks[0].status must be one of"),
    (lambda: dict(_doctor(), schema_version=True), "schema_version must be a positive integer"),
    (lambda: dict(_doctor(), meta=[1]), "meta must be a JSON object"),
    (lambda: dict(_doctor(), facts={"a": 5}), "facts.a must be a JSON object"),
]


@pytest.mark.parametrize("make, message", CASES, ids=[c[1] for c in CASES])
def test_wrong_types_are_exit_2_naming_the_field(make, message, tmp_path, capsys):
    p = tmp_path / "run.json"
    p.write_text(json.dumps(make()))
    assert main(["report", str(p)]) == 2
    err = capsys.readouterr().err
    assert message in err and str(p) in err and "internal error" not in err, err


@pytest.mark.parametrize("text, message", [
    ('{"schema_version": 1, "meta": {"x": NaN}}', "field meta.x is NaN"),
    ('{"schema_version": 1, "meta": {"x": 1e400}}', "field meta.x is 1e400"),
    ('{"schema_version": 1, "meta": {"x": ' + "7" * 5000 + "}}", "field meta.x is an integer of 5000 digits"),
    ('{"schema_version": 1, "profile": ' + "[" * 100_000 + "]" * 100_000 + "}", "nests too deeply"),
    ('{"schema_version": 1, "profile": ' + "[" * 80 + "]" * 80 + "}", "nests deeper than 64 levels"),
])
def test_numbers_and_nesting_beyond_bounds_are_exit_2(text, message, tmp_path, capsys):
    p = tmp_path / "run.json"
    p.write_text(text)
    assert main(["report", str(p)]) == 2
    err = capsys.readouterr().err
    assert message in err and str(p) in err and "internal error" not in err, err


def test_a_saved_run_still_loads_and_renders(capsys):
    for f in sorted(RUNS.glob("*.json")):
        assert main(["report", str(f), "-f", "md"]) == 0, f
