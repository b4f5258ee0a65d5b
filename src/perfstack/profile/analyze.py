"""Turn a loaded trace into the profile summary (it becomes ``Run.profile``; everything is JSON-able).

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

import statistics
from bisect import bisect_left
from collections import defaultdict
from typing import Any

from perfstack.profile import classify, cpu, flops
from perfstack.profile.attribute import attribute
from perfstack.profile.timeline import gaps, sweep, union
from perfstack.profile.trace import Trace

GAP_LIST_US = 50.0
MAX_GAPS = 40
CAT_INDEX = {c: i for i, c in enumerate(classify.PRIORITY)}


def _pct(a: float, b: float) -> float:
    return round(100.0 * a / b, 2) if b else 0.0


def _ms(us: float) -> float:
    return round(us / 1e3, 4)


def _quantile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


def _r(x: float | None, nd: int = 2) -> float | None:
    return round(x, nd) if x is not None else None


class Analysis:
    """The working state of one trace's analysis: the attributed events and the summary dict."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.notes: list[str] = []
        totals: dict[int, float] = defaultdict(float)
        for g in trace.gpu:
            totals[g.device] += g.dur
        self.device = max(totals, key=totals.get) if totals else None
        self.other_devices = sorted(d for d in totals if d != self.device)
        if self.other_devices:
            n_other = sum(1 for g in trace.gpu if g.device != self.device)
            self.notes.append(f"the trace has GPU events on devices {[self.device, *self.other_devices]}: device "
                              f"{self.device} (the most GPU time) is analysed; {n_other} events on the others are not")
        self.gpu = [g for g in trace.gpu if g.device == self.device]
        self.windows = [(s.number, s.ts, s.ts + s.dur) for s in trace.steps if s.dur > 0]
        if not self.windows:
            evs = [*trace.gpu, *trace.runtime, *trace.ops]
            if evs:
                self.windows = [(0, min(e.ts for e in evs), max(e.ts + e.dur for e in evs))]
            self.notes.append("no ProfilerStep# windows: the whole trace is analysed as one step "
                              "(call prof.step() once per iteration for per-step figures)")
        if not self.gpu:
            self.notes.append("no GPU kernels, copies or memsets in the trace: a CPU-only run (or CUDA activity was "
                              "not recorded: add ProfilerActivity.CUDA)")
        self.att = attribute(trace, self.gpu, self.windows)
        self.notes.extend(self.att.notes)
        if self.att.unattributed and self.gpu:
            n_before = sum(1 for s, g in zip(self.att.step, self.gpu) if s < 0)
            self.notes.append(f"{n_before} GPU events were launched outside the profiled steps (before the first or "
                              "after the last); they are not counted in any step but occupy the GPU timeline")
        self.cs = cpu.spans(trace)
        self.costs: dict[int, flops.Cost] = {}
        self._op_time: dict[int, float] | None = None

    def cost(self, o: int) -> flops.Cost | None:
        if o < 0:
            return None
        c = self.costs.get(o)
        if c is None:
            op = self.trace.ops[o]
            c = self.costs[o] = flops.cost(op.name, op.dims, op.types, getattr(op, "concrete", None))
        return c

    def known_cost(self, o: int) -> flops.Cost:
        """The cost of op ``o``, where the caller has already seen that there is one."""
        c = self.cost(o)
        if c is None:
            raise ValueError(f"op {o} has no cost")
        return c

    def op_time(self, o: int) -> float:
        """GPU time (µs) of op ``o``'s compute kernels: FLOPs belong to them, not to the op's helpers."""
        if self._op_time is None:
            self._op_time = defaultdict(float)
            for i, g in enumerate(self.gpu):
                if self.att.op[i] >= 0 and self.att.category[i] in classify.COMPUTE:
                    self._op_time[self.att.op[i]] += g.dur
        return self._op_time.get(o, 0.0)


def analyze(trace: Trace) -> dict[str, Any]:
    """The profile summary of one trace (one rank)."""
    A = Analysis(trace)
    gpu, att = A.gpu, A.att
    per_step: list[list[int]] = [[] for _ in A.windows]
    for i, s in enumerate(att.step):
        if s >= 0:
            per_step[s].append(i)
    tl = _GpuTimeline(gpu)
    steps: list[dict[str, Any]] = []
    gaps_out: list[dict[str, Any]] = []
    for k, (g0, g1) in enumerate(_periods(A, per_step)):
        steps.append(_step(A, k, per_step[k], g0, g1, tl, gaps_out))
    _cpu_counts(A, steps)
    n = max(1, len(steps))

    def mean(key: str) -> float:
        return round(sum(s[key] for s in steps) / n, 4) if steps else 0.0

    breakdown: dict[str, float] = defaultdict(float)
    idle_reason: dict[str, float] = defaultdict(float)
    for s in steps:
        for c, v in s["categories"].items():
            breakdown[c] += v / n
        for c, v in s["idle_by_reason_ms"].items():
            idle_reason[c] += v / n
    gaps_out.sort(key=lambda g: -g["duration_ms"])
    cpu_ms, gpu_ms = mean("cpu_ms"), mean("gpu_ms")
    delays = [gpu[i].ts - (trace.runtime[j].ts + trace.runtime[j].dur) for i, j in enumerate(att.launch)
              if j >= 0 and att.step[i] >= 0 and gpu[i].kind == "kernel"]
    kdurs = [gpu[i].dur for i in range(len(gpu)) if att.step[i] >= 0 and gpu[i].kind == "kernel"]
    early = [-(gpu[i].ts - trace.runtime[j].ts) for i, j in enumerate(att.launch) if j >= 0 and gpu[i].ts < trace.runtime[j].ts]
    if early and len(early) >= 0.01 * max(1, len(delays)):
        # A kernel cannot start before the call that launched it: the CPU and GPU clocks disagree.
        A.notes.append(f"{len(early)} GPU events start before the CPU call that launched them (by up to "
                       f"{max(early) / 1e3:.3f} ms): the trace's CPU and GPU clocks disagree, so launch delays and the "
                       "causes of idle gaps are unreliable; attribution to steps (by correlation id) is not affected")
    device_name = trace.device_names.get(A.device) if A.device is not None else None
    if device_name is None and trace.device_names:
        device_name = next(iter(trace.device_names.values()))
    out: dict[str, Any] = {
        "file": trace.path, "rank": trace.rank, "world_size": trace.world_size,
        "device": A.device, "device_name": device_name, "other_devices": A.other_devices,
        "n_steps": len(steps), "steps": steps,
        "step_ms": mean("total_ms"), "busy_ms": mean("busy_ms"), "idle_ms": mean("idle_ms"),
        "busy_pct": _pct(mean("busy_ms"), mean("total_ms")),
        "timeline": {"cpu_step_ms": cpu_ms, "gpu_step_ms": gpu_ms,
                     "bound": _bound(mean("busy_ms"), mean("total_ms"), idle_reason, gpu_ms, cpu_ms),
                     "attribution": att.method,
                     "cpu_ahead_ms": _r(_quantile(delays, 0.5) / 1e3 if delays else None, 4),
                     "unattributed_events": att.unattributed},
        "breakdown_ms": {k: round(v, 4) for k, v in breakdown.items()},
        "idle_by_reason_ms": {k: round(v, 4) for k, v in idle_reason.items()},
        "idle_gaps": gaps_out[:MAX_GAPS], "n_idle_gaps": len(gaps_out),
        "launch": {
            "kernels_per_step": mean("kernels"), "launches_per_step": mean("launches"),
            "graph_launches_per_step": mean("graph_launches"),
            "median_kernel_us": _r(statistics.median(kdurs)) if kdurs else None,
            "short_kernel_pct": _pct(sum(1 for d in kdurs if d < 10.0), len(kdurs)),
            # measured from the launch call's return, as HTA does
            "launch_to_start_us": {"median": _r(_quantile(delays, 0.5)), "p90": _r(_quantile(delays, 0.9)),
                                   "n": len(delays), "from": "launch return"},
            "launch_call_us": mean("launch_call_us") or None,
            "launch_cpu_ms_per_step": mean("launch_cpu_ms"),
        },
        "sync": {"calls_per_step": mean("syncs"), "wait_ms_per_step": mean("sync_wait_ms"),
                 "by_name": _per_step_names(A, cpu.SYNC_CALLS | cpu.BLOCKING_COPIES)},
        "allocator": {"calls_per_step": mean("alloc_calls"), "ms_per_step": mean("alloc_ms"),
                      "idle_ms_per_step": round(idle_reason.get("allocator", 0.0), 4),
                      "by_name": _per_step_names(A, cpu.ALLOC_CALLS)},
        "data_wait_ms": mean("data_wait_ms"), "data_wait_idle_ms": round(idle_reason.get("data loading", 0.0), 4),
        "comm": {"ms_per_step": mean("comm_ms"), "exposed_ms_per_step": mean("comm_exposed_ms"),
                 "overlapped_ms_per_step": mean("comm_overlapped_ms"),
                 "overlap_pct": _pct(mean("comm_overlapped_ms"), mean("comm_ms"))},
        "compute_ms": round(sum(v for c, v in breakdown.items() if c not in ("idle", "comm", "cpu")), 4),
        "precision": trace.meta.get("float32_matmul_precision"), "notes": A.notes, "warnings": list(trace.warnings),
        "events_per_step": mean("cpu_events"),
    }
    from perfstack.profile import efficiency
    efficiency.kernels(A, out)
    out["_analysis"] = A  # dropped by summary before the Run is built
    return out


class _GpuTimeline:
    """The device's busy intervals and start times, for gap queries."""

    def __init__(self, gpu: list) -> None:
        self.gpu = gpu
        self.busy = union((g.ts, g.ts + g.dur) for g in gpu)
        self.busy_ends = [e for _, e in self.busy]
        self.starts = [g.ts for g in gpu]

    def first_at_or_after(self, t: float) -> int | None:
        i = bisect_left(self.starts, t - 1e-6)
        return i if i < len(self.gpu) else None


def _periods(A: Analysis, per_step: list[list[int]]) -> list[tuple[float, float]]:
    """Each step's GPU period. Periods tile the timeline: a step's runs from the end of the previous
    step's GPU work (for the first step: from its CPU start, or from the end of earlier queued work if
    that is later) to the end of its own, so the idle before a step's first kernel is that step's. A
    step without GPU work has an empty period at its CPU start."""
    gpu, att = A.gpu, A.att
    first = [min((gpu[i].ts for i in idx), default=None) for idx in per_step]
    last = [max((gpu[i].ts + gpu[i].dur for i in idx), default=None) for idx in per_step]
    backlog = None
    if first and first[0] is not None:
        backlog = max((g.ts + g.dur for g, s in zip(gpu, att.step) if s < 0 and g.ts < first[0]), default=None)
    out, prev_end = [], None
    for k, (_, a, _) in enumerate(A.windows):
        if first[k] is None:
            out.append((a, a))
            continue
        if prev_end is None:
            g0 = min(first[k], max(a, backlog) if backlog is not None else a)
        else:
            g0 = min(prev_end, first[k])
        prev_end = last[k]
        out.append((g0, last[k]))
    return out


def _step(A: Analysis, k: int, idx: list[int], g0: float, g1: float, tl: _GpuTimeline,
          gaps_out: list[dict[str, Any]]) -> dict[str, Any]:
    """One step's row: its time (the longer of its CPU window and GPU period), exclusive category
    times, idle gaps and their causes (the largest appended to ``gaps_out``)."""
    gpu, att, trace = A.gpu, A.att, A.trace
    number, a, b = A.windows[k]
    cpu_us, period = b - a, g1 - g0
    total = max(cpu_us, period)
    comm_idx = CAT_INDEX["comm"]
    evs = [(gpu[i].ts, gpu[i].ts + gpu[i].dur, CAT_INDEX[att.category[i]]) for i in idx]
    excl, comm_ov, comm_ex = sweep(evs, min(g0, a) - 1e9, max(g1, b) + 1e9, len(classify.PRIORITY), comm_idx)
    busy = sum(excl)
    idle = max(0.0, total - busy)
    reasons: dict[str, float] = defaultdict(float)
    if gpu and period > 0:
        lo = max(0, bisect_left(tl.busy_ends, g0) - 1)
        for s, e in gaps(tl.busy, g0, g1, lo):
            nxt = tl.first_at_or_after(e)
            launch = trace.runtime[att.launch[nxt]] if nxt is not None and att.launch[nxt] >= 0 else None
            why = cpu.gap_reason(s, e, launch, A.cs)
            reasons[why] += e - s
            if e - s >= GAP_LIST_US:
                gaps_out.append({"start_ms": _ms(s - A.windows[0][1]), "duration_ms": _ms(e - s), "step": number,
                                 "reason": why, "before": _neighbour(gpu, tl.starts, s, True),
                                 "after": classify.short_name(gpu[nxt].name, 60) if nxt is not None else ""})
    unexplained = idle - sum(reasons.values())
    if unexplained > 0.5:
        # the CPU window outlasted the GPU period: the GPU was fed from a queue built up before
        reasons["cpu dispatch" if period else "unknown"] += unexplained
    categories = {c: _ms(excl[CAT_INDEX[c]]) for c in classify.CATEGORIES if excl[CAT_INDEX[c]] > 0}
    categories["idle" if gpu else "cpu"] = _ms(idle if gpu else total)
    return {"step": number, "total_ms": _ms(total), "cpu_ms": _ms(cpu_us), "gpu_ms": _ms(period),
            "busy_ms": _ms(busy), "busy_pct": _pct(busy, total), "idle_ms": _ms(idle),
            "categories": categories, "idle_by_reason_ms": {r: _ms(v) for r, v in reasons.items() if v > 0},
            "kernels": sum(1 for i in idx if gpu[i].kind == "kernel"), "comm_ms": _ms(excl[comm_idx] + comm_ov),
            "comm_exposed_ms": _ms(comm_ex), "comm_overlapped_ms": _ms(comm_ov)}


def _bound(busy: float, total: float, idle: dict[str, float], gpu_ms: float, cpu_ms: float) -> str:
    """What sets the step time: the GPU's work, the CPU's, or syncs that make them take turns."""
    if not total or busy >= 0.85 * total:
        return "gpu"
    idle_ms = total - busy
    if idle.get("sync", 0.0) >= 0.5 * idle_ms:
        return "syncs"
    return "gpu" if gpu_ms > cpu_ms and idle.get("gpu queued", 0.0) >= 0.5 * idle_ms else "cpu"


def _cpu_counts(A: Analysis, steps: list[dict]) -> None:
    """Per-step CPU-side counts: launches, syncs, allocator calls, data waits, recorded events."""
    t = A.trace
    starts = [a for _, a, _ in A.windows]
    acc = [defaultdict(float) for _ in steps]

    def win(ts: float) -> int:
        k = bisect_left(starts, ts + 1e-9) - 1
        return k if k >= 0 and ts < A.windows[k][2] else -1

    for r in t.runtime:
        k = win(r.ts)
        if k < 0:
            continue
        a = acc[k]
        a["cpu_events"] += 1
        if r.name in cpu.KERNEL_LAUNCHES or r.name in cpu.GRAPH_LAUNCHES:
            a["launches"] += 1
            a["launch_cpu_ms"] += r.dur / 1e3
            a["_launch_us"] += r.dur
        if r.name in cpu.GRAPH_LAUNCHES:
            a["graph_launches"] += 1
        if r.name in cpu.SYNC_CALLS or r.name in cpu.BLOCKING_COPIES:
            a["syncs"] += 1
            a["sync_wait_ms"] += r.dur / 1e3
        if r.name in cpu.ALLOC_CALLS:
            a["alloc_calls"] += 1
            a["alloc_ms"] += r.dur / 1e3
    for o in t.ops:
        k = win(o.ts)
        if k < 0:
            continue
        acc[k]["cpu_events"] += 1
        if o.name.startswith("enumerate(DataLoader)"):
            acc[k]["data_wait_ms"] += o.dur / 1e3
        elif "empty_cache" in o.name:
            acc[k]["alloc_ms"] += o.dur / 1e3
    for s, a in zip(steps, acc):
        for key in ("launches", "graph_launches", "syncs", "alloc_calls", "cpu_events"):
            s[key] = int(a[key])
        for key in ("launch_cpu_ms", "sync_wait_ms", "alloc_ms", "data_wait_ms"):
            s[key] = round(a[key], 4)
        s["launch_call_us"] = round(a["_launch_us"] / a["launches"], 2) if a["launches"] else 0.0


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


def _neighbour(gpu: list, ts: list[float], t: float, before: bool) -> str:
    i = bisect_left(ts, t)
    j = i - 1
    while j >= 0 and gpu[j].ts + gpu[j].dur > t + 1.0:
        j -= 1
    return classify.short_name(gpu[j].name, 60) if j >= 0 else ""
