"""perfstack fleet report over directories of Runs and bundles, hostile ones included, and its outputs."""

from __future__ import annotations

import json
import shutil

import pytest

from fixtures.fleet_runs import fleet, set_fact, slow, write
from fixtures.variants import VARIANTS, healthy
from perfstack.cli.main import main
from perfstack.fleet.gather import gather


@pytest.fixture
def runs_dir(tmp_path):
    plant = {3: lambda d: slow(d, 0.75, ("hbm",)), 6: lambda d: set_fact(d, "driver.version", "550.54.15")}
    write(fleet("h100-doctor-bench", 10, seed=21, plant=plant), tmp_path / "runs")
    return tmp_path / "runs"


def test_report_names_the_planted_nodes_and_exits_1_on_a_critical_one(runs_dir, capsys):
    rc = main(["fleet", "report", str(runs_dir), "--no-color"])
    out = capsys.readouterr().out
    assert rc == 1  # node003's HBM is 25% slow: critical
    assert "Fix these nodes first" in out and "node003" in out and "node006" in out
    assert "driver.version" in out and "550.54.15" in out
    for healthy_node in ("node000", "node001", "node009"):
        assert healthy_node not in out.split("Configuration drift")[0]


def test_json_html_and_saved_run(runs_dir, tmp_path, capsys):
    rc = main(["fleet", "report", str(runs_dir), "--json", "--fail-on", "never", "-o", str(tmp_path / "f.json"),
               "--html", str(tmp_path / "f.html")])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert doc["meta"]["command"] == "fleet" and doc["fleet"]["summary"]["nodes"] == 10
    assert [r["node"] for r in doc["fleet"]["ranking"]] == ["node003", "node006"]
    assert json.loads((tmp_path / "f.json").read_text())["fleet"] == doc["fleet"]
    html = (tmp_path / "f.html").read_text()
    assert 'class="heatmap"' in html and "Configuration drift" in html and "node003" in html
    assert "<script src" not in html and "http://" not in html.split("<footer")[0].replace("http://www.w3.org", "")
    # a saved fleet Run renders again without the node Runs
    assert main(["fleet", "report", str(tmp_path / "f.json"), "--no-color", "--fail-on", "never"]) == 0
    assert "node003" in capsys.readouterr().out


def test_hostile_files_are_nodes_that_did_not_report(runs_dir, capsys):
    (runs_dir / "truncated.json").write_text(
        (runs_dir / "node000.json").read_text()[:5000], encoding="utf-8")
    (runs_dir / "foreign.json").write_text('{"hello": "world"}', encoding="utf-8")
    (runs_dir / "list.json").write_text("[1, 2, 3]", encoding="utf-8")
    (runs_dir / "future.json").write_text('{"schema_version": 999}', encoding="utf-8")
    (runs_dir / "evil\x1b[31m.json").write_text("{", encoding="utf-8")
    rc = main(["fleet", "report", str(runs_dir), "--json", "--fail-on", "never"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    failed = {m["name"]: m["reason"] for m in doc["fleet"]["members"] if m["status"] == "failed"}
    assert set(failed) == {"truncated", "foreign", "list", "future", "evil\x1b[31m"}
    assert "not valid JSON" in failed["truncated"] and "schema_version" in failed["foreign"]
    assert "999" in failed["future"]
    # the planted nodes are still found among the rest
    assert {r["node"] for r in doc["fleet"]["ranking"]} >= {"node003", "node006"}
    main(["fleet", "report", str(runs_dir), "--fail-on", "never"])
    assert "\x1b[31m" not in capsys.readouterr().out  # a file name cannot colour the terminal


@pytest.mark.parametrize("setup, message", [
    (lambda p: None, "does not exist"),
    (lambda p: p.mkdir(), "holds no Run"),
])
def test_unusable_arguments_exit_2(tmp_path, capsys, setup, message):
    target = tmp_path / "x"
    setup(target)
    assert main(["fleet", "report", str(target)]) == 2
    assert message in capsys.readouterr().err


def test_a_directory_of_only_fleet_runs_is_an_input_error(runs_dir, tmp_path, capsys):
    main(["fleet", "report", str(runs_dir), "-q", "--fail-on", "never", "-o", str(tmp_path / "f.json")])
    only = tmp_path / "only"
    only.mkdir()
    shutil.copy(tmp_path / "f.json", only / "f.json")
    capsys.readouterr()
    assert main(["fleet", "report", str(only)]) == 2
    assert "fleet Runs" in capsys.readouterr().err


def test_bundles_are_audited_and_the_odd_ones_named(tmp_path):
    """Bundles gathered from each node (perfstack capture DIR/NODE), the recorded H100 made healthy three
    times and planted twice."""
    for name in ("n1", "n2", "n3"):
        healthy(tmp_path / name)
    for name in ("pcie-gen4-x8-busy", "swappiness-60"):
        healthy(tmp_path / name)
        VARIANTS[name][1](tmp_path / name)
    from perfstack.fleet import analyze
    a = analyze(gather([tmp_path]))
    assert {r.node for r in a.ranking} == {"pcie-gen4-x8-busy", "swappiness-60"}
    assert {u.id for u in a.uneven if u.minority} >= {"pcie-link-downgraded", "swappiness"}


def test_fleet_without_a_subcommand_prints_usage(capsys):
    assert main(["fleet"]) == 2


def test_fleet_doctor_without_ray_says_what_to_install(monkeypatch, capsys):
    import sys
    monkeypatch.setitem(sys.modules, "ray", None)
    assert main(["fleet", "doctor"]) == 3
    from perfstack.extras import install_hint
    assert install_hint("fleet") in capsys.readouterr().err  # the command that works from here


def test_reading_in_worker_processes_gives_the_same_nodes(tmp_path):
    from perfstack.fleet.gather import PARALLEL_FROM, entries
    write(fleet("h100-doctor", PARALLEL_FROM + 2, seed=31, plant={5: lambda d: set_fact(d, "kernel.swappiness", 60)}),
          tmp_path / "r")
    (tmp_path / "r" / "broken.json").write_text("{", encoding="utf-8")
    one = gather(entries([tmp_path / "r"]), workers=1)
    two = gather(entries([tmp_path / "r"]), workers=2)
    assert [(n.name, n.status, n.config, n.reason) for n in one] == [(n.name, n.status, n.config, n.reason) for n in two]
    assert len(one) == PARALLEL_FROM + 3


def test_a_nodes_doctor_and_bench_runs_merge_by_file_name(tmp_path):
    import json as _json
    doctor = fleet("h100-doctor", 1, seed=51)[0]
    bench = fleet("h100-bench-full", 1, seed=51)[0]
    for d in (doctor, bench):
        del d["meta"]["fleet"]  # as srun writes them: named by the file only
    (tmp_path / "gpu-a17.json").write_text(_json.dumps(doctor), encoding="utf-8")
    (tmp_path / "gpu-a17.bench.json").write_text(_json.dumps(bench), encoding="utf-8")
    [n] = gather([tmp_path])
    assert n.name == "gpu-a17" and n.findings and n.figures and n.command == "bench+doctor"


@pytest.mark.ray
def test_fleet_doctor_with_nothing_at_the_address_fails_fast(capsys):
    pytest.importorskip("ray")
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # a port nothing listens on
    assert main(["fleet", "doctor", "--address", f"127.0.0.1:{port}"]) == 3
    assert "no Ray cluster at 127.0.0.1" in capsys.readouterr().err


SECRET_URL = "https://alice:Zx9-pa55word-Q7@mirror.example.com/simple"


def test_a_node_run_or_bundle_with_secrets_never_carries_them_into_the_fleet(tmp_path, capsys):
    # before: fleet report over unredacted Runs or bundles carried their secrets into the fleet Run, HTML, terminal
    from fixtures.fleet_runs import set_env
    runs = fleet("h100-doctor", 4, seed=3, plant={1: lambda d: set_env(d, "NCCL_SOCKET_IFNAME", SECRET_URL),
                                                 2: lambda d: set_fact(d, "driver.version", SECRET_URL)})
    write(runs, tmp_path / "runs")
    b = healthy(tmp_path / "runs" / "bundled")
    env = json.loads((b / "env.json").read_text())
    env["NCCL_SOCKET_IFNAME"] = SECRET_URL
    (b / "env.json").write_text(json.dumps(env))
    rc = main(["fleet", "report", str(tmp_path / "runs"), "--fail-on", "never", "--no-color", "-v",
               "-o", str(tmp_path / "f.json"), "--html", str(tmp_path / "f.html")])
    out = capsys.readouterr()
    assert rc == 0
    for doc in (out.out, out.err, (tmp_path / "f.json").read_text(), (tmp_path / "f.html").read_text()):
        assert "pa55word" not in doc
    assert "mirror.example.com" in (tmp_path / "f.json").read_text()  # the rest of the value is kept


def test_a_node_task_redacts_its_runs_before_they_leave_the_node():
    from perfstack.fleet.jobs import Target
    from perfstack.fleet.ray_engine import _task
    from perfstack.model import Fact, Facts, Run

    def job(target):
        return [Run(facts=Facts({"env": Fact("env", {"PIP_INDEX_URL": SECRET_URL}, source="environment")}))]
    sent = _task(job, Target("n1"), "abc")
    assert "pa55word" not in json.dumps(sent) and "mirror.example.com" in json.dumps(sent)
