"""Every command's Run carries the same metadata, built by model.run_meta, under the names reports and diff read."""

from pathlib import Path

from perfstack.records.meta import run_meta
from perfstack.profile.summary import profile_run

TRACE = Path(__file__).parent / "fixtures" / "traces" / "h100" / "host-sync.pt.trace.json.gz"
COMMON = ("tool", "tool_version", "command", "created", "python")


def test_run_meta_names_the_tool_version_and_time_then_the_commands_own_fields():
    m = run_meta("bench", source="live", elapsed_s=1.5)
    assert list(m.to_dict())[:5] == list(COMMON)
    assert m.tool == "perfstack" and m.command == "bench" and m.created is not None and m.created.endswith("+00:00")
    assert m.source == "live" and m.elapsed_s == 1.5


def test_a_profile_run_has_the_version_and_date_its_report_and_diff_read():
    meta = profile_run([TRACE]).meta
    assert set(COMMON) <= set(meta.to_dict()) and meta.command == "profile"
    assert "version" not in meta.to_dict() and meta.traces == [str(TRACE)]


def test_the_builder_takes_only_the_fields_a_run_meta_has():
    import pytest
    with pytest.raises(TypeError):
        run_meta("bench", sorce="live")


def test_a_loaded_meta_saves_back_as_it_was_read_unknown_keys_and_order_included():
    from perfstack.records.meta import RunMeta
    old = {"command": "profile", "tool": "perfstack", "version": "0.1.0", "traces": ["a.json"], "gpu": "H100",
           "calibrated_from": None}
    m = RunMeta.from_dict(old, "meta")
    assert m.command == "profile" and m.traces == ["a.json"] and m.extra == {"version": "0.1.0"}
    assert list(m.to_dict().items()) == list(old.items())
    m.warnings = ["w"]
    m.extra["note"] = "n"
    assert list(m.to_dict())[-2:] == ["warnings", "note"]


def test_a_known_field_of_the_wrong_type_is_refused_naming_it():
    import pytest

    from perfstack.errors import InputError
    from perfstack.model import Run
    for meta, says in (({"source": 1}, "meta.source must be a string or null, not 1"),
                       ({"elapsed_s": "3"}, "meta.elapsed_s must be a number or null"),
                       ({"traces": "a.json"}, "meta.traces must be a list of strings or null")):
        with pytest.raises(InputError, match=says):
            Run.from_dict({"schema_version": 1, "meta": meta})


def test_every_command_field_is_shown_by_name_when_it_holds_something():
    m = run_meta("estimate", subcommand="infer", source="cfg.json", calibrated_from=None, elapsed_s=0.5)
    assert m.shown(("command", "calibrated_from", "source", "elapsed_s")) == [
        ("command", "estimate"), ("source", "cfg.json"), ("elapsed_s", "0.5")]
    assert "calibrated_from" in m.to_dict() and m.to_dict()["calibrated_from"] is None
