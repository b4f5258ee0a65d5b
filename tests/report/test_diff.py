"""diff_runs: drifted facts, finding changes, benchmark verdicts against noise, hardware marking."""

from __future__ import annotations

import json
import random

import pytest
from synthetic import bench_measurements, doctor, full_run, profile_findings

from perfstack.bench.timing import summarize
from perfstack.compare import Diff, diff_runs
from perfstack.compare.facts import drift, hardware_diff
from perfstack.model import CheckResult, Fact, Facts, Finding, Measurement, Run, Severity
from perfstack.records.meta import RunMeta


def facts(**values) -> Facts:
    return Facts({k.replace("__", "."): Fact(k.replace("__", "."), v, "test") for k, v in values.items()})


def fig(name: str, value: float, n: int = 30, cv: float = 0.01, seed: int = 0, unit: str = "GB/s",
        bench: str = "hbm", **params) -> Measurement:
    """A rate figure (work per repetition = 1 unit) with raw samples of the given spread."""
    rng = random.Random(seed)
    if unit in ("us", "ms", "s"):
        samples = [value * 1e-6 * (1 + rng.gauss(0, cv)) for _ in range(n)]
        stats = summarize(samples)
        return Measurement(bench=bench, name=name, value=stats["median"] * 1e6, unit=unit, samples=samples,
                           stats=stats, params=params)
    samples = [1 / value * (1 + rng.gauss(0, cv)) for _ in range(n)]
    stats = summarize(samples)
    return Measurement(bench=bench, name=name, value=1 / stats["median"], unit=unit, samples=samples, stats=stats,
                       params=params)


def run_with(measurements=(), findings=(), checks=(), gpu="NVIDIA H100 80GB HBM3", **fact_values) -> Run:
    f = facts(gpu__list=[{"index": 0, "name": gpu}], gpu__count=1, cpu__model="Xeon", **fact_values)
    return Run(meta=RunMeta(command="bench"), facts=f, measurements=list(measurements), findings=list(findings),
               checks=list(checks))


# -- facts ------------------------------------------------------------------------------------
def test_drift_names_the_leaf_that_changed_and_skips_volatile_readings():
    before = facts(driver__version="550.54", env={"NCCL_DEBUG": "INFO", "CUDA_HOME": "/usr/local/cuda"},
                   python__packages={"numpy": "2.1.0", "torch": "2.5.0"}, kernel__swappiness=60,
                   mem__available_bytes=100, psi__cpu={"some": {"avg10": 0.1}},
                   gpu__list=[{"index": 0, "name": "H100", "temperature_c": 40, "persistence_mode": False}])
    after = facts(driver__version="580.159.04", env={"CUDA_HOME": "/usr/local/cuda", "NCCL_IB_HCA": "mlx5"},
                  python__packages={"numpy": "2.1.0", "torch": "2.6.0"}, kernel__swappiness=10,
                  mem__available_bytes=50, psi__cpu={"some": {"avg10": 3.0}},
                  gpu__list=[{"index": 0, "name": "H100", "temperature_c": 70, "persistence_mode": True},
                             {"index": 1, "name": "H100", "temperature_c": 35, "persistence_mode": True}])
    rows, volatile = drift(before, after)
    got = {r.key: (r.category, r.before, r.after) for r in rows}
    assert got == {
        "driver.version": ("driver", "550.54", "580.159.04"),
        "env.NCCL_DEBUG": ("environment", "INFO", None),
        "env.NCCL_IB_HCA": ("environment", None, "mlx5"),
        "python.packages.torch": ("libraries", "2.5.0", "2.6.0"),
        "kernel.swappiness": ("kernel parameters", 60, 10),
        "gpu.list[0].persistence_mode": ("driver & GPU", False, True),
        "gpu.list[1]": ("driver & GPU", None, "present"),  # a new GPU is one row, not one per field
    }
    assert volatile == 3  # free memory, PSI, GPU 0 temperature


def test_unavailable_fact_drifts_with_its_reason():
    before = facts(cpu__governors=["performance"])
    after = Facts({"cpu.governors": Fact.missing("cpu.governors", "cpufreq not exposed")})
    rows, _ = drift(before, after)
    assert rows[0].after == "(not available: cpufreq not exposed)"


def test_hardware_diff_on_the_recorded_machines():
    h = hardware_diff(doctor("h100").facts, doctor("h200x2").facts)
    assert not h.same
    assert {"gpu.count", "gpu.models"} <= set(h.differs)
    assert "gpu" in h.components
    assert hardware_diff(doctor("h100").facts, doctor("h100").facts).same


# -- findings ---------------------------------------------------------------------------------
def finding(id_: str, severity=Severity.WARNING, subject="", recoverable_ms=None) -> Finding:
    return Finding(id=id_, layer="kernel", severity=severity, title=id_, evidence=f"{id_} seen", fix="fix it",
                   subject=subject, recoverable_ms=recoverable_ms)


def test_findings_fixed_introduced_unchanged_and_not_checked():
    before = run_with(findings=[finding("swappiness"), finding("thp"), finding("numa", subject="gpu0"),
                                finding("pcie-x8")],
                      checks=[CheckResult(i, "found") for i in ("swappiness", "thp", "numa", "pcie-x8")]
                      + [CheckResult("new", "passed")])
    after = run_with(findings=[finding("thp", Severity.CRITICAL), finding("numa", subject="gpu1"), finding("new")],
                     checks=[CheckResult("swappiness", "passed"), CheckResult("thp", "found"),
                             CheckResult("numa", "found"), CheckResult("new", "found"),
                             CheckResult("pcie-x8", "not-checked", "lspci: command not found")])
    d = diff_runs(before, after)
    got = {(f.id, f.subject): f.status for f in d.findings}
    assert got == {("swappiness", ""): "fixed", ("thp", ""): "unchanged", ("numa", "gpu0"): "fixed",
                   ("numa", "gpu1"): "introduced", ("new", ""): "introduced", ("pcie-x8", ""): "not checked after"}
    thp = next(f for f in d.findings if f.id == "thp")
    assert (thp.before_severity, thp.severity) == ("warning", "critical")
    assert next(f for f in d.findings if f.id == "pcie-x8").reason == "lspci: command not found"
    assert d.findings[0].status == "introduced"  # the worst news first


def test_a_check_the_after_run_did_not_run_is_not_fixed():
    before = run_with(findings=[finding("swappiness")], checks=[CheckResult("swappiness", "found")])
    after = run_with(checks=[CheckResult("gemm-low", "passed")])  # a bench Run: only measured checks
    (f,) = diff_runs(before, after).findings
    assert f.status == "not checked after"


# -- measurements -----------------------------------------------------------------------------
def test_verdicts_judged_against_the_samples_spread():
    before = run_with([fig("hbm.copy", 3000, seed=1), fig("h2d.pinned.best", 55, seed=2),
                       fig("noisy", 100, cv=0.3, seed=3), fig("launch.eager", 20.0, seed=4, unit="us", bench="launch"),
                       fig("launch.graph", 2.0, seed=5, unit="us", bench="launch")])
    after = run_with([fig("hbm.copy", 3000 * 1.05, seed=11), fig("h2d.pinned.best", 55 * 0.9, seed=12),
                      fig("noisy", 102, cv=0.3, seed=13), fig("launch.eager", 15.0, seed=14, unit="us", bench="launch"),
                      fig("launch.graph", 2.4, seed=15, unit="us", bench="launch")])
    d = {m.name: m for m in diff_runs(before, after).measurements}
    assert d["hbm.copy"].verdict == "improved" and d["hbm.copy"].delta_pct == pytest.approx(5, abs=1)
    assert d["h2d.pinned.best"].verdict == "regressed" and d["h2d.pinned.best"].change_pct == pytest.approx(-10, abs=1.5)
    assert d["noisy"].verdict == "within noise" and not d["noisy"].significant
    # latencies: lower is better
    assert d["launch.eager"].verdict == "improved" and d["launch.eager"].delta_pct < 0 < d["launch.eager"].change_pct
    assert d["launch.graph"].verdict == "regressed"
    for m in d.values():
        assert m.ci_low_pct is not None and m.ci_low_pct <= m.ci_high_pct
        assert m.n_before == m.n_after == 30


def capped_gemm(tflops_per_sample: list[float]) -> Measurement:
    """A TF32 GEMM run at the power cap: per-sample times for 1e12 FLOPs and the cap's note."""
    samples = [1 / t for t in tflops_per_sample]
    stats = summarize(samples)
    return Measurement(bench="gemm", name="gemm.tf32.ref", value=1 / stats["median"], unit="TFLOP/s",
                       samples=samples, stats=stats,
                       notes=["clocks limited at the end of the run by power cap (SM 1590 MHz)"])


def test_power_capped_runs_whose_fastest_samples_agree_are_not_a_regression():
    # the shape measured on an H100: ~410 TFLOP/s until the cap bit, then ~355 (a warm GPU bit sooner)
    before = run_with([capped_gemm([407, 410, 411, 410, 409, 410, 411, 408] * 2 + [362] * 4)])
    warm = run_with([capped_gemm([405, 408] + [355, 356, 354, 355] * 4 + [356, 355])])
    d = diff_runs(before, warm).measurements[0]
    assert d.delta_pct < -10 and d.verdict == "within noise" and "power cap" in d.note
    # the same medians with the fastest samples apart too: a real regression stays one
    slower = run_with([capped_gemm([380, 381] + [355, 356, 354, 355] * 4 + [356, 355])])
    assert diff_runs(before, slower).measurements[0].verdict == "regressed"


def test_figures_that_cannot_be_compared_say_why():
    a = fig("x", 10.0)
    b = fig("x", 11.0)
    b.method_version = 2
    skipped = Measurement(bench="p2p", name="p2p", value=None, unit="", status="skipped", reason="needs 2 GPUs")
    few = fig("few", 10.0, n=2)
    d = {m.name: m for m in diff_runs(run_with([a, skipped, few, fig("gone", 1.0)]),
                                      run_with([b, fig("p2p", 1.0), fig("few", 20.0, n=2), fig("new", 1.0)])).measurements}
    assert d["x"].verdict == "not compared" and "method changed" in d["x"].note
    assert d["p2p"].verdict == "not compared" and "needs 2 GPUs" in d["p2p"].note
    assert d["few"].verdict == "within noise" and "too few raw samples" in d["few"].note
    assert d["gone"].note == "only in the before-Run" and d["new"].note == "only in the after-Run"


def test_different_hardware_marks_bound_figures_and_the_gate_skips_them():
    before = run_with([fig("hbm.copy", 3000, seed=1), fig("host.copy", 20, seed=2, bench="host")])
    after = run_with([fig("hbm.copy", 2000, seed=3), fig("host.copy", 20, seed=4, bench="host")], gpu="NVIDIA A100-SXM4-80GB")
    d = diff_runs(before, after)
    m = {x.name: x for x in d.measurements}
    assert not d.hardware.same and d.hardware.components == ["gpu"]
    assert m["hbm.copy"].hardware_bound and m["hbm.copy"].verdict == "regressed"
    assert not m["host.copy"].hardware_bound  # same CPU: the host figure still compares the change
    assert d.regressions() == []
    assert [x.name for x in d.regressions(include_hardware_bound=True)] == ["hbm.copy"]


def test_regression_threshold():
    d = diff_runs(run_with([fig("hbm.copy", 3000, seed=1)]), run_with([fig("hbm.copy", 2850, seed=2)]))
    assert [m.name for m in d.regressions(0)] == ["hbm.copy"]  # 5% worse
    assert [m.name for m in d.regressions(3)] == ["hbm.copy"]
    assert d.regressions(10) == []


# -- profile and the record -------------------------------------------------------------------
def test_profile_deltas_and_recovered_time_against_the_prediction():
    """Before: the recorded H100 trace with a stalled DataLoader; after: the same workload with
    workers and pinned memory. The diff sets the measured recovery beside the prediction."""
    from synthetic import TRACES

    from perfstack.profile.summary import profile_run
    before = full_run("h100")
    after = full_run("h100")
    fixed = profile_run([TRACES / "h100" / "dataloader-stall-fixed.pt.trace.json.gz"])
    after.profile, after.findings = fixed.profile, [f for f in after.findings if f.recoverable_ms is None]
    after.findings += fixed.findings
    d = diff_runs(before, after)
    p = d.profile
    assert p is not None
    rows = {r.category: r for r in p.categories}
    assert rows["idle"].delta_ms < -40  # ~50 ms of idle per step gone
    assert p.measured_recovered_ms == pytest.approx(before.profile.step_ms - fixed.profile.step_ms, abs=0.01)
    stall = next(f for f in before.findings if f.id == "dataloader-stall")
    assert "dataloader-stall" in p.predicted_by
    assert p.predicted_recovered_ms >= stall.recoverable_ms
    # the predicted share (of the step without the profiler) is within 15 points of the share the fix
    # recovered in the profiled steps
    measured_pct = 100 * p.measured_recovered_ms / before.profile.step_ms
    assert abs(stall.recoverable_pct - measured_pct) < 15
    assert next(f for f in d.findings if f.id == "dataloader-stall").status == "fixed"


def test_diff_saves_and_loads_back(tmp_path):
    before = run_with(bench_measurements(seed=1), [*profile_findings()])
    after = run_with(bench_measurements(seed=2, scale=0.95))
    d = diff_runs(before, after, "a.json", "b.json")
    path = tmp_path / "diff.json"
    d.save(path)
    data = json.loads(path.read_text())
    assert data["kind"] == "perfstack-diff" and data["summary"]["measurements"]["regressed"] > 0
    back = Diff.from_dict(data)
    assert back.to_dict() == d.to_dict()


def test_findings_of_checks_the_before_run_never_ran_are_not_introduced():
    """A bench Run runs only the measured checks; diffing it against a doctor Run must not call
    every doctor finding 'introduced'."""
    from pathlib import Path

    from perfstack.model import Run
    runs = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
    d = diff_runs(Run.load(runs / "h100-bench-full.json"), Run.load(runs / "h100-doctor-bench.json"))
    by = {c.id: c for c in d.findings}
    assert by["swappiness"].status == "not checked before"
    assert "did not run this check" in by["swappiness"].reason
    assert not [c for c in d.findings if c.status == "introduced"]
