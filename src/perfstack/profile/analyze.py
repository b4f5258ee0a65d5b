"""Turn a loaded trace into the profile summary (a ``records.Section``; it becomes ``Run.profile``).

Definitions:
- GPU work belongs to the step whose CPU code launched it (``attribute``), wherever it ran;
- a step's GPU period runs from its first GPU event to the next step's first (the last step: to
  its last event's end); its CPU time is its ``ProfilerStep`` window; the step takes the longer of
  the two (``bound`` says which): the CPU may run ahead of the GPU, never the reverse for long;
- busy = union of the step's kernels, copies and memsets over all streams; idle = step − busy;
- an idle gap is an interval of the step's GPU period with nothing running; its cause comes from
  the launch of the event that ends it (``cpu.gap_reason``);
- category time is exclusive: when streams overlap, an instant counts once, for the first active
  category in ``classify.PRIORITY``, so categories + idle = step;
- exposed communication = time NCCL kernels run with no other GPU work on the device.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from itertools import accumulate, compress, islice
from operator import attrgetter, le
from typing import Any, Iterable, NamedTuple, Sequence

from perfstack.profile import classify, cpu, efficiency
from perfstack.profile.analysis import Analysis
from perfstack.profile.timeline import first_after, gaps, sweep, union, union_in_order
from perfstack.records.profile.means import Bound
from perfstack.records.profile import (Allocator, Comm, CpuCounts, GpuStep, IdleGap, Launch, LaunchToStart, OpRow,
                                       Section, Step, Sync, Timeline)
from perfstack.profile.trace import CpuEvent, GpuEvent, Trace

GAP_LIST_US = 50.0
MAX_GAPS = 40
CAT_INDEX = {c: i for i, c in enumerate(classify.PRIORITY)}


def _pct(a: float, b: float) -> float:
    return round(100.0 * a / b, 2) if b else 0.0


def _ms(us: float) -> float:
    return round(us / 1e3, 4)


def _quantile(xs: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile of ``xs``, in order (``_in_order``; None when empty)."""
    if not xs:
        return None
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


def _median(xs: Sequence[float]) -> float:
    """statistics.median of values already in order (``_in_order``), with its arithmetic."""
    n = len(xs)
    if n % 2 == 1:
        return xs[n // 2]
    i = n // 2
    return (xs[i - 1] + xs[i]) / 2


class _Counted(Sequence[float]):
    """Values in order, read by position as ``sorted()`` would give them, kept as the distinct values and how many
    of the values are at or below each."""

    def __init__(self, counts: Counter[float]) -> None:
        self.values = sorted(counts)
        self.ends = list(accumulate(map(counts.__getitem__, self.values)))

    def __len__(self) -> int:
        return self.ends[-1] if self.ends else 0

    def __getitem__(self, i: Any) -> Any:
        if not isinstance(i, int) or not 0 <= i < len(self):
            raise IndexError(i)
        return self.values[bisect_right(self.ends, i)]


def _in_order(xs: list[float]) -> Sequence[float]:
    """``xs`` in order, for its quantiles. A trace's durations and delays repeat (the 300k kernels of a large trace
    have 2k distinct durations): where the values are few, they are counted rather than sorted, which gives the same
    floats, unless an int and an equal float, or 0.0 and -0.0, would be counted as one, or a NaN upsets the order."""
    counts = Counter(xs)
    if len(counts) * 8 > len(xs) or 0.0 in counts or any(v != v for v in counts) or set(map(type, xs)) != {float}:
        return sorted(xs)
    return _Counted(counts)


def _r(x: float | None, nd: int = 2) -> float | None:
    return round(x, nd) if x is not None else None


class Analysed(NamedTuple):
    """What ``analyze`` gives the summary: the section so far, the working state for the summary's passes,
    and every operator row (the section keeps the top ones) for its MFU and roofline."""

    section: Section
    analysis: Analysis
    ops_all: list[OpRow]


def analyze(trace: Trace, A: Analysis | None = None) -> Analysed:
    """The profile summary of one trace (one rank), as ``Run.profile`` holds it before the summary's
    passes (efficiency against the peaks, overhead, what-ifs, MFU) add theirs. ``A``: the trace's
    Analysis, where it is already made."""
    if A is None:
        A = Analysis(trace)
    per_step: list[list[int]] = [[] for _ in A.windows]
    for i, s in enumerate(A.att.step):
        if s >= 0:
            per_step[s].append(i)
    tl = _GpuTimeline(A.gpu, A.att.category)
    periods = _periods(A, per_step, tl)
    # steps: each step's GPU view (and the idle gaps in it), then its CPU-side counts
    rows = [_step(A, k, per_step[k], g0, g1, tl) for k, (g0, g1) in enumerate(periods)]
    steps = [Step.join(row, counts) for (row, _), counts in zip(rows, _cpu_counts(A))]
    gaps = sorted((g for _, step_gaps in rows for g in step_gaps), key=lambda g: -g.duration_ms)
    m = _Means(steps)
    breakdown, idle_reason = _categories(steps)
    delays, early, kdurs = _launch_delays(A)
    in_order = _in_order(delays)  # (once: the timeline's median and the launch's quantiles read it)
    kern = efficiency.kernels(A)
    section = Section(
        file=trace.path, rank=trace.rank, world_size=trace.world_size,
        device=A.device, device_name=_device_name(A), other_devices=A.other_devices,
        n_steps=len(steps), steps=steps,
        step_ms=m("total_ms"), busy_ms=m("busy_ms"), idle_ms=m("idle_ms"),
        busy_pct=_pct(m("busy_ms"), m("total_ms")),
        timeline=_timeline(A, m, idle_reason, in_order),
        breakdown_ms={k: round(v, 4) for k, v in breakdown.items()},
        idle_by_reason_ms={k: round(v, 4) for k, v in idle_reason.items()},
        idle_gaps=gaps[:MAX_GAPS], n_idle_gaps=len(gaps),
        launch=_launch(m, in_order, kdurs),
        sync=Sync(m("syncs"), m("sync_wait_ms"), _per_step_names(A, cpu.SYNC_CALLS | cpu.BLOCKING_COPIES)),
        allocator=Allocator(m("alloc_calls"), m("alloc_ms"), round(idle_reason.get("allocator", 0.0), 4),
                            _per_step_names(A, cpu.ALLOC_CALLS)),
        data_wait_ms=m("data_wait_ms"), data_wait_idle_ms=round(idle_reason.get("data loading", 0.0), 4),
        comm=Comm(m("comm_ms"), m("comm_exposed_ms"), m("comm_overlapped_ms"),
                  _pct(m("comm_overlapped_ms"), m("comm_ms"))),
        compute_ms=round(sum(v for c, v in breakdown.items() if c not in ("idle", "comm", "cpu")), 4),
        precision=trace.meta.get("float32_matmul_precision"), notes=[*A.notes, *_clock_skew(early, len(delays))],
        warnings=list(trace.warnings), events_per_step=m("cpu_events"),
        top_kernels=kern.top_kernels, ops=kern.ops_all[:40], gemms=kern.gemms, memcpy=kern.memcpy,
        phases_ms=kern.phases_ms, compiled=kern.compiled,
    )
    return Analysed(section, A, kern.ops_all)


class _Means:
    """Means over the steps of one field of their rows (0 when there are none)."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps

    def __call__(self, key: str) -> float:
        if not self.steps:
            return 0.0
        total: float = sum(getattr(s, key) for s in self.steps)
        return round(total / len(self.steps), 4)


def _categories(steps: list[Step]) -> tuple[dict[str, float], dict[str, float]]:
    """Mean exclusive time per category, and mean idle time per cause, over the steps."""
    n = max(1, len(steps))
    breakdown: dict[str, float] = defaultdict(float)
    idle_reason: dict[str, float] = defaultdict(float)
    for s in steps:
        for c, v in s.categories.items():
            breakdown[c] += v / n
        for c, v in s.idle_by_reason_ms.items():
            idle_reason[c] += v / n
    return breakdown, idle_reason


def _launch_delays(A: Analysis) -> tuple[list[float], list[float], list[float]]:
    """Launch-return to start (µs) of every kernel launched inside a step; by how much each GPU event that starts
    before the call that launched it does; and the duration of every kernel inside a step: in one pass over the
    events (each reads its launch's start once, from the start times attribution kept side by side)."""
    rt_ts, rts = A.att.rt_ts, A.trace.runtime
    delays: list[float] = []
    early: list[float] = []
    kdurs: list[float] = []
    for g, j, s in zip(A.gpu, A.att.launch, A.att.step):
        if j >= 0:
            t = rt_ts[j]
            if g.ts < t:
                early.append(-(g.ts - t))
            if s >= 0 and g.kind == "kernel":
                delays.append(g.ts - (t + rts[j].dur))
                kdurs.append(g.dur)
        elif s >= 0 and g.kind == "kernel":
            kdurs.append(g.dur)
    return delays, early, kdurs


def _clock_skew(early: list[float], n_delays: int) -> list[str]:
    """A note when GPU events start before the calls that launched them (at least 1% of launches)."""
    if not early or len(early) < 0.01 * max(1, n_delays):
        return []
    # A kernel cannot start before the call that launched it: the CPU and GPU clocks disagree.
    return [f"{len(early)} GPU events start before the CPU call that launched them (by up to "
            f"{max(early) / 1e3:.3f} ms): the trace's CPU and GPU clocks disagree, so launch delays and the "
            "causes of idle gaps are unreliable; attribution to steps (by correlation id) is not affected"]


def _device_name(A: Analysis) -> str | None:
    names = A.trace.device_names
    name = names.get(A.device) if A.device is not None else None
    if name is None and names:
        name = next(iter(names.values()))
    return name


def _timeline(A: Analysis, m: _Means, idle_reason: dict[str, float], delays: Sequence[float]) -> Timeline:
    """``delays``: the launch delays, in order (``_in_order``)."""
    cpu_ms, gpu_ms = m("cpu_ms"), m("gpu_ms")
    median = _quantile(delays, 0.5)
    return Timeline(cpu_step_ms=cpu_ms, gpu_step_ms=gpu_ms,
                    bound=_bound(m("busy_ms"), m("total_ms"), idle_reason, gpu_ms, cpu_ms),
                    attribution=A.att.method, cpu_ahead_ms=_r(median / 1e3 if median is not None else None, 4),
                    unattributed_events=A.att.unattributed)


def _launch(m: _Means, delays: Sequence[float], kdurs: list[float]) -> Launch:
    """``delays``: the launch delays, in order (``_in_order``); ``kdurs``: the durations of the kernels inside the
    steps."""
    return Launch(
        kernels_per_step=m("kernels"), launches_per_step=m("launches"), graph_launches_per_step=m("graph_launches"),
        median_kernel_us=_r(_median(_in_order(kdurs))) if kdurs else None,
        short_kernel_pct=_pct(sum(1 for d in kdurs if d < 10.0), len(kdurs)),
        launch_to_start_us=LaunchToStart(_r(_quantile(delays, 0.5)), _r(_quantile(delays, 0.9)), len(delays)),
        launch_call_us=m("launch_call_us") or None, launch_cpu_ms_per_step=m("launch_cpu_ms"))


class _GpuTimeline:
    """The device's busy intervals, and its events' start and end times, kinds and category indexes (CAT_INDEX),
    read once here for the steps' rows and the gap queries."""

    def __init__(self, gpu: list[GpuEvent], categories: list[str]) -> None:
        self.gpu = gpu
        # (the times as arrays of doubles, side by side in memory: every idle gap looks its end up there, and each
        # step's rows read its events' there rather than in the events spread over the decoded trace)
        self.starts = starts = array("d", [g.ts for g in gpu])
        self.ends = ends = array("d", [g.ts + g.dur for g in gpu])
        self.kinds = [g.kind for g in gpu]
        self.cat = list(map(CAT_INDEX.__getitem__, categories))
        # a loaded trace's events are in start order: their union needs no sort
        self.in_order = in_order = all(map(le, starts, islice(starts, 1, None)))
        self.busy = (union_in_order if in_order else union)(zip(starts, ends))
        self.busy_ends = [e for _, e in self.busy]


def _periods(A: Analysis, per_step: list[list[int]], tl: _GpuTimeline) -> list[tuple[float, float]]:
    """Each step's GPU period. Periods tile the timeline: a step's runs from the end of the previous
    step's GPU work (for the first step: from its CPU start, or from the end of earlier queued work if
    that is later) to the end of its own, so the idle before a step's first kernel is that step's. A
    step without GPU work has an empty period at its CPU start."""
    starts, ends, step = tl.starts, tl.ends, A.att.step
    first = [min(map(starts.__getitem__, idx), default=None) for idx in per_step]
    last = [max(map(ends.__getitem__, idx), default=None) for idx in per_step]
    backlog = None
    if first and first[0] is not None:
        f0 = first[0]
        # the events starting before f0: where they are in start order, those before the first that does not
        n = bisect_left(starts, f0) if tl.in_order else len(starts)
        backlog = max((e for t, e, s in zip(starts[:n], ends[:n], step) if s < 0 and t < f0), default=None)
    out: list[tuple[float, float]] = []
    prev_end: float | None = None
    for k, (_, a, _) in enumerate(A.windows):
        f, e = first[k], last[k]
        if f is None or e is None:
            out.append((a, a))
            continue
        if prev_end is None:
            g0 = min(f, max(a, backlog) if backlog is not None else a)
        else:
            g0 = min(prev_end, f)
        prev_end = e
        out.append((g0, e))
    return out


def _step(A: Analysis, k: int, idx: list[int], g0: float, g1: float,
          tl: _GpuTimeline) -> tuple[GpuStep, list[IdleGap]]:
    """One step's GPU row: its time (the longer of its CPU window and GPU period), exclusive category
    times, idle time by cause; and its idle gaps of at least GAP_LIST_US."""
    gpu, att, trace = A.gpu, A.att, A.trace
    number, a, b = A.windows[k]
    cpu_us, period = b - a, g1 - g0
    total = max(cpu_us, period)
    comm_idx = CAT_INDEX["comm"]
    evs = list(zip(map(tl.starts.__getitem__, idx), map(tl.ends.__getitem__, idx), map(tl.cat.__getitem__, idx)))
    excl, comm_ov, comm_ex = sweep(evs, min(g0, a) - 1e9, max(g1, b) + 1e9, len(classify.PRIORITY), comm_idx)
    busy = sum(excl)
    idle = max(0.0, total - busy)
    reasons: dict[str, float] = defaultdict(float)
    gaps_out: list[IdleGap] = []
    if gpu and period > 0:
        lo = max(0, bisect_left(tl.busy_ends, g0) - 1)
        starts, launch_of, rts, n_gpu = tl.starts, att.launch, trace.runtime, len(gpu)
        in_order, reason_of, cs = tl.in_order, cpu.gap_reason, A.cs
        nxt = 0
        for s, e in gaps(tl.busy, g0, g1, lo):  # (a large trace has hundreds of thousands: kept lean)
            # the first event at or after the gap's end; where the events are in start order, it is at or after the
            # previous gap's (the gaps come in order), most often a few events on: looked for there first
            x = e - 1e-6
            if not in_order:
                nxt = bisect_left(starts, x)
            elif nxt + 8 < n_gpu and starts[nxt + 8] >= x:
                nxt = bisect_left(starts, x, nxt, nxt + 8)
            else:
                nxt = bisect_left(starts, x, nxt)
            j = launch_of[nxt] if nxt < n_gpu else -1
            why = reason_of(s, e, rts[j] if j >= 0 else None, cs)
            reasons[why] += e - s
            if e - s >= GAP_LIST_US:
                gaps_out.append(IdleGap(start_ms=_ms(s - A.windows[0][1]), duration_ms=_ms(e - s), step=number,
                                        reason=why,
                                        before=_neighbour(gpu, tl.starts, s, True),
                                        after=classify.short_name(gpu[nxt].name, 60) if nxt < n_gpu else ""))
    unexplained = idle - sum(reasons.values())
    if unexplained > 0.5:
        # the CPU window outlasted the GPU period: the GPU was fed from a queue built up before
        reasons["cpu dispatch" if period else "unknown"] += unexplained
    categories = {c: _ms(excl[CAT_INDEX[c]]) for c in classify.CATEGORIES if excl[CAT_INDEX[c]] > 0}
    categories["idle" if gpu else "cpu"] = _ms(idle if gpu else total)
    row = GpuStep(step=number, total_ms=_ms(total), cpu_ms=_ms(cpu_us), gpu_ms=_ms(period), busy_ms=_ms(busy),
                  busy_pct=_pct(busy, total), idle_ms=_ms(idle),
                  categories=categories, idle_by_reason_ms={r: _ms(v) for r, v in reasons.items() if v > 0},
                  kernels=list(map(tl.kinds.__getitem__, idx)).count("kernel"), comm_ms=_ms(excl[comm_idx] + comm_ov),
                  comm_exposed_ms=_ms(comm_ex),
                  comm_overlapped_ms=_ms(comm_ov))
    return row, gaps_out


def _bound(busy: float, total: float, idle: dict[str, float], gpu_ms: float, cpu_ms: float) -> Bound:
    """What sets the step time: the GPU's work, the CPU's, or syncs that make them take turns."""
    if not total or busy >= 0.85 * total:
        return "gpu"
    idle_ms = total - busy
    if idle.get("sync", 0.0) >= 0.5 * idle_ms:
        return "syncs"
    return "gpu" if gpu_ms > cpu_ms and idle.get("gpu queued", 0.0) >= 0.5 * idle_ms else "cpu"


def _cpu_counts(A: Analysis) -> list[CpuCounts]:
    """Per-step CPU-side counts: launches, syncs, allocator calls, data waits, recorded events."""
    t = A.trace
    starts = [a for _, a, _ in A.windows]
    ends = [b for _, _, b in A.windows]
    acc: list[dict[str, float]] = [defaultdict(float) for _ in A.windows]
    events = [0] * len(A.windows)  # recorded CPU events per step
    # what a name counts as, looked up once per name: a trace has hundreds of thousands of runtime calls
    kinds = {name: _call_kind(name) for name in {r.name for r in t.runtime}}
    in_order = all(map(le, starts, islice(starts, 1, None)))
    # (the calls' and the ops' start times as attribution read them, side by side in memory)
    ranges = _ranges(A.att.rt_ts, starts, ends) if in_order else None
    if ranges is not None:
        # the calls of each step at once, where they and the steps are in time order (a loaded trace's are)
        for k, (lo, hi) in enumerate(ranges):
            events[k] += hi - lo
            _count_runtime(acc[k], t.runtime[lo:hi], kinds)
    else:
        for r in t.runtime:
            ts = r.ts
            k = bisect_left(starts, ts + 1e-9) - 1
            if k < 0 or ts >= ends[k]:
                continue
            events[k] += 1
            _count_runtime(acc[k], (r,), kinds)
    # per name: 1 a DataLoader wait, 2 empty_cache, 0 neither
    waits = {name: 1 if name.startswith("enumerate(DataLoader)") else 2 if "empty_cache" in name else 0
             for name in A.op_names()}
    op_ranges = _ranges(A.att.op_ts, starts, ends)
    for k, (lo, hi) in enumerate(op_ranges or ()):
        events[k] += hi - lo  # the ops (millions) counted by bisection, and looped over only for their waits
    if op_ranges is None:
        todo: Iterable[CpuEvent] = t.ops
    elif any(waits.values()):  # only the ops that wait, picked without a loop here over the millions of others
        todo = compress(t.ops, map(waits.__getitem__, map(attrgetter("name"), t.ops)))
    else:
        todo = ()
    for o in todo:
        w = waits[o.name]
        ts = o.ts
        k = bisect_left(starts, ts + 1e-9) - 1
        if k < 0 or ts >= ends[k]:
            continue
        if op_ranges is None:
            events[k] += 1
        if w == 1:
            acc[k]["data_wait_ms"] += o.dur / 1e3
        elif w == 2:
            acc[k]["alloc_ms"] += o.dur / 1e3
    return [CpuCounts(launches=int(a["launches"]), graph_launches=int(a["graph_launches"]), syncs=int(a["syncs"]),
                      alloc_calls=int(a["alloc_calls"]), cpu_events=n, launch_cpu_ms=round(a["launch_cpu_ms"], 4),
                      sync_wait_ms=round(a["sync_wait_ms"], 4), alloc_ms=round(a["alloc_ms"], 4),
                      data_wait_ms=round(a["data_wait_ms"], 4),
                      launch_call_us=round(a["_launch_us"] / a["launches"], 2) if a["launches"] else 0.0)
            for a, n in zip(acc, events)]


def _ranges(ts: Sequence[float], starts: list[float], ends: list[float]) -> list[tuple[int, int]] | None:
    """Per step window, the range of indices of the events (start times ``ts``) that _cpu_counts gives it (an
    event belongs to the last window starting before it, if it starts before that window ends), found by
    bisection where the events are in time order (a large trace has millions); None where they are not."""
    if not all(map(le, ts, islice(ts, 1, None))):
        return None
    first = [first_after(ts, a) for a in starts]  # the first event of each window's range, and the end of the last
    first.append(len(ts))
    out = []
    for k, e in enumerate(ends):
        lo, hi = first[k], first[k + 1]
        out.append((lo, bisect_left(ts, e, lo, hi) if hi > lo else lo))
    return out


LAUNCH, GRAPH, SYNC, ALLOC = 1, 2, 4, 8  # what a runtime call counts as, more than an event (_call_kind)


def _call_kind(name: str) -> int:
    return ((LAUNCH if name in cpu.KERNEL_LAUNCHES or name in cpu.GRAPH_LAUNCHES else 0)
            | (GRAPH if name in cpu.GRAPH_LAUNCHES else 0)
            | (SYNC if name in cpu.SYNC_CALLS or name in cpu.BLOCKING_COPIES else 0)
            | (ALLOC if name in cpu.ALLOC_CALLS else 0))


def _count_runtime(a: dict[str, float], calls: Iterable[CpuEvent], kinds: dict[str, int]) -> None:
    """Count the CUDA runtime calls of one step that launch, sync or allocate into its accumulator (the sums
    kept at hand, added in the calls' order, and stored once)."""
    launches = graph_launches = syncs = alloc_calls = 0
    launch_ms = launch_us = sync_ms = alloc_ms = 0.0
    for r in calls:
        kind = kinds[r.name]
        if not kind:
            continue
        dur = r.dur
        if kind & LAUNCH:
            launches += 1
            launch_ms += dur / 1e3
            launch_us += dur
        if kind & GRAPH:
            graph_launches += 1
        if kind & SYNC:
            syncs += 1
            sync_ms += dur / 1e3
        if kind & ALLOC:
            alloc_calls += 1
            alloc_ms += dur / 1e3
    for key, v in (("launches", launches), ("launch_cpu_ms", launch_ms), ("_launch_us", launch_us),
                   ("graph_launches", graph_launches), ("syncs", syncs), ("sync_wait_ms", sync_ms),
                   ("alloc_calls", alloc_calls), ("alloc_ms", alloc_ms)):
        if v:
            a[key] += v


def _per_step_names(A: Analysis, names: set[str]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    n = max(1, len(A.windows))
    starts = [a for _, a, _ in A.windows]
    for r in A.trace.runtime:
        if r.name in names:
            k = bisect_left(starts, r.ts + 1e-9) - 1
            if k >= 0 and r.ts < A.windows[k][2]:
                out[r.name] += 1 / n
    return {k: round(v, 2) for k, v in out.items()}


def _neighbour(gpu: list[GpuEvent], ts: Sequence[float], t: float, before: bool) -> str:
    i = bisect_left(ts, t)
    j = i - 1
    while j >= 0 and gpu[j].ts + gpu[j].dur > t + 1.0:
        j -= 1
    return classify.short_name(gpu[j].name, 60) if j >= 0 else ""
