import json

import pytest

from perfstack.errors import InputError
from perfstack.model import SCHEMA_VERSION, CheckResult, Fact, Facts, Finding, Run, Severity
from perfstack.records.meta import RunMeta


def sample_run():
    facts = Facts({"a.b": Fact("a.b", {"x": [1, 2]}, "/proc/x"), "c": Fact.missing("c", "absent", "/c")})
    finding = Finding("swappiness", "kernel", Severity.WARNING, "t", "vm.swappiness = 60", "fix it", why="w",
                      sources=["/proc/sys/vm/swappiness"], fix_commands=["sysctl -w vm.swappiness=10"])
    return Run(meta=RunMeta(command="doctor"), facts=facts, findings=[finding],
               checks=[CheckResult("swappiness", "found"), CheckResult("x", "not-checked", "c: absent")])


def test_run_round_trips_losslessly(tmp_path):
    run = sample_run()
    run.save(tmp_path / "r.json")
    back = Run.load(tmp_path / "r.json")
    assert back.to_dict() == run.to_dict()
    assert back.facts["c"].available is False and back.facts["c"].reason == "absent"
    assert back.findings[0].severity is Severity.WARNING


def test_newer_schema_says_upgrade(tmp_path):
    d = sample_run().to_dict()
    d["schema_version"] = SCHEMA_VERSION + 1
    (tmp_path / "r.json").write_text(json.dumps(d))
    with pytest.raises(InputError) as e:
        Run.load(tmp_path / "r.json")
    assert "upgrade" in e.value.hint


@pytest.mark.parametrize("text,msg", [("{", "not valid JSON"), ("[]", "expected a JSON object"),
                                      ('{"a": 1}', "no schema_version")])
def test_not_a_run(tmp_path, text, msg):
    (tmp_path / "r.json").write_text(text)
    with pytest.raises(InputError, match=msg):
        Run.load(tmp_path / "r.json")


def test_need_records_sources_and_reasons():
    f = sample_run().facts.view()
    assert f.need("a.b") == {"x": [1, 2]}
    assert f.value("c", "dflt") == "dflt"
    assert f.sources() == ["/c", "/proc/x"]


@pytest.mark.parametrize("fact, msg", [
    ({"value": 1, "available": "yes"}, "facts.k.available must be true or false"),
    ({"value": 1, "nope": 2}, "facts.k.nope is not a field of a fact"),
    ({"source": "x"}, "facts.k.value is missing"),
    (5, "facts.k must be a JSON object"),
    ({"value": 1, "reason": None}, "facts.k.reason must be a string"),
])
def test_a_wrong_fact_is_refused_naming_its_field(fact, msg):
    """Facts are checked by the records' own annotation checks, strictly: a fact is one reading, not an open
    record."""
    d = json.loads(Run(meta=RunMeta(), facts=Facts({})).to_json())
    d["facts"] = {"k": fact}
    with pytest.raises(InputError, match=msg):
        Run.from_dict(d)
