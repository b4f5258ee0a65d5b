"""What a busy GPU wastes, and what each fix would leave: memory-bound element-wise chains that
fusion collapses, the fp32 loss over a large vocabulary, attention written as matmul + softmax +
matmul, fp32 convolutions, FP32 GEMMs without Tensor Cores, misaligned GEMMs, pageable copies,
unfused optimizers.

Each detector returns a ``Waste``: the new duration of every GPU event the fix would change (µs;
0 for a kernel the fix removes) and its evidence. The replay model (``simulate``) turns those into
step time, so a faster kernel on a CPU-bound step is worth nothing, as it should be. Estimates of
the fixed kernels come from bytes and FLOPs at practical ceilings of the SKU (``specs``), never
from the slow kernels' own speed.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from functools import reduce
from itertools import compress, count, repeat
from operator import add, and_, mul, or_
from typing import TYPE_CHECKING, Callable, Iterable, List, Optional, Sequence, Tuple

from perfstack.profile import classify
from perfstack.profile.attribute import ATTN_MATH, COMPILED, LOSS
from perfstack.records.profile import (AttentionUnfused, Fp32Conv, Fp32Matmul, GemmMisaligned, LargeVocabLoss,
                                       MisalignedGroup, OptimizerNotFused, PageableMemcpy, Record, UnfusedElementwise)

if TYPE_CHECKING:
    from perfstack.profile.analysis import Analysis
    from perfstack.profile.flops import Cost
    from perfstack.profile.trace import GpuEvent
    from perfstack.specs.table import GpuSpec

HBM_PRACTICAL = 0.90  # a streaming kernel reaches ~90% of the HBM peak (specs.practical hbm_copy)
MIN_KERNEL_US = 2.5  # the shortest a fused kernel runs on an H100 (launch to completion of a tiny kernel)
VOCAB_MIN = 16384
# Fractions of the dense 16-bit peak that well-tuned kernels of each kind reach on an H100 in this
# project's validation traces (tests/fixtures/traces/validation, record_validation.py): cuDNN SDPA
# at seq 2048, head dim 64, causal: 381 TFLOP/s forward, 303 backward, 322 over both (attention-fixed);
# bf16 channels_last convolutions of ResNet-50: 314 forward, 323 backward (resnet50-fixed).
FLASH_PRACTICAL = 0.33
CONV_PRACTICAL = 0.33
TF32_PRACTICAL, FP32_PRACTICAL, BF16_PRACTICAL = 0.72, 0.77, 0.80  # specs.practical_fraction
PAGEABLE_FUSED = re.compile(r"_fused_|fused_adam|FusedAdam|_fused_sgd", re.I)


@dataclass
class Waste:
    id: str
    new_dur: dict[int, float] = field(default_factory=dict)  # device event index -> µs after the fix
    merged: set[int] = field(default_factory=set)  # events fused into another: their launches go away too
    evidence: Record = field(default_factory=Record)  # the record of records.waste its finding quotes

    def saved_us(self, gpu: list[GpuEvent]) -> float:
        return sum(gpu[i].dur - d for i, d in self.new_dur.items())


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


def compile_pads(found: list[Waste], A: Analysis) -> list[Waste]:
    """The fusion finding's fix is torch.compile, and Inductor does more than fuse. Its shape padding
    (torch._inductor.config.shape_padding, on by default) pads a GEMM's misaligned dimension when the padded
    GEMM is faster, so compiling also gives back what ``gemm_misaligned`` finds in GEMMs that run eagerly
    (those already compiled kept their shapes): on the validation's eager GPT-2, the logits' GEMMs (vocabulary
    50257) took 38.3 ms per step eagerly and 19.4 compiled, a third of what compiling gained. Its layout
    optimization (torch._inductor.config.layout_optimization, on by default) runs a graph's convolutions in
    channels_last, so the layout transposes cuDNN runs around eager NCHW convolutions go (``compile_layout``)."""
    by_id = {w.id: w for w in found}
    fused, bad = by_id.get("unfused-elementwise"), by_id.get("gemm-misaligned")
    if fused is None:
        return found
    compile_layout(fused, A)
    if bad is None:
        return found
    flags, att = A.att.ops.flags, A.att
    # the eager ones (compiled GEMMs kept their shapes) that padding makes faster (Inductor times both)
    eager = {i: d for i, d in bad.new_dur.items()
             if (att.op[i] < 0 or not flags[att.op[i]] & COMPILED) and d < 0.98 * A.gpu[i].dur}
    if not eager:
        return found
    n = max(1, len(A.windows))
    ev = fused.evidence
    if isinstance(ev, UnfusedElementwise):
        ev.padded_gemm_ms = round(sum(A.gpu[i].dur for i in eager) / n / 1e3, 3)
        ev.padded_gemm_fixed_ms = round(sum(eager.values()) / n / 1e3, 3)
    fused.new_dur.update(eager)
    return found


def compile_layout(fused: Waste, A: Analysis) -> None:
    """The layout transposes (nchwToNhwc, nhwcToNchw) of eager convolutions go in the compile scenario: Inductor
    converts a graph with convolutions to channels_last once, at its inputs (a weight's copy per call, small
    beside the activations' transposes it saves). Their time is in the trace: 3.4 ms of a 32.6 ms ResNet-50
    fp32 training step on an H200, 4.3 of 24.6 on ResNet-18."""
    flags, att = A.att.ops.flags, A.att
    gone = [i for i in A.in_steps("conv") if classify.LAYOUT_KERNEL.search(A.gpu[i].name)
            and (att.op[i] < 0 or not flags[att.op[i]] & COMPILED)]
    if not gone:
        return
    for i in gone:
        fused.new_dur[i] = 0.0
    if isinstance(fused.evidence, UnfusedElementwise):
        fused.evidence.layout_ms = round(sum(A.gpu[i].dur for i in gone) / max(1, len(A.windows)) / 1e3, 3)


def hbm_gbps(spec: GpuSpec | None) -> float | None:
    return spec.hbm_tbps * 1e3 * HBM_PRACTICAL if spec and spec.hbm_tbps else None


def _stream_runs(A: Analysis, member: Sequence[bool]) -> list[list[int]]:
    """Maximal runs of consecutive events on one stream, in one step and phase, that are ``member`` (a flag
    per event)."""
    step, phase = A.att.step, A.att.phase
    last: dict[int, list[int] | None] = {}
    runs: list[list[int]] = []
    for i, (s, ph, g, m) in enumerate(zip(step, phase, A.gpu, member)):
        if s < 0:
            continue
        if m:
            cur = last.get(g.stream)
            if cur and step[cur[-1]] == s and phase[cur[-1]] == ph:
                cur.append(i)
            else:
                cur = last[g.stream] = [i]
                runs.append(cur)
        else:
            last[g.stream] = None
    return runs


def fusion(A: Analysis, spec: GpuSpec | None) -> Waste | None:
    """Chains of eager element-wise/copy kernels: a fused kernel reads the chain's largest tensor
    once and writes it once; everything in between stays in registers."""
    bw = hbm_gbps(spec)
    if not bw:
        return None
    gpu, att, flags, costs = A.gpu, A.att, A.att.ops.flags, A.event_costs()
    dur, op_of, trace_ops = [g.dur for g in gpu], att.op, A.trace.ops
    member = [c in ("elementwise", "copy") and g.kind == "kernel" and not g.name.startswith("triton_")
              and (o < 0 or not flags[o] & COMPILED) and ph != "optimizer"
              for c, g, o, ph in zip(att.category, gpu, att.op, att.phase)]
    w = Waste("unfused-elementwise")
    training = "backward" in att.phase
    chains = eager = fused_total = 0.0
    ops: dict[str, float] = defaultdict(float)
    n_kernels = 0
    reads: dict[tuple[int, int, int], tuple[int, bool]] = {}  # see passes
    plans: dict[tuple[int, ...], _Chain] = {}  # per chain of the same operators' calls (see _chain)
    for run in _stream_runs(A, member):
        if len(run) < 2:
            continue
        # a step repeats its chains: what a chain's members are (their groups, the traffic of each fused
        # group, their operators' names) depends on their costs alone, shared by the calls of one name and
        # arguments; only the durations are the run's own
        cs = list(map(costs.__getitem__, run))
        key = tuple(map(id, cs))
        plan = plans.get(key)
        if plan is None:
            plan = plans[key] = _chain(A, run, cs, training, reads, bw)
        unknown_at, groups, names = plan
        t = sum(map(dur.__getitem__, run))
        fused = reduce(add, map(dur.__getitem__, map(run.__getitem__, unknown_at)), 0.0)
        scale = [1.0] * len(run)
        for at, need in groups:
            eager_g = sum(map(dur.__getitem__, map(run.__getitem__, at)))
            fused_g = min(eager_g, need)
            fused += fused_g
            s = fused_g / eager_g if eager_g else 1.0
            for p in at:
                scale[p] = s
        if fused >= t * 0.98:
            continue
        chains += 1
        n_kernels += len(run)
        eager += t
        fused_total += fused
        for at, _ in groups:
            w.merged.update(map(run.__getitem__, at[1:]))
        w.new_dur.update(zip(run, map(mul, map(dur.__getitem__, run), scale)))
        for i, name in zip(run, names):
            if name is None:
                o = op_of[i]
                name = trace_ops[o].name if o >= 0 else classify.short_name(gpu[i].name, 40)
            ops[name] += dur[i]
    n = max(1, len(A.windows))
    w.evidence = UnfusedElementwise(chains_per_step=round(chains / n, 1), kernels_per_step=round(n_kernels / n, 1),
                                    eager_ms=round(eager / n / 1e3, 3),
                                    fused_ms=round(fused_total / n / 1e3, 3),
                                    top_ops=[k for k, _ in sorted(ops.items(), key=lambda kv: -kv[1])[:5]])
    return w


# A chain's members by what they are: the positions of those of unknown size, each group of one data size
# with the fused kernel's time for it (the positions in it, in order, and its traffic over the HBM rate),
# and each member's operator name (None: an event no operator launched)
_Chain = Tuple[List[int], List[Tuple[List[int], float]], List[Optional[str]]]


def _chain(A: Analysis, run: list[int], cs: list[Cost | None], training: bool,
           reads: dict[tuple[int, int, int], tuple[int, bool]], bw: float) -> _Chain:
    """What ``fusion`` makes of a chain of these members (``cs``: their costs), whatever their durations.
    Members that touch data of the same size are taken for one dataflow (x → bias → GELU → cast): fused,
    they read it once and write it once. Members on data of other sizes (a weight's cast next to an
    activation's GELU) are independent and keep their own traffic."""
    unknown_at: list[int] = []
    groups: dict[int, list[int]] = defaultdict(list)
    bigs: dict[int, list[float]] = defaultdict(list)  # the members' largest tensors, by group
    for p, c in enumerate(cs):
        if c is None or not c.big or not c.big_numel:
            unknown_at.append(p)
        else:
            groups[c.big_numel].append(p)
            bigs[c.big_numel].append(c.big)
    fused = [(at, max(passes(A, [run[p] for p in at], numel, training, reads) * max(bigs[numel]) / (bw * 1e3),
                      MIN_KERNEL_US))
             for numel, at in groups.items()]
    ops, op_of = A.trace.ops, A.att.op
    # (a member's cost is its operator's name and arguments: with one, the name is the plan's)
    names = [ops[op_of[i]].name if c is not None and op_of[i] >= 0 else None for i, c in zip(run, cs)]
    return unknown_at, fused, names


BATCH_NORM = re.compile(r"batch_norm")
WRITES_FIRST = re.compile(r"::(copy_|fill_|zero_)$")  # their first tensor is written, not read


def passes(A: Analysis, members: list[int], numel: int, training: bool,
           memo: dict[tuple[int, int, int], tuple[int, bool]] | None = None) -> int:
    """How many times a fused kernel must move data of the size ``numel`` through HBM: it writes the result
    once and reads each input once, at least as many inputs as the member that reads the most of that size
    takes (``add(x, y)``, ``threshold_backward(grad, y)``: two; ``copy_(dst, src)``: one; tensors are not named
    in a trace, so inputs shared between members count once). In training a batch norm's statistics span the whole batch, more than
    a kernel holds on chip: they take a reading pass of their own before the normalisation reads the data again
    (Inductor emits a reduction, then the element-wise kernel); a layer norm's row stays on chip."""
    ops, op_of = A.trace.ops, A.att.op
    memo = {} if memo is None else memo  # per op, by (its name and shapes, numel): its reads, a batch norm
    reads = stats = 0
    for i in members:
        o = op_of[i]
        k, norm = 1, False
        if o >= 0:
            op = ops[o]
            key = (id(op.name), id(op.dims), numel)
            kn = memo.get(key)
            if kn is None:
                kn = memo[key] = (_same_size_inputs(op.dims, numel) - bool(WRITES_FIRST.search(op.name)),
                                  bool(BATCH_NORM.search(op.name)))
            k, norm = kn
        reads = max(reads, k)
        if training and norm:
            stats = max(stats, k)
    return max(1, reads) + 1 + stats


def _same_size_inputs(dims: Sequence[object] | None, numel: int) -> int:
    return sum(1 for d in dims or () if (s := classify.dims(d)) is not None and classify.numel(s) == numel)


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
    first_of_step: set[int] = set()
    for i in members:
        if att.step[i] not in first_of_step:
            first_of_step.add(att.step[i])
            w.new_dur[i] = per_step
        else:
            w.new_dur[i] = 0.0
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
    params = 0
    for o in sorted(opt_ops):
        dims = ops[o].dims
        if ops[o].name.startswith("aten::_foreach_") and dims:
            shapes = dims[0]
            if isinstance(shapes, list):
                params = sum(classify.numel(s) for s in shapes if classify.dims(s)) or params
                if params:
                    break
    if not params:
        return None
    n = max(1, len(A.windows))
    fused = 28.0 * params / (bw * 1e3)  # fp32 param r/w, grad r, two moments r/w: 7 × 4 bytes
    t = sum(gpu[i].dur for i in idx) / n
    if fused >= t:
        return None
    w = Waste("optimizer-not-fused")
    seen: set[int] = set()
    for i in idx:
        if att.step[i] not in seen:
            seen.add(att.step[i])
            w.new_dur[i] = fused
        else:
            w.new_dur[i] = 0.0
    w.evidence = OptimizerNotFused(round(len(idx) / n, 1), round(t / 1e3, 3), round(fused / 1e3, 3), params)
    return w
