"""Where the GPU's busy time goes and how well it is spent: per kernel, per operator (FLOPs and
bytes from the operator's recorded shapes, achieved TFLOP/s and GB/s, placed on the roofline
against the SKU's peaks), GEMMs by dtype and Tensor-Core use, copies by direction, GPU time by
phase (forward, backward, optimizer), compiled code (Triton kernels, compiled regions)."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, Optional, Tuple

from perfstack.profile import classify
from perfstack.records.profile.kernels import OpBound
from perfstack.records.profile import Compiled, GemmRow, KernelClass, MemcpyRow, Mfu, OpRow, Overhead, Section, TopKernel

if TYPE_CHECKING:
    from perfstack.profile.analysis import Analysis
    from perfstack.profile.flops import Cost
    from perfstack.specs.table import GpuSpec

HBM_PRACTICAL = 0.90  # specs.practical hbm_copy: a streaming kernel reaches ~90% of the HBM peak


def _ms(us: float) -> float:
    return round(us / 1e3, 4)


class Kernels(NamedTuple):
    """The kernel pass's result, per step: the top kernels, every operator row (by time), the GEMM
    classes, the copies by direction, GPU time by phase, and the compiled code."""

    top_kernels: list[TopKernel]
    ops_all: list[OpRow]
    gemms: list[GemmRow]
    memcpy: list[MemcpyRow]
    phases_ms: dict[str, float]
    compiled: Compiled


def kernels(A: Analysis) -> Kernels:
    """The per-kernel and per-operator pass over the GPU events of the steps."""
    n = max(1, len(A.windows))
    acc = _Rows(A)
    top = sorted(acc.names.values(), key=lambda k: -k["time_us"])[:15]
    rows = sorted((_finish_op(r, n) for r in acc.ops.values()), key=lambda r: -r.time_ms_per_step)
    return Kernels([TopKernel(k["name"], k["category"], k["count"], _ms(k["time_us"] / n)) for k in top], rows,
                   _finish_gemms(acc.gemms, n), [_finish_memcpy(m, n) for m in acc.memcpy.values()],
                   {k: _ms(v / n) for k, v in sorted(acc.phases.items(), key=lambda kv: -kv[1])},
                   compiled(A, acc.triton_us, acc.busy_us))


class _Rows:
    """The kernel pass's accumulators over the GPU events of the steps: by kernel name, by operator
    (with FLOPs and bytes shared among an op's kernels), GEMM classes, copies by direction, phases."""

    def __init__(self, A: Analysis) -> None:
        self.A = A
        self.precision = A.trace.meta.get("float32_matmul_precision")
        self.op_time: dict[int, float] = defaultdict(float)
        self.op_compute: dict[int, float] = defaultdict(float)  # FLOPs go to an op's compute kernels only
        att = A.att
        op_time, op_compute, compute = self.op_time, self.op_compute, classify.COMPUTE
        for s, o, c, g in zip(att.step, att.op, att.category, A.gpu):
            if s >= 0 and o >= 0:
                dur = g.dur
                op_time[o] += dur
                if c in compute:
                    op_compute[o] += dur
        self.names: dict[str, dict[str, Any]] = {}
        self.ops: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.gemms: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.memcpy: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.phases: dict[str, float] = defaultdict(float)
        self.triton_us = 0.0
        self.busy_us = 0.0
        self._add_all()

    def _add_all(self) -> None:
        """Every GPU event of the steps, in order: one loop, the sums added in the events' order. What an event
        adds to (its kernel name's row, its phase, its operator's row and GEMM class, its share of the op's
        FLOPs and bytes) is worked out once per kind of event: a large trace has hundreds of thousands of events
        and a few hundred kinds (a kernel name, category and phase launched by one operator name and arguments,
        its cost: the cost of no op is None; a category is its event's kind for a memcpy or memset, so the kind
        itself is read from the kind's first event)."""
        A = self.A
        att = A.att
        phases = self.phases
        op_time, op_compute = self.op_time, self.op_compute
        busy_us = triton_us = 0.0
        kinds: dict[tuple[Any, ...], _Kind] = {}
        classes: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # see _gemm_row
        costs = A.event_costs()
        for s, g, c, ph, o, cost, cid in zip(att.step, A.gpu, att.category, att.phase, att.op, costs, map(id, costs)):
            if s < 0:
                continue
            dur, name = g.dur, g.name
            kd = kinds.get((name, c, ph, cid))
            if kd is None:
                kd = kinds[(name, c, ph, cid)] = self._kind(name, g.kind, c, ph, o, cost, classes)
            k, phase, triton, copy, row, flops, nbytes, gemm, n = kd
            n[0] += 1  # (the events of a kind counted once, each row's count added from its kinds' at the end)
            busy_us += dur
            k["time_us"] += dur
            phases[phase] += dur
            if triton:
                triton_us += dur
            if copy:  # (its row is its direction's)
                row["bytes"] += g.bytes or 0
                row["time_us"] += dur
                continue
            # the operator's row: its FLOPs and bytes shared among its kernels by their time
            f = b = None
            if flops:  # (an event of a compute category whose op has FLOPs)
                t_op = op_compute.get(o)
                fshare = dur / t_op if t_op else 0.0
                if fshare:
                    f = flops * fshare
            if nbytes:
                t_op = op_time[o]  # (every op of a step's event has its time: no key is added to op_time here)
                b = nbytes * (dur / t_op if t_op else 0.0)
            row["time_us"] += dur
            row["calls"].add(o)
            if f:
                row["flops"] += f
                row["counted_us"] += dur
            if b:
                row["bytes"] += b
                row["bytes_us"] += dur
            if gemm is not None:
                gemm["time_us"] += dur
                if f:
                    gemm["flops"] += f
                    gemm["bytes"] += b or 0.0
                    gemm["flops_time_us"] += dur
                shapes = gemm["shapes"]
                shapes[cost.shape] = shapes.get(cost.shape, 0) + 1
        self.busy_us, self.triton_us = busy_us, triton_us
        for k, _, _, copy, row, _, _, gemm, (events,) in kinds.values():
            k["count"] += events
            row["count" if copy else "kernels"] += events
            if gemm is not None:
                gemm["count"] += events

    def _kind(self, name: str, kind: str, c: str, ph: str | None, o: int, cost: Cost | None,
              classes: dict[tuple[Any, ...], tuple[Any, ...]]) -> _Kind:
        """What the events of one kind add to: made at the kind's first event, the rows it opens are opened in
        the events' order."""
        k = self.names.get(name)
        if k is None:
            k = self.names[name] = {"name": classify.short_name(name), "category": c, "count": 0, "time_us": 0.0}
        phase, triton = ph or "unknown", name.startswith("triton_")
        if kind == "memcpy":
            key = classify.memcpy_kind(name)
            m = self.memcpy.get(key)
            if m is None:
                m = self.memcpy[key] = {"direction": key[0], "memory": key[1], "count": 0, "bytes": 0, "time_us": 0.0}
            return k, phase, triton, True, m, None, None, None, [0]
        opname = self.A.trace.ops[o].name if o >= 0 else "(no operator)"
        dtype = cost.dtype if cost else None
        row = self.ops.get((opname, c, dtype))
        if row is None:
            row = self.ops[(opname, c, dtype)] = {
                "op": opname, "category": c, "dtype": dtype, "kernels": 0, "time_us": 0.0,
                "flops": 0.0, "bytes": 0.0, "counted_us": 0.0, "bytes_us": 0.0, "calls": set()}
        if not cost:
            return k, phase, triton, False, row, None, None, None, [0]
        gemm = _gemm_row(self.gemms, name, c, cost.dtype, cost.gemm, self.precision, classes) \
            if cost.gemm and c in ("gemm", "attention") else None
        return k, phase, triton, False, row, cost.flops if c in classify.COMPUTE else None, cost.bytes, gemm, [0]


# What the events of one kind add to: their kernel name's row, phase, whether a Triton kernel, whether a memcpy,
# their row (a memcpy's direction's, else their operator's), their operator's FLOPs (a compute category) and
# bytes, their GEMM class's row, and how many they are (counted in the loop, added to the rows' counts after)
_Kind = Tuple[Dict[str, Any], str, bool, bool, Dict[str, Any], Optional[float], Optional[float],
              Optional[Dict[str, Any]], List[int]]


def _finish_op(r: dict[str, Any], n: int) -> OpRow:
    """An operator row per step, with its achieved TFLOP/s and GB/s over the time its FLOPs and bytes ran."""
    flops, nbytes, ft, bt = r["flops"] / n, r["bytes"] / n, r["counted_us"], r["bytes_us"]
    return OpRow(op=r["op"], category=r["category"], dtype=r["dtype"], calls_per_step=round(len(r["calls"]) / n, 2),
                 kernels_per_step=round(r["kernels"] / n, 2),
                 time_ms_per_step=_ms(r["time_us"] / n), flops_per_step=flops, bytes_per_step=nbytes,
                 tflops=round(flops * n / (ft * 1e-6) / 1e12, 2) if ft and flops else None,
                 gbps=round(nbytes * n / (bt * 1e-6) / 1e9, 1) if bt and nbytes else None)


def _finish_memcpy(m: dict[str, Any], n: int) -> MemcpyRow:
    t_us = m["time_us"]
    return MemcpyRow(direction=m["direction"], memory=m["memory"], count=m["count"], bytes=m["bytes"],
                     time_ms_per_step=_ms(t_us / n), bytes_per_step=int(m["bytes"] / n),
                     gbps=round(m["bytes"] / t_us / 1e3, 2) if t_us and m["bytes"] else None)


def compiled(A: Analysis, triton_us: float, busy_us: float) -> Compiled:
    """torch.compile in the trace: compiled regions entered per step (more than one per model call
    means graph breaks), and compilation inside the profiled steps (recompiles)."""
    n = max(1, len(A.windows))
    starts = [a for _, a, _ in A.windows]
    from bisect import bisect_right
    regions, spans, frames = 0, [], set()
    kinds = {name: _compiled_kind(name) for name in A.op_names()}  # per name: a compiled region, compilation
    # (a trace has millions of ops and a few hundred names: an eager one has none of these, and is not read)
    for o in (A.trace.ops if any(a or b for a, b in kinds.values()) else ()):
        name = o.name
        is_region, is_compile = kinds[name]
        if not (is_region or is_compile):
            continue
        k = bisect_right(starts, o.ts) - 1
        if k < 0 or o.ts >= A.windows[k][2]:
            continue
        if is_region:
            regions += 1
            frames.add(name.rsplit(":", 1)[-1].strip())
        else:
            spans.append((o.ts, o.ts + o.dur))
    from perfstack.profile.timeline import union
    compile_us = sum(e - s for s, e in union(spans))  # nested dynamo-timed ranges count once
    return Compiled(round(100 * triton_us / busy_us, 1) if busy_us else 0.0, round(regions / n, 2), len(frames),
                    round(compile_us / n / 1e3, 3))


def _compiled_kind(name: str) -> tuple[bool, bool]:
    """(a compiled region, compilation) for an operator's name."""
    return name.startswith("Torch-Compiled Region"), "(dynamo_timed)" in name or \
        name.startswith(("_compile.compile_inner", "compile_inner"))


def _gemm_row(gemms: dict[tuple[Any, ...], dict[str, Any]], name: str, cat: str, dtype: str | None,
              shape: tuple[int, int, int, int], precision: str | None,
              classes: dict[tuple[Any, ...], tuple[Any, ...]]) -> dict[str, Any]:
    """The row of a GEMM kernel's class (opened at its first kernel); ``classes``: the class of each kernel name,
    dtype, shape and category, found once."""
    key = classes.get((name, dtype, shape, cat))
    if key is None:
        tc = classify.tensor_cores(name, dtype, precision)
        key = classes[(name, dtype, shape, cat)] = (dtype or "?", tc, bool(classify.misaligned(shape, dtype)),
                                                    classify.is_gemv(shape), cat)
    row = gemms.get(key)
    if row is None:
        _, tc, bad, gemv, _ = key
        row = gemms[key] = {"dtype": dtype, "tensor_cores": tc, "misaligned": bad, "gemv": gemv, "category": cat,
                            "count": 0, "time_us": 0.0, "flops": 0.0, "bytes": 0.0, "flops_time_us": 0.0, "shapes": {}}
    return row


def _finish_gemms(gemms: dict[tuple[Any, ...], dict[str, Any]], n: int) -> list[GemmRow]:
    """The GEMM classes per step, by time, with their achieved TFLOP/s and GB/s and their commonest shapes."""
    out = []
    for row in gemms.values():
        ft, flops, nbytes = row["flops_time_us"], row["flops"] / n, row["bytes"] / n
        out.append(GemmRow(dtype=row["dtype"], tensor_cores=row["tensor_cores"], misaligned=row["misaligned"],
                           gemv=row["gemv"], category=row["category"],
                           shapes=dict(sorted(row["shapes"].items(), key=lambda kv: -kv[1])[:6]),
                           time_ms_per_step=_ms(row["time_us"] / n), flops_per_step=flops, bytes_per_step=nbytes,
                           tflops=round(flops * n / (ft * 1e-6) / 1e12, 2) if ft else None,
                           gbps=round(nbytes * n / (ft * 1e-6) / 1e9, 1) if ft and nbytes else None,
                           count_per_step=round(row["count"] / n, 2)))
    out.sort(key=lambda r: -r.time_ms_per_step)
    return out


PEAK_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "int8": "int8"}


def peak_for(spec: GpuSpec | None, dtype: str | None, tensor_cores: bool | None) -> float | None:
    if spec is None or not dtype:
        return None
    if dtype == "fp32":
        return spec.peak_tflops("tf32" if tensor_cores else "fp32")
    d = PEAK_DTYPE.get(dtype)
    return spec.peak_tflops(d) if d else None


def against_peaks(gemms: list[GemmRow], ops: list[OpRow], ops_all: list[OpRow],
                  spec: GpuSpec | None) -> tuple[list[GemmRow], list[OpRow], list[KernelClass]]:
    """The efficiency pass: GEMM and operator rows with their achieved figures against the SKU's peaks
    (new rows; the kernel pass's are left as they are), and ``kernel_classes`` for the HTML roofline."""
    hbm = spec.hbm_tbps * 1e3 if spec and spec.hbm_tbps else None  # GB/s
    gemms = [_gemm_peaks(g, spec, hbm) for g in gemms]
    classes = []
    for g in gemms:
        label = f"{g.category.upper() if g.category != 'gemm' else 'GEMM'} {g.dtype or '?'} " + \
                {True: "Tensor Cores", False: "no Tensor Cores", None: "TC ?"}[g.tensor_cores]
        label += " GEMV" if g.gemv else " misaligned" if g.misaligned else ""
        classes.append(KernelClass(name=label, time_ms=g.time_ms_per_step, flops=g.flops_per_step or None,
                                   bytes=g.bytes_per_step or None, tflops=g.tflops,
                                   peak_tflops=g.peak_tflops, gemm=True))
    by_cat: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in ops_all:
        if r.category in ("gemm",):
            continue
        d = by_cat[r.category]
        d["time_ms"] += r.time_ms_per_step
        d["flops"] += r.flops_per_step
        d["bytes"] += r.bytes_per_step
    for cat, d in by_cat.items():
        t = d["time_ms"]
        classes.append(KernelClass(name=cat, time_ms=round(t, 4), flops=d["flops"] or None, bytes=d["bytes"] or None,
                                   tflops=round(d["flops"] / (t * 1e-3) / 1e12, 2) if d["flops"] and t else None,
                                   gbps=round(d["bytes"] / (t * 1e-3) / 1e9, 1) if d["bytes"] and t else None,
                                   gemm=False))
    return gemms, [_op_peaks(r, spec, hbm) for r in ops], classes


def _gemm_peaks(g: GemmRow, spec: GpuSpec | None, hbm: float | None) -> GemmRow:
    peak = peak_for(spec, g.dtype, g.tensor_cores)
    return dataclasses.replace(g, peak_tflops=peak, pct_of_peak=round(100 * g.tflops / peak, 1) if peak and g.tflops else None,
                   pct_of_hbm=round(100 * g.gbps / hbm, 1) if hbm and g.gbps else None, peaks=True)


def _op_peaks(r: OpRow, spec: GpuSpec | None, hbm: float | None) -> OpRow:
    """An operator row with its share of the peaks and what bounds it (by arithmetic intensity
    against the ridge point, where both are known)."""
    peak = peak_for(spec, r.dtype, True) if r.tflops else None
    bound: OpBound | None = None
    if r.flops_per_step and r.bytes_per_step and peak and hbm:
        ridge = peak * 1e3 / hbm  # FLOP per byte where compute and memory take equally long
        bound = "compute" if r.flops_per_step / r.bytes_per_step >= ridge else "memory"
    elif r.bytes_per_step and not r.flops_per_step:
        bound = "memory"
    return dataclasses.replace(r, pct_of_peak=round(100 * r.tflops / peak, 1) if peak and r.tflops else None,
                               pct_of_hbm=round(100 * r.gbps / hbm, 1) if hbm and r.gbps else None, bound=bound)


def mfu(p: Section, ops_all: list[OpRow], spec: GpuSpec | None,
        model_flops: float | None) -> tuple[float, float | None, Mfu | None]:
    """GEMM-class FLOPs per step, the TFLOP/s they make over the unprofiled step (the section's overhead
    says which), and MFU."""
    comp = [r for r in ops_all if r.category in classify.COMPUTE and r.flops_per_step]
    flops = sum(r.flops_per_step for r in comp)
    main = max(comp, key=lambda r: r.time_ms_per_step, default=None)
    peak = peak_for(spec, main.dtype, True) if main else None
    if main and main.dtype == "fp32" and spec:
        peak = spec.peak_tflops("tf32")  # what fp32 math can reach on Tensor Cores
    o = p.overhead or Overhead()
    step_s = (o.step_ms or 0.0) / 1e3
    m = None
    cats = sorted({r.category for r in comp})
    if model_flops and peak and step_s:
        m = Mfu(round(model_flops / step_s / (peak * 1e12), 4), "--model-flops-per-step", peak,
                main.dtype if main else None)
    elif main and flops and peak and step_s:
        m = Mfu(round(flops / step_s / (peak * 1e12), 4),
                f"FLOPs of {', '.join(cats)} operators from the trace's shapes, over the "
                f"{'measured' if o.method == 'measured' else 'estimated'} step without "
                "the profiler", peak, main.dtype)
    return flops, round(flops / step_s / 1e12, 2) if step_s and flops else None, m
