"""What overlapping exposed communication would recover (profile/comm.py): synthetic timelines with
known answers, and the recorded 2xH200 DDP traces."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from perfstack.profile import comm
from perfstack.records import profile as records
from perfstack.profile.registry import Context
from perfstack.profile.rules_distributed import comm_not_overlapped
from perfstack.profile.summary import profile_run

MIB = 2**20
H200 = Path(__file__).parents[1] / "fixtures" / "traces" / "h200x2"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GEMM = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"


def ms(x: float):
    return pytest.approx(x, abs=2e-4)  # the model rounds its figures to 0.1 µs


class Timeline:
    """A fake analysed trace: GPU events with their step, phase and category; every NCCL event's
    collective moves ``nbytes`` (its launching op's largest tensor)."""

    def __init__(self, steps: int):
        self.gpu, self.category, self.step, self.phase, self.op, self.nbytes = [], [], [], [], [], []
        self.windows = [(k, k * 1e5, (k + 1) * 1e5) for k in range(steps)]

    def add(self, name: str, ts: float, dur: float, step: int, phase: str, nbytes: float = 0.0) -> float:
        self.gpu.append(NS(name=name, ts=ts, dur=dur, kind="kernel"))
        self.category.append("comm" if name.startswith("nccl") else "gemm")
        self.step.append(step)
        self.phase.append(phase)
        self.op.append(len(self.op))
        self.nbytes.append(nbytes)
        return ts + dur

    def analysis(self):
        att = NS(category=self.category, step=self.step, phase=self.phase, op=self.op)
        return NS(gpu=self.gpu, att=att, windows=self.windows,
                  cost=lambda o: NS(big=self.nbytes[o], bytes=self.nbytes[o]) if o >= 0 else None)


def after_backward(backward_us: float, steps: int = 3, layers: int = 8, ar_us: float = 360.0,
                   first_wait_us: float = 0.0) -> Timeline:
    """Per step: a backward pass of ``layers`` GEMMs, then each layer's 128 MiB gradient all-reduced,
    one at a time, with nothing else running (the first all-reduce of step 0 also waits for the
    other rank ``first_wait_us``); then nothing."""
    t = Timeline(steps)
    for k in range(steps):
        ts = k * 1e5
        for _ in range(layers):
            ts = t.add(GEMM, ts, backward_us / layers, k, "backward")
        for j in range(layers):
            wait = first_wait_us if (k, j) == (0, 0) else 0.0
            ts = t.add(ALLREDUCE, ts, ar_us + wait, k, "forward", 128 * MIB)
    return t


def test_ddp_buckets():
    # a tensor above the cap is a bucket of its own; small ones fill a bucket until it holds 25 MiB
    assert comm.buckets([128 * MIB] * 8) == [128 * MIB] * 8
    assert comm.buckets([MIB] * 50) == [25 * MIB, 25 * MIB]
    assert comm.buckets([MIB] * 30) == [25 * MIB, 5 * MIB]
    # one collective per step: a flattened buffer of many gradients, split as DDP would bucket them
    assert comm.buckets([1024 * MIB]) == [25 * MIB] * 40 + [24 * MIB]
    assert comm.buckets([]) == []


def test_backward_longer_than_the_all_reduce_hides_all_but_the_last_bucket():
    m = comm.overlap_model(after_backward(6000.0).analysis(), {})
    assert m["exposed_ms"] == ms(2.88)
    assert m["wait_ms"] == ms(0.0)
    assert m["buckets"] == 8
    assert m["tail_ms"] == ms(0.36)  # the first layer's gradients, ready when backward ends
    assert m["hideable_ms"] == ms(2.52)
    assert m["contention"] == comm.CONTENTION  # nothing runs under NCCL here: the calibrated figure
    assert m["recoverable_ms"] == ms(2.52 * (1 - comm.CONTENTION))


def test_all_reduce_longer_than_backward_hides_only_under_the_backward_left_after_the_first_bucket():
    m = comm.overlap_model(after_backward(1500.0).analysis(), {})
    # 1.5 ms of backward, of which the first 1/8 runs before any gradient bucket is ready
    assert m["hideable_ms"] == ms(1.5 * 7 / 8)
    assert m["recoverable_ms"] == ms(1.5 * 7 / 8 * (1 - comm.CONTENTION))


def test_waiting_for_the_other_rank_is_not_transfer():
    # 3 ms of waiting in step 0's first all-reduce: a third of a ms per step on average, none of it
    # recoverable by overlap (the ranks still meet at the end of backward)
    m = comm.overlap_model(after_backward(6000.0, first_wait_us=3000.0).analysis(), {})
    assert m["exposed_ms"] == ms(2.88 + 1.0)
    assert m["wait_ms"] == ms(1.0)
    assert m["transfer_ms"] == ms(2.88)
    assert m["recoverable_ms"] == ms(2.52 * (1 - comm.CONTENTION))


def overlapped(steps: int = 3, layers: int = 8, gemm_us: float = 300.0, slowdown: float = 0.3) -> Timeline:
    """DDP as it should run: each layer's gradient bucket all-reduced (360 µs) on its own stream while
    the next layer's backward GEMM runs, which takes ``slowdown`` µs longer per µs of all-reduce beside
    it; the last bucket after backward."""
    t = Timeline(steps)
    for k in range(steps):
        ts = k * 1e5
        for j in range(layers):
            beside = 360.0 if j > 0 else 0.0  # the previous layer's bucket, reduced during this GEMM
            if beside:
                t.add(ALLREDUCE, ts, beside, k, "backward", 128 * MIB)
            ts = max(ts + beside, t.add(GEMM, ts, gemm_us + slowdown * beside, k, "backward"))
        t.add(ALLREDUCE, ts, 360.0, k, "backward", 128 * MIB)
    return t


def test_contention_is_measured_where_compute_runs_under_nccl():
    c = comm.contention(overlapped(slowdown=0.3).analysis())
    assert c["value"] == ms(0.3)
    assert c["kernels"] == 3 * 7
    assert comm.contention(overlapped(slowdown=0.0).analysis())["value"] == ms(0.0)
    assert comm.contention(after_backward(6000.0).analysis()) is None  # no compute under NCCL


def test_an_overlapped_schedule_has_nothing_left_to_recover():
    m = comm.overlap_model(overlapped().analysis(), {})
    assert m["exposed_ms"] == ms(0.36)  # the last bucket, after backward
    assert m["hideable_ms"] == ms(0.0)
    assert m["recoverable_ms"] == ms(0.0)
    assert m["contention_source"].startswith("measured")


def _summary(step_ms: float, m: dict) -> records.Section:
    return records.load({"step_ms": step_ms, "overhead": {"step_ms": step_ms},
                         "comm": {"ms_per_step": m["exposed_ms"], "exposed_ms_per_step": m["exposed_ms"],
                                  "overlap_pct": 0.0, "if_overlapped": m}})


def test_the_finding_is_what_overlap_recovers_not_the_exposed_time():
    m = comm.overlap_model(after_backward(6000.0).analysis(), {})
    hit = comm_not_overlapped(_summary(15.0, m), Context())
    assert hit is not None and hit.recoverable_ms == ms(m["recoverable_ms"])
    assert hit.recoverable_ms < 0.6 * m["exposed_ms"]
    # exposed time that overlap cannot recover (the last bucket alone) raises nothing
    m2 = comm.overlap_model(overlapped().analysis(), {})
    assert comm_not_overlapped(_summary(15.0, m2), Context()) is None


def test_recorded_ddp_traces():
    """2xH200, per-tensor all_reduce after backward (no averaging) vs DDP (gradient_as_bucket_view off):
    rank 0 reached each step's first all-reduce first and waited there for rank 1; DDP's bf16 GEMMs
    ran 0.3-0.4 ms slower per ms of all-reduce beside them; the DDP trace has nothing left to overlap."""
    r0, r1 = (profile_run([H200 / f"ddp-not-overlapped.rank{r}.pt.trace.json.gz"]).profile.comm.extra["if_overlapped"]
              for r in (0, 1))
    assert r0["wait_ms"] > 0.3 and r1["wait_ms"] < 0.05
    assert r0["transfer_ms"] == pytest.approx(r1["transfer_ms"], rel=0.02)  # the same bytes over the same link
    assert r0["recoverable_ms"] < 0.5 * r0["exposed_ms"]
    for r in (0, 1):
        run = profile_run([H200 / f"ddp-not-overlapped-fixed.rank{r}.pt.trace.json.gz"], unprofiled_step_ms=5.70)
        m = run.profile.comm.extra["if_overlapped"]
        assert 0.25 <= m["contention"] <= 0.45 and m["contention_source"].startswith("measured")
        assert "comm-not-overlapped" not in [f.id for f in run.findings]
