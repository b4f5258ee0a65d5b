"""`perfstack report` and `perfstack diff` through main(): formats, files, exit codes, bad input."""

from __future__ import annotations

import json

import pytest
from synthetic import RUNS, doctor, full_run

from perfstack.cli import diff as diff_cli
from perfstack.cli import main as cli_main
from perfstack.cli import report as report_cli


@pytest.fixture(autouse=True)
def commands(monkeypatch):
    """report and diff registered whether or not cli/main.py lists them yet."""
    extra = tuple(m for m in (report_cli, diff_cli) if m not in cli_main.COMMANDS)
    monkeypatch.setattr(cli_main, "COMMANDS", cli_main.COMMANDS + extra)


def main(*argv: str) -> int:
    return cli_main.main(["--no-color", *argv])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Runs saved once for the module: the tests read them and write only beside them."""
    tmp_path = tmp_path_factory.mktemp("runs")
    paths = {}
    built = {"full": full_run("h100", recorded=False), "slower": full_run("h100", seed=2, scale=0.9, recorded=False),
             "same": full_run("h100", seed=3, recorded=False), "h200": full_run("h200x2", recorded=False)}
    for name, run in built.items():
        paths[name] = tmp_path / f"{name}.json"
        run.save(paths[name])
    return paths


# -- report -----------------------------------------------------------------------------------
def test_report_text_by_default(capsys):
    assert main("report", str(RUNS / "h100-doctor.json")) == 0
    out = capsys.readouterr().out
    assert "perfstack doctor" in out and "swappiness" in out and "not in this Run: bench, profile, estimates" in out


@pytest.mark.parametrize("fmt, ext, marker", [("html", "html", "<!DOCTYPE html>"), ("md", "md", "# perfstack doctor report"),
                                              ("json", "json", '"schema_version"'), ("text", "txt", "perfstack doctor")])
def test_report_writes_each_format_to_a_file(runs, tmp_path, capsys, fmt, ext, marker):
    out = tmp_path / f"report.{ext}"
    assert main("report", str(runs["full"]), "-o", str(out)) == 0  # the format follows the extension
    assert marker in out.read_text()
    assert f"to {out}" in capsys.readouterr().err
    again = tmp_path / "explicit.out"
    assert main("report", str(runs["full"]), "-f", fmt, "-o", str(again)) == 0
    assert marker in again.read_text()


def test_report_markdown_to_stdout(runs, capsys):
    assert main("report", str(runs["full"]), "-f", "md") == 0
    out = capsys.readouterr().out
    assert "| figure | measured | peak | % of peak | verdict | notes |" in out and "## Estimates" in out


def test_report_json_round_trips(runs, capsys):
    assert main("report", str(runs["full"]), "-f", "json") == 0
    assert json.loads(capsys.readouterr().out) == json.loads(runs["full"].read_text())


def test_html_is_not_printed_to_a_terminal(runs, capsys, monkeypatch):
    monkeypatch.setattr("rich.console.Console.is_terminal", property(lambda self: True))
    assert main("report", str(runs["full"]), "-f", "html") == 2
    assert "give -o" not in (err := capsys.readouterr().err) and "-o report.html" in err


# -- bad input --------------------------------------------------------------------------------
def write(tmp_path, name: str, text: str):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize("content, message", [
    ("not json at all", "is not valid JSON (line 1)"),
    ("[1, 2, 3]", "is not a perfstack Run (expected a JSON object)"),
    ('{"hello": "world"}', "not a perfstack Run: it has no schema_version"),
    ('{"schema_version": 1, "findings": [{"nope": 1}]}', "findings[0].id is missing"),
    # a wrongly typed field is refused naming it (the profile's took its default before: busy_ms loaded as 0.0)
    ('{"schema_version": 1, "profile": {"busy_ms": "12"}}', "profile.busy_ms must be a number, not '12'"),
])
def test_not_a_run_exits_2_without_traceback(tmp_path, capsys, content, message):
    path = write(tmp_path, "bad.json", content)
    assert main("report", path) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.startswith("perfstack: error:")
    assert "hint:" in err


def test_newer_schema_says_upgrade(tmp_path, capsys):
    data = json.loads((RUNS / "h100-doctor.json").read_text())
    data["schema_version"] = 99
    path = write(tmp_path, "future.json", json.dumps(data))
    assert main("report", path) == 2
    err = capsys.readouterr().err
    assert "schema_version 99" in err and "pip install -U perfstack" in err
    assert main("diff", str(RUNS / "h100-doctor.json"), path) == 2


def test_missing_file_and_directory_output(tmp_path, capsys):
    assert main("report", str(tmp_path / "nope.json")) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main("report", str(RUNS / "h100-doctor.json"), "-o", str(tmp_path)) == 2
    assert "is a directory" in capsys.readouterr().err


def test_wrongly_shaped_sections(tmp_path, capsys):
    assert main("report", write(tmp_path, "x.json", '{"schema_version": 1, "facts": [1]}')) == 2
    assert "x.json: facts must be a JSON object" in capsys.readouterr().err


def test_a_diff_is_not_a_run(runs, tmp_path, capsys):
    d = tmp_path / "d.json"
    assert main("diff", str(runs["full"]), str(runs["same"]), "-o", str(d)) == 0
    assert main("report", str(d)) == 2
    assert "is a perfstack diff, not a Run" in capsys.readouterr().err


def test_a_diff_is_known_by_its_parsed_kind_not_its_layout(runs, tmp_path, capsys):
    d = tmp_path / "d.json"
    assert main("diff", str(runs["full"]), str(runs["same"]), "-o", str(d)) == 0
    compact = tmp_path / "compact.json"
    compact.write_text(json.dumps(json.loads(d.read_text()), separators=(",", ":")))
    assert main("report", str(compact)) == 2
    assert "is a perfstack diff, not a Run" in capsys.readouterr().err
    # a Run that merely quotes the marker in a value is still a Run
    quoting = tmp_path / "quoting.json"
    quoting.write_text(json.dumps({"schema_version": 1, "meta": {"note": '"kind": "perfstack-diff"'}}))
    assert main("report", "-f", "json", str(quoting)) == 0


def test_debug_shows_the_traceback(tmp_path, capsys):
    assert main("report", "--debug", write(tmp_path, "bad.json", "{")) == 2
    assert "Traceback" in capsys.readouterr().err


def test_missing_sections_render_what_is_there(tmp_path, capsys):
    data = json.loads((RUNS / "h200x2-doctor.json").read_text())
    for key in ("findings", "checks", "measurements", "profile", "estimates"):
        data.pop(key)
    path = write(tmp_path, "facts-only.json", json.dumps(data))
    for fmt in ("text", "md", "html"):
        out = tmp_path / f"r.{fmt}"
        assert main("report", path, "-f", fmt, "-o", str(out)) == 0
        assert "H200" in out.read_text()


# -- diff -------------------------------------------------------------------------------------
def test_diff_text(runs, capsys):
    assert main("diff", str(runs["full"]), str(runs["slower"])) == 0
    out = capsys.readouterr().out
    assert "regressed" in out and "hbm.copy" in out and "sweep points not shown" in out


def test_fail_on_regression_exit_codes(runs, capsys):
    assert main("diff", str(runs["full"]), str(runs["same"]), "--fail-on-regression") == 0
    assert main("diff", str(runs["full"]), str(runs["slower"]), "--fail-on-regression") == 1
    assert "regressed:" in capsys.readouterr().err
    assert main("diff", str(runs["full"]), str(runs["slower"]), "--fail-on-regression", "5") == 1  # 10% worse
    assert main("diff", str(runs["full"]), str(runs["slower"]), "--fail-on-regression", "25") == 0
    assert main("diff", str(runs["slower"]), str(runs["full"]), "--fail-on-regression") == 0  # an improvement
    assert main("diff", str(runs["full"]), str(runs["slower"]), "--fail-on-regression", "-1") == 2


def test_diff_of_different_machines_still_works(capsys):
    assert main("diff", str(RUNS / "h100-doctor.json"), str(RUNS / "h200x2-doctor.json"), "--fail-on-regression") == 0
    cap = capsys.readouterr()
    assert "The hardware differs" in cap.out and "gpu.models" in cap.out
    assert "storage.mounts[/dev" in cap.out and "/shm]" in cap.out  # brackets in the data are not taken for rich markup
    assert "the hardware differs" in cap.err


@pytest.mark.parametrize("fmt, marker", [("json", '"kind": "perfstack-diff"'), ("md", "# perfstack diff"),
                                         ("html", "<!DOCTYPE html>")])
def test_diff_formats(runs, tmp_path, fmt, marker):
    out = tmp_path / f"d.{fmt}"
    assert main("diff", str(runs["full"]), str(runs["slower"]), "-o", str(out)) == 0
    assert marker in out.read_text()


def test_diff_json_flag(runs, capsys):
    assert main("diff", str(runs["full"]), str(runs["h200"]), "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["hardware"]["same"] is False
    assert all(m["hardware_bound"] for m in data["measurements"] if m["bench"] != "host")


def test_doctor_runs_diff_cleanly_against_themselves(capsys):
    path = str(RUNS / "h100-doctor.json")
    assert main("diff", path, path, "--fail-on-regression") == 0
    out = capsys.readouterr().out
    assert "0 facts drifted" in out and "Facts that drifted" not in out
    assert doctor("h100").findings  # sanity: the recorded Run has findings to compare
