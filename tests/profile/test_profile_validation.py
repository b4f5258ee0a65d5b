"""The profile against fixes measured without the profiler (tests/fixtures/traces/validation,
recorded by record_validation.py on an H100, and on two H100s for the DDP workloads, whose tests
skip until that library is recorded): for each slow workload, the finding whose fix was
applied ranks first and predicts the share of the step the fix recovered within 15 points (or
0.6-1.5×); tuned controls raise no warning. ``pytest tests/profile/test_profile_validation.py -s`` prints
the table that docs/profile.md carries."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from perfstack.model import Severity
from perfstack.profile.summary import profile_run

LIB = Path(__file__).parents[1] / "fixtures" / "traces" / "validation"
V = LIB / "h100"
# the host with two H100s: the DDP workloads (NCCL) and two single-GPU sync workloads
# (record_validation.py --only ddp ddp-comm-bound ddp-control; --only sync-graphed sync-host)
V2 = LIB / "h100x2"
# workload -> the finding whose fix the recording applied
FIXES = {
    "gpt2": "unfused-elementwise",
    "llama": "unfused-elementwise",
    "resnet50": "fp32-conv",
    "decode": "launch-bound",
    "dataloader": "dataloader-stall",
    "sync": "host-sync",
    "sync-graphed": "launch-bound",  # the sync workload's step, forward and backward as CUDA graphs
    "sync-host": "host-sync",  # batches prepared on the CPU in the loop, loss.item() per micro-batch
    "fp32-runahead": "fp32-matmul",
    "attention": "attention-unfused",
    "gpt2-vocab": "gemm-misaligned",  # the compiled GPT-2: vocabulary 50257 padded to 50304
    # two ranks (rank 0's trace); gradients all-reduced after backward -> DistributedDataParallel
    "ddp": "comm-not-overlapped",
    "ddp-comm-bound": "comm-not-overlapped",
}
TWO_GPU = {"ddp", "ddp-comm-bound", "ddp-control", "sync-graphed", "sync-host"}
# Where the measured fix does not rank first, and why. The sync workload is CPU-bound (its CPU
# needs ~17 ms per step for ~14 ms of GPU work): the replay gives one sync per step 5.7% (measured:
# 11.0%, and 6.5% in a later run: round-to-round noise of several points) and ranks CUDA-graph
# dispatch (14%) above it; that fix, measured as sync-graphed, recovered 4.5%. On that step the two
# fixes are worth about the same and the order between them is within the noise. The sync-bound
# step whose syncs dominate is sync-host (74.3 -> 52.5 ms), where host-sync ranks first.
NOT_FIRST = {"sync"}
# tuned controls: (workload, variant); the compiled GPT-2 with the padded vocabulary is the tuned one
CONTROLS = [("mlp-bf16-control", "control"), ("mlp-bf16-control-synced", "control"), ("gpt2-vocab", "fixed"),
            ("ddp-control", "control")]


def library(name: str) -> Path:
    return V2 if name in TWO_GPU else V


def measured(name: str | None = None) -> dict:
    """The recorded workloads of ``name``'s library; a two-GPU workload not recorded yet is skipped."""
    d = library(name or "")
    if not (d / "steps.json").exists():
        pytest.skip(f"{d.name} is not recorded (record_validation.py --only {name})")
    w = json.loads((d / "steps.json").read_text())["workloads"]
    if name is not None and (name not in w or "error" in w[name]):
        pytest.skip(f"{name} is not in {d.name}/steps.json")
    return w


def trace(name: str, variant: str) -> Path:
    return library(name) / f"{name}-{variant}.pt.trace.json.gz"


def within(pred: float, meas: float) -> bool:
    return abs(pred - meas) <= 15 or (meas > 0 and 0.6 <= pred / meas <= 1.5)


# the table reads the rows the tests above computed (called alike: lru_cache keys a keyword apart from a position)
@functools.lru_cache(maxsize=None)
def row(name: str, with_step_ms: bool) -> dict:
    m = measured(name)[name]
    slow, fixed = m["slow"]["min_ms"], m["fixed"]["min_ms"]
    run = profile_run([trace(name, "slow")], unprofiled_step_ms=slow if with_step_ms else None)
    fid = FIXES[name]
    f = next((f for f in run.findings if f.id == fid), None)
    return {"workload": name, "slow_ms": slow, "fixed_ms": fixed, "measured_pct": 100 * (slow - fixed) / slow,
            "finding": fid, "rank": [x.id for x in run.findings].index(fid) + 1 if f else None,
            "predicted_pct": f.recoverable_pct if f else 0.0, "top": run.findings[0].id if run.findings else None,
            "profiled_ms": run.profile.step_ms, "estimated_ms": run.profile.overhead.step_ms}


@pytest.mark.parametrize("name", sorted(FIXES))
def test_the_measured_fix_ranks_first_and_its_share_is_predicted(name):
    r = row(name, with_step_ms=True)
    assert r["rank"] == 1 or (name in NOT_FIRST and r["rank"] is not None), r
    assert within(r["predicted_pct"], r["measured_pct"]), r


@pytest.mark.parametrize("name", sorted(FIXES))
def test_without_the_unprofiled_step_time_the_estimate_still_ranks_the_fix_first(name):
    r = row(name, with_step_ms=False)
    assert r["rank"] == 1 or (name in NOT_FIRST and r["rank"] is not None), r


@pytest.mark.parametrize("name,variant", CONTROLS)
def test_controls_raise_no_warning(name, variant):
    step = measured(name)[name][variant]["min_ms"]
    run = profile_run([trace(name, variant)], unprofiled_step_ms=step)
    bad = [(f.id, f.recoverable_pct) for f in run.findings if f.severity.rank >= Severity.WARNING.rank]
    assert bad == []


def test_compile_on_a_cpu_bound_step_is_not_recommended():
    """torch.compile made the CPU-bound sync workload 9% slower (17.1 -> 18.6 ms): compiled code has
    a per-call cost the eager trace cannot show, so on a CPU-bound step fusion counts only GPU time
    and must not come out as a warning."""
    m = measured("sync-compiled")["sync-compiled"]
    assert m["measured_recovered_pct"] < 0
    run = profile_run([trace("sync-compiled", "slow")], unprofiled_step_ms=m["slow"]["min_ms"])
    f = next((f for f in run.findings if f.id == "unfused-elementwise"), None)
    assert f is None or f.severity is Severity.INFO
    assert run.profile.timeline.bound != "gpu"


def test_a_loop_that_never_syncs_and_one_that_syncs_every_step_give_the_same_gpu_figures():
    free = profile_run([trace("mlp-bf16-control", "control")]).profile.to_dict()
    synced = profile_run([trace("mlp-bf16-control-synced", "control")]).profile.to_dict()
    assert free["timeline"]["cpu_ahead_ms"] > 1.0  # the CPU runs ahead: its step windows are short
    assert free["timeline"]["cpu_step_ms"] < 0.5 * free["step_ms"]
    # the same work per step; the free-running GPU runs its GEMMs back to back at full power and a few
    # percent slower than the synced one, which cools between steps (13.6 vs 12.8 ms busy)
    assert free["launch"]["kernels_per_step"] == synced["launch"]["kernels_per_step"]
    assert free["gemm_flops_per_step"] == pytest.approx(synced["gemm_flops_per_step"], rel=1e-6)
    assert free["busy_ms"] == pytest.approx(synced["busy_ms"], rel=0.10)
    assert free["step_ms"] == pytest.approx(synced["step_ms"], rel=0.10)
    assert free["breakdown_ms"]["gemm"] == pytest.approx(synced["breakdown_ms"]["gemm"], rel=0.10)


def test_gpu_work_queued_ahead_of_the_cpu_is_counted():
    p = profile_run([trace("fp32-runahead", "slow")]).profile.to_dict()
    assert p["launch"]["kernels_per_step"] >= 3 and p["busy_pct"] > 90
    assert p["gemms"][0]["flops_per_step"] == pytest.approx(3 * 2 * 8192**3, rel=0.01)


def test_print_table(capsys):
    rows = [row(n, with_step_ms=True) for n in sorted(FIXES) if n not in TWO_GPU or (V2 / "steps.json").exists()]
    print(f"\n{'workload':14} {'slow':>8} {'fixed':>8} {'measured':>9} {'finding':22} {'rank':>4} {'predicted':>9}"
          f" {'profiled':>9} {'no --step-ms':>12}")
    for r in rows:
        est = row(r["workload"], with_step_ms=False)
        print(f"{r['workload']:14} {r['slow_ms']:8.2f} {r['fixed_ms']:8.2f} {r['measured_pct']:8.1f}% {r['finding']:22} "
              f"{r['rank'] or '-':>4} {r['predicted_pct']:8.1f}% {r['profiled_ms']:9.2f} {est['predicted_pct']:11.1f}%")
    assert len(rows) == len(FIXES) - (0 if (V2 / "steps.json").exists() else len(TWO_GPU & set(FIXES)))


def test_diff_of_the_fix_compares_steps_measured_without_the_profiler():
    from perfstack.compare.diff import diff_runs
    m = measured("resnet50")["resnet50"]
    before = profile_run([trace("resnet50", "slow")], unprofiled_step_ms=m["slow"]["min_ms"])
    after = profile_run([trace("resnet50", "fixed")], unprofiled_step_ms=m["fixed"]["min_ms"])
    p = diff_runs(before, after).profile
    assert p.step_basis == "without the profiler"
    assert p.measured_recovered_ms == pytest.approx(m["slow"]["min_ms"] - m["fixed"]["min_ms"])
    assert "fp32-conv" in p.predicted_by
    assert within(100 * p.predicted_recovered_ms / m["slow"]["min_ms"],
                  100 * p.measured_recovered_ms / m["slow"]["min_ms"])
