"""Where the GPU's busy time goes and how well it is spent: per kernel, per operator (FLOPs and
bytes from the operator's recorded shapes, achieved TFLOP/s and GB/s, placed on the roofline
against the SKU's peaks), GEMMs by dtype and Tensor-Core use, copies by direction, GPU time by
phase (forward, backward, optimizer), compiled code (Triton kernels, compiled regions)."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from perfstack.profile import classify

if TYPE_CHECKING:
    from perfstack.profile.analyze import Analysis
    from perfstack.profile.flops import Cost
    from perfstack.profile.trace import GpuEvent
    from perfstack.specs.table import GpuSpec

HBM_PRACTICAL = 0.90  # specs.practical hbm_copy: a streaming kernel reaches ~90% of the HBM peak


def _ms(us: float) -> float:
    return round(us / 1e3, 4)


def kernels(A: Analysis) -> dict[str, Any]:
    """The per-kernel and per-operator pass: top_kernels, ops (and ``_ops_all``, every row, for the
    summary's MFU and roofline), gemms, memcpy, phases_ms and compiled, per step."""
    gpu, att = A.gpu, A.att
    n = max(1, len(A.windows))
    acc = _Rows(A)
    for i, g in enumerate(gpu):
        if att.step[i] >= 0:
            acc.add(i, g)
    top = sorted(acc.names.values(), key=lambda k: -k["time_us"])[:15]
    for k in top:
        k["time_ms_per_step"] = _ms(k.pop("time_us") / n)
    rows = sorted((_finish_op(r, n) for r in acc.ops.values()), key=lambda r: -r["time_ms_per_step"])
    return {"top_kernels": top, "ops": rows[:40], "_ops_all": rows, "gemms": _finish_gemms(acc.gemms, n),
            "memcpy": [_finish_memcpy(m, n) for m in acc.memcpy.values()],
            "phases_ms": {k: _ms(v / n) for k, v in sorted(acc.phases.items(), key=lambda kv: -kv[1])},
            "compiled": compiled(A, acc.triton_us, acc.busy_us)}


class _Rows:
    """The kernel pass's accumulators over the GPU events of the steps: by kernel name, by operator
    (with FLOPs and bytes shared among an op's kernels), GEMM classes, copies by direction, phases."""

    def __init__(self, A: Analysis) -> None:
        self.A = A
        self.precision = A.trace.meta.get("float32_matmul_precision")
        self.op_time: dict[int, float] = defaultdict(float)
        self.op_compute: dict[int, float] = defaultdict(float)  # FLOPs go to an op's compute kernels only
        att = A.att
        for i, g in enumerate(A.gpu):
            if att.step[i] >= 0 and att.op[i] >= 0:
                self.op_time[att.op[i]] += g.dur
                if att.category[i] in classify.COMPUTE:
                    self.op_compute[att.op[i]] += g.dur
        self.names: dict[str, dict[str, Any]] = {}
        self.ops: dict[tuple, dict[str, Any]] = {}
        self.gemms: dict[tuple, dict[str, Any]] = {}
        self.memcpy: dict[tuple, dict[str, Any]] = {}
        self.phases: dict[str, float] = defaultdict(float)
        self.triton_us = 0.0
        self.busy_us = 0.0

    def add(self, i: int, g: GpuEvent) -> None:
        att = self.A.att
        c = att.category[i]
        self.busy_us += g.dur
        k = self.names.get(g.name)
        if k is None:
            k = self.names[g.name] = {"name": classify.short_name(g.name), "category": c, "count": 0, "time_us": 0.0}
        k["count"] += 1
        k["time_us"] += g.dur
        self.phases[att.phase[i] or "unknown"] += g.dur
        if g.name.startswith("triton_"):
            self.triton_us += g.dur
        if g.kind == "memcpy":
            key = classify.memcpy_kind(g.name)
            m = self.memcpy.setdefault(key, {"direction": key[0], "memory": key[1], "count": 0, "bytes": 0,
                                             "time_us": 0.0})
            m["count"] += 1
            m["bytes"] += g.bytes or 0
            m["time_us"] += g.dur
            return
        self._add_op(i, g, c)

    def _add_op(self, i: int, g: GpuEvent, c: str) -> None:
        o = self.A.att.op[i]
        cost = self.A.cost(o)
        share = g.dur / self.op_time[o] if o >= 0 and self.op_time[o] else 0.0
        fshare = g.dur / self.op_compute[o] if c in classify.COMPUTE and self.op_compute.get(o) else 0.0
        f = cost.flops * fshare if cost and cost.flops and fshare else None
        b = cost.bytes * share if cost and cost.bytes else None
        opname = self.A.trace.ops[o].name if o >= 0 else "(no operator)"
        dtype = cost.dtype if cost else None
        row = self.ops.setdefault((opname, c, dtype), {
            "op": opname, "category": c, "dtype": dtype, "kernels": 0, "time_us": 0.0,
            "flops": 0.0, "bytes": 0.0, "counted_us": 0.0, "bytes_us": 0.0, "calls": set()})
        row["kernels"] += 1
        row["time_us"] += g.dur
        row["calls"].add(o)
        if f:
            row["flops"] += f
            row["counted_us"] += g.dur
        if b:
            row["bytes"] += b
            row["bytes_us"] += g.dur
        if c in ("gemm", "attention") and cost and cost.gemm:
            _gemm_row(self.gemms, g, c, cost, f, b, self.precision)


def _finish_op(r: dict[str, Any], n: int) -> dict[str, Any]:
    """An operator row per step, with its achieved TFLOP/s and GB/s over the time its FLOPs and bytes ran."""
    t, ft, bt = r.pop("time_us"), r.pop("counted_us"), r.pop("bytes_us")
    r["calls_per_step"] = round(len(r.pop("calls")) / n, 2)
    r["kernels_per_step"] = round(r.pop("kernels") / n, 2)
    r["time_ms_per_step"] = _ms(t / n)
    r["flops_per_step"] = r.pop("flops") / n
    r["bytes_per_step"] = r.pop("bytes") / n
    r["tflops"] = round(r["flops_per_step"] * n / (ft * 1e-6) / 1e12, 2) if ft and r["flops_per_step"] else None
    r["gbps"] = round(r["bytes_per_step"] * n / (bt * 1e-6) / 1e9, 1) if bt and r["bytes_per_step"] else None
    return r


def _finish_memcpy(m: dict[str, Any], n: int) -> dict[str, Any]:
    t_us = m.pop("time_us")
    m["time_ms_per_step"] = _ms(t_us / n)
    m["bytes_per_step"] = int(m["bytes"] / n)
    m["gbps"] = round(m["bytes"] / t_us / 1e3, 2) if t_us and m["bytes"] else None
    return m


def compiled(A: Analysis, triton_us: float, busy_us: float) -> dict[str, Any]:
    """torch.compile in the trace: compiled regions entered per step (more than one per model call
    means graph breaks), and compilation inside the profiled steps (recompiles)."""
    n = max(1, len(A.windows))
    starts = [a for _, a, _ in A.windows]
    from bisect import bisect_right
    regions, spans, frames = 0, [], set()
    for o in A.trace.ops:
        name = o.name
        is_region = name.startswith("Torch-Compiled Region")
        is_compile = "(dynamo_timed)" in name or name.startswith(("_compile.compile_inner", "compile_inner"))
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
    return {"triton_pct": round(100 * triton_us / busy_us, 1) if busy_us else 0.0,
            "regions_per_step": round(regions / n, 2), "distinct_regions": len(frames),
            "compile_ms_per_step": round(compile_us / n / 1e3, 3)}


def _gemm_row(gemms: dict, g: GpuEvent, cat: str, cost: Cost, f: float | None, b: float | None,
              precision: str | None) -> None:
    dtype, shape = cost.dtype, cost.gemm
    if shape is None:
        return
    tc = classify.tensor_cores(g.name, dtype, precision)
    gemv = classify.is_gemv(shape)
    bad = bool(classify.misaligned(shape, dtype))
    key = (dtype or "?", tc, bad, gemv, cat)
    row = gemms.setdefault(key, {"dtype": dtype, "tensor_cores": tc, "misaligned": bad, "gemv": gemv,
                                 "category": cat, "count": 0, "time_us": 0.0, "flops": 0.0, "bytes": 0.0,
                                 "flops_time_us": 0.0, "shapes": {}})
    row["count"] += 1
    row["time_us"] += g.dur
    if f:
        row["flops"] += f
        row["bytes"] += b or 0.0
        row["flops_time_us"] += g.dur
    row["shapes"][cost.shape] = row["shapes"].get(cost.shape, 0) + 1


def _finish_gemms(gemms: dict, n: int) -> list[dict]:
    out = []
    for row in gemms.values():
        t_us, ft = row.pop("time_us"), row.pop("flops_time_us")
        row["time_ms_per_step"] = _ms(t_us / n)
        row["flops_per_step"] = row.pop("flops") / n
        row["bytes_per_step"] = row.pop("bytes") / n
        row["tflops"] = round(row["flops_per_step"] * n / (ft * 1e-6) / 1e12, 2) if ft else None
        row["gbps"] = round(row["bytes_per_step"] * n / (ft * 1e-6) / 1e9, 1) if ft and row["bytes_per_step"] else None
        row["shapes"] = dict(sorted(row["shapes"].items(), key=lambda kv: -kv[1])[:6])
        row["count_per_step"] = round(row.pop("count") / n, 2)
        out.append(row)
    out.sort(key=lambda r: -r["time_ms_per_step"])
    return out


PEAK_DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "int8": "int8"}


def peak_for(spec: GpuSpec | None, dtype: str | None, tensor_cores: bool | None) -> float | None:
    if spec is None or not dtype:
        return None
    if dtype == "fp32":
        return spec.peak_tflops("tf32" if tensor_cores else "fp32")
    d = PEAK_DTYPE.get(dtype)
    return spec.peak_tflops(d) if d else None


def against_peaks(gemms: list[dict[str, Any]], ops: list[dict[str, Any]], ops_all: list[dict[str, Any]],
                  spec: GpuSpec | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The efficiency pass: GEMM and operator rows with their achieved figures against the SKU's peaks
    (new rows; the kernel pass's are left as they are), and ``kernel_classes`` for the HTML roofline."""
    hbm = spec.hbm_tbps * 1e3 if spec and spec.hbm_tbps else None  # GB/s
    gemms = [_gemm_peaks(g, spec, hbm) for g in gemms]
    ops = [_op_peaks(r, spec, hbm) for r in ops]
    classes = []
    for g in gemms:
        label = f"{g['category'].upper() if g['category'] != 'gemm' else 'GEMM'} {g['dtype'] or '?'} " + \
                {True: "Tensor Cores", False: "no Tensor Cores", None: "TC ?"}[g["tensor_cores"]]
        label += " GEMV" if g["gemv"] else " misaligned" if g["misaligned"] else ""
        classes.append({"name": label, "time_ms": g["time_ms_per_step"], "flops": g["flops_per_step"] or None,
                        "bytes": g["bytes_per_step"] or None, "tflops": g["tflops"], "peak_tflops": g["peak_tflops"]})
    by_cat: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in ops_all:
        if r["category"] in ("gemm",):
            continue
        d = by_cat[r["category"]]
        d["time_ms"] += r["time_ms_per_step"]
        d["flops"] += r["flops_per_step"]
        d["bytes"] += r["bytes_per_step"]
    for cat, d in by_cat.items():
        t = d["time_ms"]
        classes.append({"name": cat, "time_ms": round(t, 4), "flops": d["flops"] or None, "bytes": d["bytes"] or None,
                        "tflops": round(d["flops"] / (t * 1e-3) / 1e12, 2) if d["flops"] and t else None,
                        "gbps": round(d["bytes"] / (t * 1e-3) / 1e9, 1) if d["bytes"] and t else None})
    return gemms, ops, classes


def _gemm_peaks(g: dict[str, Any], spec: GpuSpec | None, hbm: float | None) -> dict[str, Any]:
    peak = peak_for(spec, g["dtype"], g["tensor_cores"])
    return {**g, "peak_tflops": peak,
            "pct_of_peak": round(100 * g["tflops"] / peak, 1) if peak and g["tflops"] else None,
            "pct_of_hbm": round(100 * g["gbps"] / hbm, 1) if hbm and g.get("gbps") else None}


def _op_peaks(r: dict[str, Any], spec: GpuSpec | None, hbm: float | None) -> dict[str, Any]:
    """An operator row with its share of the peaks and what bounds it (by arithmetic intensity
    against the ridge point, where both are known)."""
    peak = peak_for(spec, r["dtype"], True) if r["tflops"] else None
    r = {**r, "pct_of_peak": round(100 * r["tflops"] / peak, 1) if peak and r["tflops"] else None,
         "pct_of_hbm": round(100 * r["gbps"] / hbm, 1) if hbm and r["gbps"] else None}
    if r["flops_per_step"] and r["bytes_per_step"] and peak and hbm:
        ridge = peak * 1e3 / hbm  # FLOP per byte where compute and memory take equally long
        r["bound"] = "compute" if r["flops_per_step"] / r["bytes_per_step"] >= ridge else "memory"
    elif r["bytes_per_step"] and not r["flops_per_step"]:
        r["bound"] = "memory"
    return r
