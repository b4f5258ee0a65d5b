import json

import pytest

from perfstack.cli.main import main
from perfstack.model import SCHEMA_VERSION


@pytest.fixture
def bundle(tmp_path):
    root = tmp_path / "b"
    for rel, text in {"proc/sys/vm/swappiness": "60\n", "sys/kernel/mm/transparent_hugepage/enabled": "[never]\n",
                      "env.json": json.dumps({"NCCL_DEBUG": "INFO"})}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_json_is_one_document_with_findings_and_checks(bundle, capsys):
    assert main(["doctor", "--bundle", str(bundle), "--json", "--select", "kernel"]) == 0
    run = json.loads(capsys.readouterr().out)
    ids = {f["id"] for f in run["findings"]}
    assert {"swappiness", "thp-mode"} <= ids
    f = next(f for f in run["findings"] if f["id"] == "swappiness")
    assert set(f) >= {"id", "layer", "severity", "title", "evidence", "fix"}
    assert {c["id"] for c in run["checks"]} >= ids


def test_missing_fact_is_reported_not_checked(tmp_path, capsys):
    (tmp_path / "env.json").write_text("{}")
    assert main(["doctor", "--bundle", str(tmp_path), "--json", "--select", "swappiness"]) == 0
    (check,) = json.loads(capsys.readouterr().out)["checks"]
    assert check == {"id": "swappiness", "status": "not-checked",
                     "reason": "kernel.swappiness: proc/sys/vm/swappiness not in bundle"}


def test_fail_on_sets_exit_1(bundle, capsys):
    assert main(["doctor", "--bundle", str(bundle), "--select", "swappiness", "--fail-on", "warning"]) == 1
    assert main(["doctor", "--bundle", str(bundle), "--select", "swappiness", "--fail-on", "never"]) == 0
    out = capsys.readouterr().out
    assert "swappiness" in out and "vm.swappiness = 60" in out


def test_text_report_has_summary_line(bundle, capsys):
    main(["doctor", "--bundle", str(bundle), "--select", "kernel", "--no-color"])
    out = capsys.readouterr().out
    assert "Kernel / OS" in out and "checks:" in out and "passed" in out


def test_unknown_select_is_usage_error(bundle, capsys):
    assert main(["doctor", "--bundle", str(bundle), "--select", "swapiness"]) == 2
    err = capsys.readouterr().err
    assert "perfstack: error: --select swapiness" in err and "did you mean swappiness" in err
    assert "Traceback" not in err


def test_bad_bundle_exit_2_without_traceback(tmp_path, capsys):
    assert main(["doctor", "--bundle", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "hint:" in err and "Traceback" not in err


def test_save_and_fix_script(bundle, tmp_path, capsys):
    out, script = tmp_path / "run.json", tmp_path / "fix.sh"
    main(["doctor", "--bundle", str(bundle), "-o", str(out), "--fix-script", str(script), "--select", "kernel"])
    assert json.loads(out.read_text())["schema_version"] == SCHEMA_VERSION
    text = script.read_text()
    assert text.startswith("#!/bin/sh") and "sysctl -w vm.swappiness=10" in text
    assert "# swappiness (warning): vm.swappiness = 60" in text


def test_explain_lists_and_documents(capsys):
    assert main(["explain", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"id", "layer", "severity", "title"} <= set(rows[0])
    assert main(["explain", "swappiness"]) == 0
    assert "why" in capsys.readouterr().out
    assert main(["explain", "swapiness"]) == 2


def test_explain_shows_the_severity_ladder(capsys):
    # memlock-limit: a warning for a finite soft limit, critical at 64 KiB or less
    assert main(["explain", "memlock-limit"]) == 0
    assert "memlock-limit  ·  Kernel / OS  ·  severity critical/warning\n" in capsys.readouterr().out
    assert main(["explain", "memlock-limit", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["severity"] == "critical" and doc["severities"] == ["critical", "warning"]
    assert main(["explain", "swappiness"]) == 0
    assert "severity warning\n" in capsys.readouterr().out  # a check with one severity says just that
    assert main(["explain", "--json"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["swap-enabled"]["severities"] == ["critical", "warning", "info"]


def test_no_command_prints_help(capsys):
    assert main([]) == 2
    out = capsys.readouterr().out
    assert out.startswith("usage: perfstack")
    listed = {line.split()[0] for line in out.splitlines() if line.startswith("    ") and line.split()}
    assert {"doctor", "capture", "bench", "profile", "try", "estimate", "loadtest", "fleet", "report", "diff",
            "explain"} <= listed  # every command, each on a line of its own with its help
    assert "exit codes: 0 done" in out
