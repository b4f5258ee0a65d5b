"""Turn a loaded trace into the profile summary: per-step wall time, GPU busy/idle, what the CPU
was doing in each idle gap, GPU time by category, top kernels, launch statistics, syncs,
allocator calls, memcpy by direction and memory kind, GEMM FLOPs and achieved TFLOP/s,
compute/communication overlap. Everything returned is JSON-able (it becomes ``Run.profile``).

Definitions (the same ones HTA uses where it has one):
- a step is a ``ProfilerStep#N`` window on the CPU; GPU work is clipped to it;
- busy = union of kernel, memcpy and memset intervals over all streams of the device;
- idle = step wall time − busy; a gap is a maximal idle interval (listed when ≥ 50 µs);
- category time is exclusive: when streams overlap, an instant counts once, for the first active
  category in ``classify.PRIORITY`` (compute before copies before NCCL), so categories + idle = step;
- exposed communication = time NCCL kernels run with no other GPU work on the device.
"""

from __future__ import annotations

import statistics
from bisect import bisect_left, bisect_right
from collections import defaultdict
from typing import Any

from perfstack.profile import classify
from perfstack.profile.timeline import Spans, gaps, sweep, union
from perfstack.profile.trace import Trace

GAP_LIST_US = 50.0
MAX_GAPS = 40
SYNC_CALLS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cuStreamSynchronize",
              "cuCtxSynchronize", "cuEventSynchronize", "cudaMemcpy", "cudaMemcpy2D", "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2"}
SYNC_OPS = {"aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero"}
ALLOC_CALLS = {"cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync", "cuMemAlloc_v2", "cuMemFree_v2",
               "cudaHostAlloc", "cudaFreeHost", "cudaMallocHost", "cuMemCreate", "cuMemMap", "cuMemUnmap",
               "cuMemRelease", "cuMemAddressReserve", "cuMemSetAccess"}
LAUNCH_CALLS = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch",
                "cuGraphLaunch", "cudaLaunchCooperativeKernel", "cudaMemcpyAsync", "cudaMemsetAsync"}
REASONS = ("data loading", "allocator", "sync", "cpu dispatch", "no cpu activity")
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


def analyze(trace: Trace) -> dict[str, Any]:
    """The profile summary of one trace (one rank)."""
    devices: dict[int, float] = defaultdict(float)
    for g in trace.gpu:
        devices[g.device] += g.dur
    device = max(devices, key=devices.get) if devices else None
    gpu = [g for g in trace.gpu if g.device == device]
    windows = [(s.number, s.ts, s.ts + s.dur) for s in trace.steps if s.dur > 0]
    notes: list[str] = []
    if not windows:
        starts = [e.ts for e in (*trace.gpu, *trace.runtime, *trace.ops)]
        ends = [e.ts + e.dur for e in (*trace.gpu, *trace.runtime, *trace.ops)]
        windows = [(0, min(starts), max(ends))] if starts else []
        notes.append("no ProfilerStep# windows: the whole trace is analysed as one step "
                     "(call prof.step() once per iteration for per-step figures)")
    if not gpu:
        notes.append("no GPU kernels, copies or memsets in the trace: a CPU-only run (or CUDA activity was not "
                     "recorded: add ProfilerActivity.CUDA)")

    # -- CPU-side span sets -------------------------------------------------------------------
    dl = Spans((o.ts, o.ts + o.dur) for o in trace.ops if o.name.startswith("enumerate(DataLoader)"))
    sync_rt = [r for r in trace.runtime if r.name in SYNC_CALLS]
    sync = Spans([(r.ts, r.ts + r.dur) for r in sync_rt]
                 + [(o.ts, o.ts + o.dur) for o in trace.ops if o.name in SYNC_OPS])
    alloc_rt = [r for r in trace.runtime if r.name in ALLOC_CALLS]
    alloc = Spans([(r.ts, r.ts + r.dur) for r in alloc_rt]
                  + [(o.ts, o.ts + o.dur) for o in trace.ops if "empty_cache" in o.name])
    launch_rt = [r for r in trace.runtime if r.name in LAUNCH_CALLS]
    busy_cpu = Spans([(r.ts, r.ts + r.dur) for r in trace.runtime]
                     + [(o.ts, o.ts + o.dur) for o in trace.ops])

    ops_by_ext = {o.external_id: o for o in trace.ops if o.cat == "op" and o.external_id is not None}
    rt_by_corr = {r.correlation: r for r in trace.runtime if r.correlation is not None}
    precision = trace.meta.get("float32_matmul_precision")

    # -- per-kernel facts ---------------------------------------------------------------------
    cats = [classify.category(g.kind, g.name) for g in gpu]
    gpu_sorted_ts = [g.ts for g in gpu]
    max_dur = max((g.dur for g in gpu), default=0.0)
    in_window = [False] * len(gpu)
    for _, a, b in windows:
        i = bisect_left(gpu_sorted_ts, a)
        while i < len(gpu) and gpu[i].ts < b:
            in_window[i] = True
            i += 1
    gemm_kernels_per_ext: dict[int, int] = defaultdict(int)
    for g, c in zip(gpu, cats):
        if c == "gemm" and g.external_id is not None:
            gemm_kernels_per_ext[g.external_id] += 1

    kernels: dict[str, dict[str, Any]] = {}
    gemm_rows: dict[tuple, dict[str, Any]] = {}
    memcpy_rows: dict[tuple[str, str], dict[str, Any]] = {}
    delays: list[float] = []
    kdurs: list[float] = []
    for g, c, w in zip(gpu, cats, in_window):
        if not w:
            continue
        if g.kind == "kernel":
            kdurs.append(g.dur)
            r = rt_by_corr.get(g.correlation)
            if r is not None and g.ts >= r.ts:
                delays.append(g.ts - r.ts)
        k = kernels.get(g.name)
        if k is None:
            k = kernels[g.name] = {"name": classify.short_name(g.name), "category": c, "count": 0, "time_us": 0.0}
        k["count"] += 1
        k["time_us"] += g.dur
        if g.kind == "memcpy":
            key = classify.memcpy_kind(g.name)
            m = memcpy_rows.setdefault(key, {"direction": key[0], "memory": key[1], "count": 0, "bytes": 0,
                                             "time_us": 0.0})
            m["count"] += 1
            m["bytes"] += g.bytes or 0
            m["time_us"] += g.dur
        if c == "gemm":
            op = ops_by_ext.get(g.external_id)
            dtype = classify.op_dtype(op.types) if op else None
            shape = classify.gemm_shape(op.name, op.dims) if op else None
            tc = classify.tensor_cores(g.name, dtype, precision)
            flops = nbytes = None
            if shape:
                bsz, m_, n_, k_ = shape
                split = max(1, gemm_kernels_per_ext.get(g.external_id, 1))
                flops = 2.0 * bsz * m_ * n_ * k_ / split
                # Minimum traffic: read A and B once, write C once (what the roofline's x axis needs).
                nbytes = bsz * (m_ * k_ + k_ * n_ + m_ * n_) * classify.itemsize(dtype) / split
            bad = classify.misaligned(shape, dtype) if shape else []
            key = (dtype or "?", tc, bool(bad))
            row = gemm_rows.setdefault(key, {"dtype": dtype, "tensor_cores": tc, "misaligned": bool(bad),
                                             "count": 0, "time_us": 0.0, "flops": 0.0, "bytes": 0.0,
                                             "flops_time_us": 0.0,
                                             "shapes": {}, "ops": set()})
            row["count"] += 1
            row["time_us"] += g.dur
            if flops:
                row["flops"] += flops
                row["bytes"] += nbytes
                row["flops_time_us"] += g.dur
            if shape:
                s = f"{shape[1]}x{shape[2]}x{shape[3]}" + (f" (batch {shape[0]})" if shape[0] > 1 else "")
                row["shapes"][s] = row["shapes"].get(s, 0) + 1
            if op:
                row["ops"].add(op.name)
            k.setdefault("tensor_cores", tc)

    rt_ts = [r.ts for r in trace.runtime]
    # -- per step ------------------------------------------------------------------------------
    cat_events = [(g.ts, g.ts + g.dur, CAT_INDEX[c]) for g, c in zip(gpu, cats)]
    all_busy = union((g.ts, g.ts + g.dur) for g in gpu)
    comm_idx = CAT_INDEX["comm"]
    steps: list[dict[str, Any]] = []
    all_gaps: list[dict[str, Any]] = []
    for number, a, b in windows:
        wall = b - a
        lo = bisect_left(gpu_sorted_ts, a - max_dur)
        hi = bisect_left(gpu_sorted_ts, b)
        evs = cat_events[lo:hi]
        excl, comm_overlapped, comm_exposed = sweep(evs, a, b, len(classify.PRIORITY), comm_idx)
        busy = sum(excl)
        idle_by: dict[str, float] = {r: 0.0 for r in REASONS}
        lo_b = bisect_left([e for _, e in all_busy], a) if all_busy else 0
        step_busy = [iv for iv in all_busy[max(0, lo_b - 1):] if iv[0] < b] if gpu else []
        overlap_act = {"data loading": 0.0, "sync": 0.0, "allocator": 0.0}
        if gpu:
            for s, e in gaps(step_busy, a, b):
                g_len = e - s
                d, al, sy = dl.overlap(s, e), alloc.overlap(s, e), sync.overlap(s, e)
                overlap_act["data loading"] += d
                overlap_act["allocator"] += al
                overlap_act["sync"] += sy
                after_sync = sync.ends_within(s - 20.0, s + 0.5 * g_len)
                if d >= 0.3 * g_len:
                    reason = "data loading"
                elif al >= 0.3 * g_len:
                    reason = "allocator"
                elif sy >= 0.3 * g_len:
                    reason = "sync"
                elif busy_cpu.overlap(s, e) >= 0.3 * g_len:
                    reason = "cpu dispatch"
                else:
                    reason = "no cpu activity"
                idle_by[reason] += g_len
                if g_len >= GAP_LIST_US:
                    all_gaps.append({"start_ms": _ms(s - windows[0][1]), "duration_ms": _ms(g_len), "step": number,
                                     "reason": reason + (" (after a sync)" if after_sync and reason == "cpu dispatch"
                                                         else ""),
                                     "before": _neighbour(gpu, gpu_sorted_ts, s, before=True),
                                     "after": _neighbour(gpu, gpu_sorted_ts, e, before=False),
                                     "cpu_ms": {"data loading": _ms(d), "allocator": _ms(al), "sync": _ms(sy)}})
        idle = wall - busy if gpu else 0.0
        nk = sum(1 for g in gpu[lo:hi] if g.kind == "kernel" and a <= g.ts < b)
        rts = trace.runtime[bisect_left(rt_ts, a):bisect_left(rt_ts, b)]
        categories = {c: _ms(excl[CAT_INDEX[c]]) for c in classify.CATEGORIES if excl[CAT_INDEX[c]] > 0}
        if gpu:
            categories["idle"] = _ms(idle)
        else:
            categories["cpu"] = _ms(wall)
        steps.append({
            "step": number, "total_ms": _ms(wall), "busy_ms": _ms(busy), "busy_pct": _pct(busy, wall),
            "idle_ms": _ms(idle), "categories": categories,
            "idle_by_reason_ms": {r: _ms(v) for r, v in idle_by.items() if v > 0},
            "kernels": nk,
            "launches": sum(1 for r in rts if r.name in LAUNCH_CALLS and r.name not in ("cudaMemcpyAsync", "cudaMemsetAsync")),
            "graph_launches": sum(1 for r in rts if r.name in ("cudaGraphLaunch", "cuGraphLaunch")),
            "syncs": sum(1 for r in rts if r.name in SYNC_CALLS),
            "sync_wait_ms": _ms(sync.overlap(a, b)),
            "data_wait_ms": _ms(dl.overlap(a, b)),
            "data_wait_idle_ms": _ms(overlap_act["data loading"]),
            "alloc_calls": sum(1 for r in rts if r.name in ALLOC_CALLS),
            "alloc_ms": _ms(alloc.overlap(a, b)),
            "alloc_idle_ms": _ms(overlap_act["allocator"]),
            "launch_cpu_ms": _ms(sum(r.dur for r in rts if r.name in LAUNCH_CALLS)),
            "comm_ms": _ms(excl[comm_idx] + comm_overlapped),
            "comm_exposed_ms": _ms(comm_exposed),
            "comm_overlapped_ms": _ms(comm_overlapped),
        })

    n_steps = max(1, len(steps))
    all_gaps.sort(key=lambda g: -g["duration_ms"])

    def mean(key: str) -> float:
        return round(sum(s[key] for s in steps) / n_steps, 4) if steps else 0.0

    breakdown: dict[str, float] = defaultdict(float)
    idle_reason: dict[str, float] = defaultdict(float)
    for s in steps:
        for c, v in s["categories"].items():
            breakdown[c] += v / n_steps
        for c, v in s["idle_by_reason_ms"].items():
            idle_reason[c] += v / n_steps

    top = sorted(kernels.values(), key=lambda k: -k["time_us"])[:15]
    for k in top:
        k["time_ms_per_step"] = _ms(k.pop("time_us") / n_steps)
    memcpy = []
    for m in memcpy_rows.values():
        t_us = m.pop("time_us")
        m["time_ms_per_step"] = _ms(t_us / n_steps)
        m["bytes_per_step"] = int(m["bytes"] / n_steps)
        m["gbps"] = round(m["bytes"] / t_us / 1e3, 2) if t_us and m["bytes"] else None
        memcpy.append(m)
    gemms = []
    for row in gemm_rows.values():
        t_us = row.pop("time_us")
        ft = row.pop("flops_time_us")
        row["time_ms_per_step"] = _ms(t_us / n_steps)
        row["flops_per_step"] = row.pop("flops") / n_steps
        row["bytes_per_step"] = row.pop("bytes") / n_steps
        row["tflops"] = round(row["flops_per_step"] * n_steps / (ft * 1e-6) / 1e12, 2) if ft else None
        row["shapes"] = dict(sorted(row["shapes"].items(), key=lambda kv: -kv[1])[:6])
        row["ops"] = sorted(row["ops"])
        row["count_per_step"] = round(row.pop("count") / n_steps, 2)
        gemms.append(row)
    gemms.sort(key=lambda r: -r["time_ms_per_step"])

    device_name = trace.device_names.get(device) if device is not None else None
    if device_name is None and trace.device_names:
        device_name = next(iter(trace.device_names.values()))
    return {
        "file": trace.path, "rank": trace.rank, "world_size": trace.world_size,
        "device": device, "device_name": device_name, "other_devices": sorted(d for d in devices if d != device),
        "n_steps": len(steps), "steps": steps,
        "step_ms": mean("total_ms"), "busy_ms": mean("busy_ms"), "idle_ms": mean("idle_ms"),
        "busy_pct": _pct(mean("busy_ms"), mean("total_ms")),
        "breakdown_ms": {k: round(v, 4) for k, v in breakdown.items()},
        "idle_by_reason_ms": {k: round(v, 4) for k, v in idle_reason.items()},
        "idle_gaps": all_gaps[:MAX_GAPS], "n_idle_gaps": len(all_gaps),
        "top_kernels": top, "memcpy": memcpy, "gemms": gemms,
        "launch": {
            "kernels_per_step": mean("kernels"), "launches_per_step": mean("launches"),
            "graph_launches_per_step": mean("graph_launches"),
            "median_kernel_us": round(statistics.median(kdurs), 2) if kdurs else None,
            "short_kernel_pct": _pct(sum(1 for d in kdurs if d < 10.0), len(kdurs)),
            "launch_to_start_us": {"median": _r(_quantile(delays, 0.5)), "p90": _r(_quantile(delays, 0.9)),
                                   "n": len(delays)},
            "launch_call_us": _r(statistics.median([r.dur for r in launch_rt])) if launch_rt else None,
            "launch_cpu_ms_per_step": mean("launch_cpu_ms"),
        },
        "sync": {"calls_per_step": mean("syncs"), "wait_ms_per_step": mean("sync_wait_ms"),
                 "by_name": _count_per_step(sync_rt, windows)},
        "allocator": {"calls_per_step": mean("alloc_calls"), "ms_per_step": mean("alloc_ms"),
                      "idle_ms_per_step": mean("alloc_idle_ms"), "by_name": _count_per_step(alloc_rt, windows)},
        "data_wait_ms": mean("data_wait_ms"), "data_wait_idle_ms": mean("data_wait_idle_ms"),
        "comm": {"ms_per_step": mean("comm_ms"), "exposed_ms_per_step": mean("comm_exposed_ms"),
                 "overlapped_ms_per_step": mean("comm_overlapped_ms"),
                 "overlap_pct": _pct(mean("comm_overlapped_ms"), mean("comm_ms"))},
        "compute_ms": round(sum(v for c, v in breakdown.items() if c not in ("idle", "comm", "cpu")), 4),
        "precision": precision, "notes": notes, "warnings": list(trace.warnings),
    }


def _r(x: float | None) -> float | None:
    return round(x, 2) if x is not None else None


def _count_per_step(events: list, windows: list) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    n = max(1, len(windows))
    starts = [a for _, a, _ in windows]
    for e in events:
        i = bisect_right(starts, e.ts) - 1
        if i >= 0 and e.ts < windows[i][2]:
            out[e.name] += 1 / n
    return {k: round(v, 2) for k, v in out.items()}


def _neighbour(gpu: list, ts: list[float], t: float, before: bool) -> str:
    i = bisect_left(ts, t)
    if before:
        j = i - 1
        while j >= 0 and gpu[j].ts + gpu[j].dur > t + 1.0:
            j -= 1
        return classify.short_name(gpu[j].name, 60) if j >= 0 else ""
    return classify.short_name(gpu[i].name, 60) if i < len(gpu) else ""
