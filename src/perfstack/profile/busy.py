"""What a busy GPU wastes, and what each fix would leave: memory-bound element-wise chains that fusion
collapses (``fusion``), the fp32 loss over a large vocabulary, attention written as matmul + softmax + matmul,
fp32 convolutions, FP32 GEMMs without Tensor Cores and misaligned GEMMs (``precision``), pageable copies,
unfused optimizers. Each detector returns a ``waste.Waste``.
"""

from __future__ import annotations

import re
from itertools import compress, count, repeat
from operator import and_, or_
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from perfstack.profile import classify
from perfstack.profile.attribute import ATTN_MATH, LOSS, launch_steps
from perfstack.profile.fusion import compile_pads, fusion
from perfstack.profile.precision import fp32_conv, fp32_matmul, gemm_misaligned
from perfstack.profile.waste import FLASH_PRACTICAL, Waste, hbm_gbps
from perfstack.records.profile import AttentionUnfused, LargeVocabLoss, OptimizerNotFused, PageableMemcpy

if TYPE_CHECKING:
    from perfstack.profile.analysis import Analysis
    from perfstack.profile.flops import Cost
    from perfstack.profile.trace import CpuEvent
    from perfstack.specs.table import GpuSpec

VOCAB_MIN = 16384
PAGEABLE_FUSED = re.compile(r"_fused_|fused_adam|FusedAdam|_fused_sgd", re.I)


def detect(A: Analysis, spec: GpuSpec | None, each: Callable[[Waste], None] | None = None) -> list[Waste]:
    """What the kernels do slowly, the fusion finding first. ``each`` is told of each waste as soon as it is
    final. The fusion detector runs last: it takes the longest, and its finding is final only once
    compile_pads has added what the others found (their fixes are replayed meanwhile)."""
    out = []
    for fn in (vocab_loss, attention, fp32_conv, fp32_matmul, gemm_misaligned, pageable_memcpy, optimizer):
        w = fn(A, spec)
        if w is not None and w.new_dur:
            out.append(w)
            if each is not None:
                each(w)
    fused = fusion(A, spec)
    if fused is None or not fused.new_dur:
        return out
    out = compile_pads([fused, *out], A)
    if each is not None:
        each(fused)
    return out


def vocab_loss(A: Analysis, spec: GpuSpec | None) -> Waste | None:
    """The loss over a large vocabulary in fp32: logits upcast, log-softmax and its gradient each
    stream the N×V logits through HBM; a fused (or chunked) loss reads them once and writes the
    gradient once, in 16-bit."""
    bw = hbm_gbps(spec)
    if not bw:
        return None
    gpu, att, flags, costs = A.gpu, A.att, A.att.ops.flags, A.event_costs()
    vocab, members, rows, fp32 = 0, [], 0, False
    for i in sorted(A.in_steps("elementwise") + A.in_steps("copy")):
        o, c = att.op[i], costs[i]
        if o < 0:
            continue
        if not c or not c.last_dim or c.last_dim < VOCAB_MIN or not c.big:
            continue
        if not (flags[o] & LOSS) and att.category[i] != "copy":
            continue
        members.append(i)
        if flags[o] & LOSS and c.last_dim > vocab:
            vocab = c.last_dim
            rows = int(c.big / classify.itemsize(c.dtype) / c.last_dim)
            fp32 = fp32 or c.dtype == "fp32"
    members = [i for i in members if A.known_cost(att.op[i]).last_dim == vocab]
    if not vocab or not members:
        return None
    n = max(1, len(A.windows))
    t = sum(gpu[i].dur for i in members)
    fused = 2 * rows * vocab * 2 / (bw * 1e3) * n  # read the 16-bit logits once, write their gradient once
    if fused >= t:
        return None
    w = Waste("large-vocab-loss")
    per_step = fused / n
    w.new_dur.update(_one_per_step(members, att.step, per_step))
    w.evidence = LargeVocabLoss(vocab=vocab, rows=rows, fp32=fp32, kernels_per_step=round(len(members) / n, 1),
                                time_ms=round(t / n / 1e3, 3),
                                fused_ms=round(per_step / 1e3, 3))
    return w


def _scores_like(shape: Sequence[int] | None) -> bool:
    return shape is not None and len(shape) >= 3 and shape[-1] == shape[-2] and shape[-1] >= 128


def attention(A: Analysis, spec: GpuSpec | None) -> Waste | None:
    """Attention computed as matmul → mask → softmax → matmul (by hand, or SDPA's math path): it
    writes and reads the S×S score matrix several times; a flash kernel never materializes it."""
    peak = spec.peak_tflops("bf16") if spec else None
    if not peak:
        return None
    region, gemm_flops, math_path, masked = _attention_region(A)
    if len(region) < 4 or not gemm_flops:
        return None
    gpu = A.gpu
    n = max(1, len(A.windows))
    t = sum(gpu[i].dur for i in region)
    # a mask over the scores is taken for a causal one: a flash kernel skips the masked half
    flash = gemm_flops * (0.5 if masked else 1.0) / (peak * FLASH_PRACTICAL * 1e12) * 1e6
    if flash >= t:
        return None
    w = Waste("attention-unfused")
    scale = flash / t
    for i in region:
        w.new_dur[i] = gpu[i].dur * scale
    w.evidence = AttentionUnfused(math_path=math_path, masked=masked, kernels_per_step=round(len(region) / n, 1),
                                  time_ms=round(t / n / 1e3, 3),
                                  flash_ms=round(flash / n / 1e3, 3), tflops=round(gemm_flops / (t * 1e-6) / 1e12, 1))
    return w


MASKS = ("aten::masked_fill", "aten::masked_fill_", "aten::where", "aten::tril", "aten::triu")


def _attention_region(A: Analysis) -> tuple[list[int], float, bool, bool]:
    """The kernels of unfused attention in the steps (its score GEMMs, and what reads or writes the
    scores), the FLOPs of those GEMMs, whether SDPA's math path ran, and whether the scores were masked."""
    att, flags, costs = A.att, A.att.ops.flags, A.event_costs()
    region, gemm_flops = [], 0.0
    math_path = masked = False
    # Only an event of SDPA's math path, or one whose cost (its operator's name and arguments) makes or reads the
    # scores, can be in the region: the scores are looked for once per distinct cost (a large trace has hundreds
    # of thousands of events and a few hundred costs), and the loop below visits those events alone
    scores = {id(c): _scores_cost(A, i, c) for i, c in _cost_events(costs)}
    in_math = map(and_, map(flags.__getitem__, att.op), repeat(ATTN_MATH)) if flags else repeat(0)
    gpu = A.gpu
    for i in compress(count(), map(or_, map(scores.__getitem__, map(id, costs)), in_math)):
        s, o, g, cat, ph, c = att.step[i], att.op[i], gpu[i], att.category[i], att.phase[i], costs[i]
        if s < 0 or o < 0 or g.kind != "kernel" or ph == "optimizer":
            continue
        if cat == "attention" and not flags[o] & ATTN_MATH:
            continue  # a fused attention kernel already
        hit = bool(flags[o] & ATTN_MATH)
        math_path = math_path or hit
        if c and c.gemm:
            if _scores_gemm(c.gemm):
                hit = True
                gemm_flops += (c.flops or 0) * (g.dur / max(1e-9, A.op_time(o)))
        elif not hit and (op := A.trace.ops[o]).dims:
            hit = scores[id(c)]
            masked = masked or (hit and op.name in MASKS)
        if hit:
            region.append(i)
    return region, gemm_flops, math_path, masked


def _cost_events(costs: list[Cost | None]) -> Iterable[tuple[int, Cost | None]]:
    """Each distinct cost (by identity) with an event that has it (the last)."""
    return ((i, costs[i]) for i in dict(zip(map(id, costs), count())).values())


def _scores_cost(A: Analysis, i: int, c: Cost | None) -> bool:
    """Whether GPU event ``i``'s cost makes or reads attention scores: a score GEMM, or (not a GEMM) an operator
    with a tensor shaped as scores. Events that share a cost share their operator's name and arguments."""
    if c and c.gemm:
        return _scores_gemm(c.gemm)
    o = A.att.op[i]
    dims = A.trace.ops[o].dims if o >= 0 else None
    return bool(dims) and any(_scores_like(classify.dims(d)) for d in dims or ())


def _scores_gemm(gemm: tuple[int, int, int, int]) -> bool:
    """A batched GEMM that makes the S×S scores (Q·Kᵀ: M = N = S, K = head dim) or reads them (P·V)."""
    b, m, nn, k = gemm
    return (m == nn and m >= 128 and k <= 256 and b > 1) or (k >= 128 and k == m and nn <= 256 and b > 1) or \
        (k >= 128 and k == nn and m <= 256 and b > 1)


def pageable_memcpy(A: Analysis, spec: GpuSpec | None) -> Waste | None:
    """Host↔device copies from pageable memory: pinned memory runs them at the PCIe rate."""
    gpu = A.gpu
    copies = [gpu[i] for i in A.in_steps("memcpy")]
    pinned_rates = [g.bytes / g.dur for g in copies if g.bytes
                    and g.dur > 0 and classify.memcpy_kind(g.name)[1] == "Pinned" and g.bytes >= 1 << 20]
    if pinned_rates:
        pinned, src = max(pinned_rates) / 1e3, "pinned copies in this trace"  # GB/s
    elif spec and spec.pcie_gen and spec.pcie_lanes:
        from perfstack.specs import pcie_practical_gbps
        pinned = pcie_practical_gbps(spec.pcie_gen, spec.pcie_lanes)
        src = f"PCIe Gen{spec.pcie_gen} x{spec.pcie_lanes} practical pinned"
    else:
        pinned, src = 25.0, "PCIe Gen4 x16 practical pinned (GPU not in the spec table)"
    w = Waste("pageable-memcpy")
    t = b = 0.0
    for i in A.in_steps("memcpy"):
        g = gpu[i]
        if classify.memcpy_kind(g.name)[1] == "Pageable" and g.bytes:
            new = g.bytes / (pinned * 1e3)
            if new < g.dur:
                w.new_dur[i] = new
                t += g.dur
                b += g.bytes
    if not w.new_dur:
        return None
    n = max(1, len(A.windows))
    w.evidence = PageableMemcpy(time_ms=round(t / n / 1e3, 3), bytes_per_step=int(b / n), gbps=round(b / t / 1e3, 1),
                                pinned_gbps=round(pinned, 1), source=src)
    return w


def optimizer(A: Analysis, spec: GpuSpec | None) -> Waste | None:
    """An optimizer step that is not fused: foreach (one kernel per op per tensor group) or a
    per-parameter loop. A fused Adam(W) reads and writes parameter, moments and gradient once."""
    bw = hbm_gbps(spec)
    if not bw:
        return None
    gpu, att, ops = A.gpu, A.att, A.trace.ops
    idx = [i for i in A.in_steps("optimizer") if gpu[i].kind == "kernel"]
    if not idx:
        return None
    opt_ops = {att.op[i] for i in idx if att.op[i] >= 0}
    if any(PAGEABLE_FUSED.search(ops[o].name) for o in opt_ops):
        return None
    params = _params_updated([ops[o] for o in sorted(opt_ops)], len(A.windows)) or _params_accumulated(A)
    if not params:
        return None
    n = max(1, len(A.windows))
    fused = 28.0 * params / (bw * 1e3)  # fp32 param r/w, grad r, two moments r/w: 7 × 4 bytes
    t = sum(gpu[i].dur for i in idx) / n
    if fused >= t:
        return None
    w = Waste("optimizer-not-fused")
    w.new_dur.update(_one_per_step(idx, att.step, fused))
    w.merged = {i for i, d in w.new_dur.items() if d == 0.0}  # their launches go with them
    w.evidence = OptimizerNotFused(round(len(idx) / n, 1), round(t / 1e3, 3), round(fused / 1e3, 3), params)
    return w


def _params_updated(opt_ops: list[CpuEvent], n_steps: int) -> int:
    """The parameters an unfused optimizer updates per step, from its operators' shapes: a foreach op's
    tensor list holds them all; a per-parameter loop runs the same few operators once per parameter
    (Adam: lerp_, mul_, addcmul_, sqrt, div, add_, addcdiv_), each with that parameter's shape first, so
    each operator's shapes add up to the parameters once for every time it runs per parameter (an SGD's
    add_ twice), counted against the operator that runs fewest times."""
    for op in opt_ops:
        if op.name.startswith("aten::_foreach_") and op.dims and isinstance(op.dims[0], list):
            params = sum(classify.numel(s) for s in op.dims[0] if classify.dims(s))
            if params:
                return params
    calls: dict[str, int] = {}
    numel: dict[str, int] = {}
    for op in opt_ops:
        shape = classify.dims(op.dims[0]) if op.dims else None
        if shape:
            calls[op.name] = calls.get(op.name, 0) + 1
            numel[op.name] = numel.get(op.name, 0) + classify.numel(shape)
    least = min(calls.values(), default=0)
    if least < 8 * max(1, n_steps):  # not a loop over parameters (or too few of them to say)
        return 0
    return max(numel[k] // max(1, round(calls[k] / least)) for k in calls) // max(1, n_steps)


ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"


def _params_accumulated(A: Analysis) -> int:
    """The parameters whose gradients the backward accumulates, per step: each AccumulateGrad node's input is
    one parameter's gradient. (Where the foreach ops' tensor lists are recorded without shapes.)"""
    if ACCUMULATE_GRAD not in A.op_names():
        return 0
    nodes = [(op.ts, shape) for op in A.trace.ops
             if op.name == ACCUMULATE_GRAD and op.dims and (shape := classify.dims(op.dims[0]))]
    steps = launch_steps([ts for ts, _ in nodes], A.windows)
    total = sum(classify.numel(shape) for (_, shape), k in zip(nodes, steps) if k >= 0)
    return total // max(1, len(A.windows))


def _one_per_step(events: Iterable[int], step: Sequence[int], fused_us: float) -> dict[int, float]:
    """New durations where one fused kernel per step replaces ``events``: the first of each step takes the fused
    kernel's time, the others go."""
    out: dict[int, float] = {}
    seen: set[int] = set()
    for i in events:
        if step[i] not in seen:
            seen.add(step[i])
            out[i] = fused_us
        else:
            out[i] = 0.0
    return out
