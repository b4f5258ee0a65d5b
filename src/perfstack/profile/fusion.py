"""Chains of eager element-wise kernels that one compiled kernel would run, and what else compiling the step
gives back (Inductor's shape padding and layout): the unfused-elementwise finding's ``waste.Waste``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from functools import reduce
from operator import add, mul
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

from perfstack.profile import classify
from perfstack.profile.attribute import COMPILED
from perfstack.profile.waste import MIN_KERNEL_US, Waste, hbm_gbps
from perfstack.records.profile import UnfusedElementwise

if TYPE_CHECKING:
    from perfstack.profile.analysis import Analysis
    from perfstack.profile.flops import Cost
    from perfstack.specs.table import GpuSpec


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
