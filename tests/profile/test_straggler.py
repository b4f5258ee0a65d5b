"""straggler-rank on balanced data-parallel jobs (issue 23 item 3): the recorded two-rank traces ran in
step without the profiler, so no straggler may be claimed from them; a straggler rests on more GPU work
or on a wait that outlasts the profiler's own CPU time."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from perfstack.model import Severity
from perfstack.profile import rules
from perfstack.records.profile import Section, Straggler
from perfstack.profile.straggler import straggler
from perfstack.profile.summary import profile_run, summarize

T = Path(__file__).parents[1] / "fixtures" / "traces"
H200 = [sorted(T.glob(f"h200x2/{n}.rank*.pt.trace.json.gz")) for n in ("ddp-not-overlapped", "ddp-not-overlapped-fixed")]
H100 = [[T / f"validation/h100x2/{n}.pt.trace.json.gz", T / f"validation/h100x2/{n}.rank1.pt.trace.json.gz"]
        for n in ("ddp-slow", "ddp-fixed", "ddp-comm-bound-slow", "ddp-comm-bound-fixed")]


def check(p: Section):
    return rules.PROFILE_CHECKS["straggler-rank"].fn(p, rules.Context())


def summaries(paths: list[Path]) -> list[Section]:
    return [replace(summarize(p)[0], rank=r) for r, p in enumerate(paths)]


@pytest.mark.parametrize("paths", H200 + H100, ids=lambda ps: ps[0].name.split(".")[0])
def test_a_balanced_job_gets_no_straggler_claim(paths):
    """Both ranks ran in step without the profiler (steps-ddp.json: 5.71 and 5.70 ms medians on the H200s;
    every round's per-rank times within 0.03 ms on the H100s)."""
    run = profile_run(paths)
    f = next((f for f in run.findings if f.id == "straggler-rank"), None)
    s = run.profile.straggler
    assert s is not None and s.verdict == "cannot tell" and s.recoverable_ms == 0
    assert f is None or (f.severity is Severity.INFO and f.recoverable_ms == 0)


def test_the_h200_pair_says_it_cannot_tell_and_how_to_find_out():
    """The balanced 2×H200 job that was called a straggler: rank 1's profiled step is 0.39 ms longer outside
    communication, all of it CPU-caused idle, while both ranks do 3.60-3.61 ms of GPU work."""
    run = profile_run(H200[0])
    f = next(f for f in run.findings if f.id == "straggler-rank")
    s = run.profile.straggler
    assert f.severity is Severity.INFO and f.recoverable_ms == 0 and f.recoverable_pct == 0
    assert abs(s.gpu_work_ms - s.others_gpu_work_ms) < 0.02 * s.gpu_work_ms
    assert 0 < s.wait_ms < s.profiler_ms
    assert "cannot tell" in f.evidence and "perfstack try --nproc 2" in f.evidence
    assert "without the profiler" in f.fix
    assert run.findings[0].id != "straggler-rank"


def test_more_gpu_work_on_one_rank_is_a_straggler():
    """Section-level (no recorded trace of a real straggler): the H200 pair with 1.5 ms more GEMM work per
    step on rank 0, as a rank given longer sequences would have."""
    a, b = summaries(H200[0])
    a = replace(a, compute_ms=a.compute_ms + 1.5, breakdown_ms={**a.breakdown_ms, "gemm": a.breakdown_ms["gemm"] + 1.5})
    s = straggler([a, b])
    assert s.rank == 0 and s.verdict == "gpu work"
    assert s.recoverable_ms == pytest.approx(1.5 + a.compute_ms - 1.5 - b.compute_ms, abs=0.01)
    assert "GPU gemm" in s.cause
    hit = check(replace(a, straggler=s))
    assert hit is not None and hit.recoverable_ms == s.recoverable_ms and hit.severity is None
    assert "GPU work" in hit.evidence and hit.subject == "rank0"


def test_a_wait_beyond_the_profilers_time_is_a_straggler_and_within_it_is_not():
    """Section-level: rank 1 of the H200 pair waiting on its DataLoader 3 ms per step more (a wait the
    profiler's ~1.6 ms of CPU time in its step cannot explain), then only 1 ms more (it can)."""
    a, b = summaries(H200[0])
    for extra, verdict in ((3.0, "wait"), (1.0, "cannot tell")):
        slow = replace(b, idle_by_reason_ms={**b.idle_by_reason_ms, "data loading": extra},
                       step_ms=(b.step_ms or 0) + extra)
        s = straggler([a, slow])
        assert s.rank == 1 and s.verdict == verdict, (extra, s)
        if verdict == "wait":
            assert s.recoverable_ms == pytest.approx(s.wait_ms - s.profiler_ms, abs=0.01)
            assert "data loading" in s.cause
            hit = check(replace(a, straggler=s))
            assert hit is not None and "beyond the profiler's own CPU time" in hit.evidence
        else:
            assert s.recoverable_ms == 0


def test_a_straggler_from_an_older_run_is_not_claimed():
    """A Run saved before the verdict existed holds only the profiled excess: it is not claimed again."""
    old = Straggler.from_dict({"rank": 1, "excess_ms": 3.0, "cause": "GPU idle (+3.00 ms per step)",
                               "non_comm_ms": 9.0, "others_median_ms": 6.0}, "profile.straggler")
    hit = check(Section(step_ms=10.0, straggler=old))
    assert hit is not None and hit.severity == "info" and hit.recoverable_ms == 0
