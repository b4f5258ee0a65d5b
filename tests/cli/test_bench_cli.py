import json

import pytest

from perfstack import bench
from perfstack.cli.main import main


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(bench, "cuda_devices", lambda: (0, "torch is a CPU-only build"))
    monkeypatch.setattr("perfstack.bench.host.COPY_BYTES_QUICK", 16 << 20)


def test_gpu_only_request_without_cuda_exits_3(no_cuda, capsys):
    assert main(["bench", "gemm", "hbm"]) == 3
    err = capsys.readouterr().err
    assert "needs a CUDA device" in err and "Traceback" not in err


def test_suite_without_cuda_skips_gpu_runs_host(no_cuda, capsys):
    assert main(["bench", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    by = {m["name"]: m for m in run["measurements"]}
    assert by["gemm"]["status"] == "skipped" and "no CUDA device" in by["gemm"]["reason"]
    assert by["host.copy"]["status"] == "ok" and by["host.copy"]["samples"]
    assert run["meta"]["command"] == "bench"


def test_doctor_with_bench_keeps_findings_and_measurements(no_cuda, capsys):
    assert main(["doctor", "--bench", "quick", "--json", "--fail-on", "never", "--select", "kernel"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["measurements"] and {c["id"] for c in run["checks"]} >= {"swappiness"}


def test_bench_flags_errors(capsys):
    assert main(["bench", "nosuch"]) == 2
    assert main(["doctor", "--bench", "quick", "--bundle", "/tmp"]) == 2
    assert "cannot be combined" in capsys.readouterr().err


def test_recorded_h100_run_feeds_the_measured_rules(fixtures):
    from perfstack.audit import results_fact
    from perfstack.model import Run
    from perfstack.rules import CHECKS, load, run_check

    load()
    run = Run.load(fixtures / "runs" / "h100-bench-full.json")
    facts = run.facts
    facts.add(results_fact(run.measurements))
    # A healthy H100: none of the measured checks fires on its own figures.
    for cid in ("h2d-bandwidth-low", "gemm-throughput-low", "hbm-bandwidth-low"):
        findings, result = run_check(CHECKS[cid], facts)
        assert result.status == "passed", (cid, result)
