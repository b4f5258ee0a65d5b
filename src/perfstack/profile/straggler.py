"""Which rank the others wait for, and whether the traces can tell.

Every rank's profiled step carries the profiler's own CPU cost, and that cost differs between ranks
(the same events take longer on a busier core, a rank's Python thread is descheduled): on a balanced
data-parallel job one rank's profiled step can be longer although every rank does the same GPU work
and, without the profiler, the ranks run in step (tests/fixtures/traces/h200x2/ddp-not-overlapped*:
equal kernel time on both ranks, 0.3-0.4 ms more CPU-caused idle on one, ranks in step unprofiled).
So a straggler is claimed only on what the profiler cannot have made:

- **GPU work**: the rank's kernel, copy and memset time per step (NCCL and idle left out) beyond the
  other ranks' median: more data, a longer sequence, a slower or throttled GPU;
- **a wait that persists**: the rank's idle caused by its CPU (data loading, syncs, dispatch, host
  code) beyond the others' median, less the profiler's whole CPU time in that rank's step (its CPU
  step time × (1 − the overhead correction's CPU scale)): even if the profiler's cost fell entirely
  on this rank's critical path, that much would be left.

recoverable = extra GPU work + the persisting wait, each counted from ``NOISE`` of the step up. The host-to-device bytes per step of each rank
(its input) are compared too, to name a difference in input. Where neither is there, the verdict is
'cannot tell' and the rule says so, pointing to a timing of the ranks without the profiler.
"""

from __future__ import annotations

import statistics

from perfstack.records.profile import Overhead, Section, Straggler, Timeline

CPU_REASONS = ("data loading", "allocator", "sync", "cpu dispatch", "cpu outside ops")
NOISE = 0.02  # of the step: a difference between ranks smaller than this is taken for run-to-run noise


def _work(s: Section) -> float:
    """GPU work per step: time in categories other than idle, communication and CPU-only steps."""
    return s.compute_ms


def _cpu_idle(s: Section) -> dict[str, float]:
    return {r: ms for r, ms in s.idle_by_reason_ms.items() if r in CPU_REASONS}


def _profiler_ms(s: Section) -> float:
    """The profiler's CPU time in one step of this rank: what its CPU step shrinks by without it."""
    t, o = s.timeline or Timeline(), s.overhead or Overhead()
    return max(0.0, t.cpu_step_ms * (1 - o.cpu_scale))


def _input(s: Section) -> float:
    return sum(float(m.bytes_per_step) for m in s.memcpy if m.direction == "HtoD")


def _median_others(values: dict[int, float], rank: int) -> float:
    return statistics.median([v for k, v in values.items() if k != rank])


def straggler(summaries: list[Section]) -> Straggler | None:
    """The straggler among the ranks' summaries (rank numbers set), or None with fewer than two."""
    if len(summaries) < 2:
        return None
    by_rank = {s.rank or 0: s for s in summaries}
    non_comm = {r: (s.step_ms or 0.0) - (s.comm.ms_per_step if s.comm else 0.0) for r, s in by_rank.items()}
    work = {r: _work(s) for r, s in by_rank.items()}
    waits = {r: sum(_cpu_idle(s).values()) for r, s in by_rank.items()}
    prof = {r: _profiler_ms(s) for r, s in by_rank.items()}

    noise = NOISE * statistics.median((s.step_ms or 0.0) for s in summaries)

    def claim(r: int) -> tuple[float, float, float]:
        """(extra GPU work, CPU-caused idle beyond the others', what of it persists); a part below the noise is 0."""
        extra_work = max(0.0, work[r] - _median_others(work, r))
        wait = max(0.0, waits[r] - _median_others(waits, r))
        persists = max(0.0, wait - prof[r])
        return (extra_work if extra_work >= noise else 0.0), wait, (persists if persists >= noise else 0.0)

    claims = {r: claim(r) for r in by_rank}
    best = max(by_rank, key=lambda r: (claims[r][0] + claims[r][2], non_comm[r]))
    extra_work, wait, persists = claims[best]
    if extra_work + persists <= 0:
        best = max(non_comm, key=lambda k: non_comm[k])  # the longest profiled step, for the record
        extra_work, wait, persists = claims[best]
    inputs = {r: _input(x) for r, x in by_rank.items()}
    med_in = _median_others(inputs, best)
    ratio = round(inputs[best] / med_in, 3) if med_in > 0 else None
    verdict = "gpu work" if extra_work > 0 and extra_work >= persists else "wait" if persists > 0 else "cannot tell"
    return Straggler(rank=best, non_comm_ms=round(non_comm[best], 4),
                     others_median_ms=round(_median_others(non_comm, best), 4),
                     excess_ms=round(max(0.0, non_comm[best] - _median_others(non_comm, best)), 4),
                     cause=_cause(by_rank, best, verdict, wait, prof[best]), gpu_work_ms=round(work[best], 4),
                     others_gpu_work_ms=round(_median_others(work, best), 4), wait_ms=round(wait, 4),
                     profiler_ms=round(prof[best], 4), input_ratio=ratio,
                     recoverable_ms=round(extra_work + persists, 4), verdict=verdict)


def _cause(by_rank: dict[int, Section], rank: int, verdict: str, wait: float, prof: float) -> str:
    """The component of the straggler's step that differs most from the others' median (GPU categories
    for GPU work, CPU-caused idle reasons for a wait)."""
    w = by_rank[rank]
    others = [s for r, s in by_rank.items() if r != rank]
    comps: dict[str, float] = {}
    for key in set().union(*(s.breakdown_ms for s in by_rank.values())) - {"comm", "idle", "cpu"}:
        comps[f"GPU {key}"] = w.breakdown_ms.get(key, 0.0) - statistics.median(s.breakdown_ms.get(key, 0.0)
                                                                                 for s in others)
    idle: dict[str, float] = {}
    for key in set().union(*(s.idle_by_reason_ms for s in by_rank.values())):
        idle[f"idle ({key})"] = w.idle_by_reason_ms.get(key, 0.0) - statistics.median(
            s.idle_by_reason_ms.get(key, 0.0) for s in others)
    pool = comps if verdict == "gpu work" else idle if verdict == "wait" else {**comps, **idle}
    cause, delta = max(pool.items(), key=lambda kv: kv[1]) if pool else ("unknown", 0.0)
    text = f"{cause} (+{delta:.2f} ms per step)"
    if verdict == "cannot tell":
        text += (f"; its CPU-caused idle is {wait:.2f} ms above the others', within the profiler's own "
                 f"{prof:.2f} ms of CPU time in its step: cannot tell")
    return text
