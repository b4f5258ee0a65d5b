"""'perfstack explain ID' answers for every finding id the tool can print.

The load test's ids are read from its source (each ``Finding(id="serve-...")``), not from the registry, so a
finding added without a registration fails here; each is then asked of the CLI, as a user would."""

import ast
import json
from pathlib import Path

import pytest

from perfstack.checks import FAMILIES
from perfstack.cli.main import main

LOADTEST = Path(__file__).resolve().parents[2] / "src" / "perfstack" / "loadtest"


def _emitted() -> set[str]:
    """Every id literal a ``Finding(...)`` call in the load test's source names."""
    ids: set[str] = set()
    for path in sorted(LOADTEST.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Finding":
                kw = {k.arg: k.value for k in node.keywords}
                named = kw.get("id")
                assert isinstance(named, ast.Constant), f"{path.name}: a Finding whose id is not a literal"
                ids.add(named.value)
    return ids


EMITTED = sorted(_emitted())


def test_the_load_test_emits_the_ids_its_registry_holds():
    import perfstack.loadtest.findings  # noqa: F401 — registers them
    assert len(EMITTED) >= 8 and all(i.startswith("serve-") for i in EMITTED)
    assert set(EMITTED) == set(FAMILIES["loadtest"])


@pytest.mark.parametrize("fid", EMITTED)
def test_explain_answers_every_load_test_finding(fid, capsys):
    assert main(["explain", fid, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["id"] == fid and doc["layer"] == "serving"
    assert doc["checks"] and doc["why"] and doc["fix"] and doc["refs"]
    assert doc["severities"] and doc["severity"] == doc["severities"][0]
    assert main(["explain", fid]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"{fid}  ·  Serving  ·  severity ")
    for label in ("checks", "why", "fix", "refs"):
        assert f"\n{label}: " in text


def test_the_load_tests_ladder_is_read_from_its_findings(capsys):
    """A load-test check's severities are the ones its Finding(id=...) names, not its function's others: the
    client's two findings come from one rule."""
    assert main(["explain", "--json"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["serve-errors"]["severities"] == ["critical", "warning"]
    assert rows["serve-client-saturated"]["severities"] == ["warning"]
    assert rows["serve-client-host-busy"]["severities"] == ["info"]
    assert rows["host-sync"]["severities"] == ["by share"]
    assert {"doctor", "profile", "loadtest"} == {c.family for f in FAMILIES.values() for c in f.values()}
    assert set(rows) == {i for f in FAMILIES.values() for i in f}  # every family, every id


def test_explain_answers_every_id_of_every_family(capsys):
    """Every id the one registry holds (the doctor's, the profile's and the load test's checks) is explained by
    the CLI: what it checks, why it matters, how to fix it."""
    assert main(["explain", "--json"]) == 0
    ids = [r["id"] for r in json.loads(capsys.readouterr().out)]
    assert len(ids) == len(set(ids)) == sum(len(f) for f in FAMILIES.values()) >= 100
    assert set(FAMILIES) == {"doctor", "profile", "loadtest"}
    for fid in ids:
        assert main(["explain", fid, "--json"]) == 0, fid
        doc = json.loads(capsys.readouterr().out)
        assert doc["id"] == fid and doc["title"] and doc["checks"] and doc["why"] and doc["fix"], fid
