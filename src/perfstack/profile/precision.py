"""GEMMs and convolutions slower than their dtype and shapes allow: fp32 convolutions, FP32 GEMMs without
Tensor Cores, GEMMs whose dimensions are not multiples of the Tensor Cores' tile.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from perfstack.profile import classify
from perfstack.profile.waste import BF16_PRACTICAL, CONV_PRACTICAL, FP32_PRACTICAL, TF32_PRACTICAL, Waste
from perfstack.records.profile import Fp32Conv, Fp32Matmul, GemmMisaligned, MisalignedGroup

if TYPE_CHECKING:
    from perfstack.profile.analysis import Analysis
    from perfstack.specs.table import GpuSpec


def fp32_conv(A: Analysis, spec: GpuSpec | None) -> Waste | None:
    """Convolutions in fp32 (TF32 or not): bf16 autocast with channels_last runs them on the
    Tensor Cores at the 16-bit rate and halves the bytes of the element-wise work around them."""
    peak = spec.peak_tflops("bf16") if spec else None
    if not peak:
        return None
    gpu, att, costs = A.gpu, A.att, A.event_costs()
    conv, layout = [], []
    flops_total = conv_t = 0.0
    for i in A.in_steps("conv"):
        g, c = gpu[i], costs[i]
        if classify.LAYOUT_KERNEL.search(g.name):
            layout.append(i)
        elif c and c.dtype == "fp32":
            conv.append(i)
            conv_t += g.dur
            if c.flops:
                flops_total += c.flops * g.dur / max(1e-9, A.op_time(att.op[i]))
    elem = [i for i in A.in_steps("elementwise") if (c := costs[i]) and c.dtype == "fp32" and att.phase[i] != "optimizer"]
    if not conv or not flops_total:
        return None
    bf16 = flops_total / (peak * CONV_PRACTICAL * 1e12) * 1e6
    if bf16 >= conv_t:
        return None
    w = Waste("fp32-conv")
    for i in conv:
        w.new_dur[i] = gpu[i].dur * bf16 / conv_t
    for i in elem:
        w.new_dur[i] = gpu[i].dur * 0.5
    for i in layout:
        w.new_dur[i] = 0.0
    n = max(1, len(A.windows))
    tc = sum(1 for i in conv if classify.tensor_cores(gpu[i].name, "fp32", None))
    w.evidence = Fp32Conv(conv_ms=round(conv_t / n / 1e3, 3), tflops=round(flops_total / (conv_t * 1e-6) / 1e12, 1),
                          bf16_ms=round(bf16 / n / 1e3, 3), tf32_kernels_pct=round(100 * tc / len(conv)),
                          elementwise_fp32_ms=round(sum(gpu[i].dur for i in elem) / n / 1e3, 3),
                          layout_ms=round(sum(gpu[i].dur for i in layout) / n / 1e3, 3))
    return w


def fp32_matmul(A: Analysis, spec: GpuSpec | None) -> Waste | None:
    """FP32 GEMMs on the CUDA cores: TF32 runs them on the Tensor Cores."""
    gpu, att = A.gpu, A.att
    precision = A.trace.meta.get("float32_matmul_precision")
    idx, costs = [], A.event_costs()
    for i in A.in_steps("gemm"):
        c = costs[i]  # (None where no op launched it)
        if c and c.dtype == "fp32" and c.gemm and not classify.is_gemv(c.gemm):
            tc = classify.tensor_cores(gpu[i].name, "fp32", precision)
            if tc is False or (tc is None and precision == "highest"):
                idx.append(i)
    if not idx:
        return None
    tf32, fp32 = (spec.peak_tflops("tf32"), spec.peak_tflops("fp32")) if spec else (None, None)
    if spec and tf32 and fp32:
        speedup, src = (tf32 * TF32_PRACTICAL) / (fp32 * FP32_PRACTICAL), \
            f"{spec.name}: TF32 {tf32:g} vs FP32 {fp32:g} TFLOP/s dense, practical 72%/77%"
    else:
        speedup, src = 4.0, "GPU not in the spec table: a conservative 4×"
    w = Waste("fp32-matmul", {i: gpu[i].dur / speedup for i in idx})
    n = max(1, len(A.windows))
    t = sum(gpu[i].dur for i in idx)
    fl = sum((A.known_cost(att.op[i]).flops or 0.0) * gpu[i].dur / max(1e-9, A.op_time(att.op[i])) for i in idx)
    w.evidence = Fp32Matmul(kernels_per_step=round(len(idx) / n, 1), time_ms=round(t / n / 1e3, 3),
                            tflops=round(fl / (t * 1e-6) / 1e12, 1) if t else None, speedup=round(speedup, 1),
                            source=src)
    return w


def gemm_misaligned(A: Analysis, spec: GpuSpec | None) -> Waste | None:
    """GEMMs whose M, N or K breaks the Tensor-Core alignment (GEMVs excluded: memory-bound anyway),
    brought to the throughput aligned GEMMs of the same dtype reach in this trace (else 80% of peak)."""
    gpu, att, costs = A.gpu, A.att, A.event_costs()
    bad: dict[str, list[tuple[int, float]]] = defaultdict(list)  # per dtype: its misaligned kernels, their FLOPs
    good_rate: dict[str, float] = {}
    kinds: dict[int, tuple[bool, bool]] = {}  # per cost (a GEMM's shape and dtype): misaligned, a GEMV
    for i in A.in_steps("gemm"):
        g, c = gpu[i], costs[i]  # (None where no op launched it)
        if not c or not c.gemm or not c.flops:
            continue
        k = kinds.get(id(c))
        if k is None:
            k = kinds[id(c)] = bool(classify.misaligned(c.gemm, c.dtype)), classify.is_gemv(c.gemm)
        share = c.flops * g.dur / max(1e-9, A.op_time(att.op[i]))
        if k[0]:
            bad[c.dtype or "?"].append((i, share))
        elif share >= 1e9 and not k[1]:
            good_rate[c.dtype or "?"] = max(good_rate.get(c.dtype or "?", 0.0), share / g.dur)  # FLOP/µs
    if not bad:
        return None
    w = Waste("gemm-misaligned")
    parts = []
    for dt, idx in bad.items():
        rate = good_rate.get(dt)
        src = "aligned GEMMs in this trace"
        if not rate:
            d = {"fp32": "tf32"}.get(dt, dt)
            peak = spec.peak_tflops(d) if spec and d in ("bf16", "fp16", "fp8", "int8", "tf32") else None
            frac = TF32_PRACTICAL if d == "tf32" else BF16_PRACTICAL
            if not peak:
                continue
            rate, src = peak * frac * 1e6, f"{frac:.0%} of the {d} peak"
        t = fl = 0.0
        shapes: dict[str, int] = defaultdict(int)
        for i, f in idx:
            w.new_dur[i] = min(gpu[i].dur, f / rate)
            t += gpu[i].dur
            fl += f
            shapes[costs[i].shape] += 1  # type: ignore[union-attr]
        parts.append(MisalignedGroup(dtype=dt, time_ms=round(t / max(1, len(A.windows)) / 1e3, 3),
                                     tflops=round(fl / (t * 1e-6) / 1e12, 1),
                                     expect_tflops=round(rate / 1e6, 1), source=src,
                                     shapes=[s for s, _ in sorted(shapes.items(), key=lambda kv: -kv[1])[:3]]))
    w.evidence = GemmMisaligned(parts)
    return w
