"""Who launched each GPU event: the CUDA runtime call (by correlation id), the operator that made
that call (by nesting on the CPU thread), the operator's family and phase (by its ancestors), and
the profiler step (the ``ProfilerStep#N`` window in which the launch happened).

Attribution is by launch, not by timestamp: when the CPU runs ahead, a step's kernels run on the
GPU long after its CPU window has closed, and they still belong to it. A CUDA graph launch owns
the kernels it replays (they carry its correlation id); an NCCL kernel belongs to the step whose
code issued the collective. Only when a trace has no correlation ids does attribution fall back to
timestamps (the GPU-side ``ProfilerStep`` spans Kineto writes, else the CPU windows), and it says so.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import compress, islice
from operator import attrgetter, eq
from typing import Any, Callable, NamedTuple, Sequence

from perfstack.profile import classify
from perfstack.profile.trace import CpuEvent, GpuEvent, Trace
# how GPU work was given its step: the words a Run's profile.timeline.attribution keeps
from perfstack.records.profile.means import Attribution as Method

PHASES = ("forward", "backward", "optimizer")
_RANK = {"attention": 0, "conv": 1, "gemm": 2, "copy": 3}
COMPILED, LOSS, ATTN_MATH, DATALOADER = 1, 2, 4, 8
COPYING, CASTING = 16, 32  # a copy operator (classify.COPY_OPS), a cast (classify.CASTS), at or above the op


@dataclass
class OpInfo:
    """What the ancestors of each op say (parallel lists, indexed like ``trace.ops``)."""
    parent: Sequence[int]
    family: list[str | None]
    phase: list[str]
    flags: list[int]


@dataclass
class Attribution:
    """Per GPU event of the analysed device (parallel lists, indexed like ``gpu``)."""
    gpu: list[GpuEvent]  # the analysed device's events, in start order
    step: list[int]  # index into the step windows, -1 when launched outside every step
    launch: list[int]  # index into trace.runtime, -1 when unknown
    op: list[int]  # innermost launching op (index into trace.ops), -1 when unknown
    category: list[str]
    phase: list[str]
    runtime_parent: Sequence[int]  # per runtime call: innermost enclosing op, -1 when none
    ops: OpInfo
    method: Method
    notes: list[str] = field(default_factory=list)
    unattributed: int = 0  # GPU events launched before/after every profiled step


def _phase_of(name: str) -> str | None:
    if name.startswith(("Optimizer.step#", "Optimizer.zero_grad#")):
        return "optimizer"
    if name.startswith("autograd::engine::evaluate_function") or name.startswith("CompiledFunctionBackward"):
        return "backward"
    return None


def _flags_of(name: str) -> int:
    f = 0
    if name.startswith(("Torch-Compiled Region", "CompiledFunction")) or name.startswith("## Call CompiledFxGraph"):
        f |= COMPILED
    if classify.LOSS_OPS.search(name):
        f |= LOSS
    if "_scaled_dot_product_attention_math" in name or "_attention_math" in name:
        f |= ATTN_MATH
    if name.startswith("enumerate(DataLoader)"):
        f |= DATALOADER
    if name in classify.COPY_OPS:
        f |= COPYING
    if name in classify.CASTS:
        f |= CASTING
    return f


class _Context(NamedTuple):
    """What an op's ancestors and its own name make of it: its family, phase and flags, and (filled as they
    are met) the context of each name of op opened inside it. Ops share a few dozen contexts: one per
    distinct path of names that matters, where a trace has millions of ops and a few hundred names."""
    family: str | None
    phase: str
    flags: int
    children: dict[str, _Context]

    def child(self, name: str) -> _Context:
        own, ph, fl = classify.family(name), _phase_of(name), _flags_of(name)
        pf = self.family
        fam = pf if own is None or (pf is not None and _RANK[pf] <= _RANK[own]) else own
        phase = "optimizer" if self.phase == "optimizer" else (ph or self.phase)
        return _Context(fam, phase, self.flags | fl, {})


def nest(trace: Trace) -> tuple[OpInfo, Sequence[int]]:
    """Parent of every op and the innermost op enclosing every runtime call, per thread."""
    ops, rts = trace.ops, trace.runtime
    n_ops = len(ops)
    # One sweep over ops and runtime calls together, by start, longest first, ops before runtime calls,
    # then by index; each thread keeps its own stack of open ops. Events are numbered ops first, runtime
    # calls after (x >= n_ops). Both lists are sorted by start, so sorting by start alone merges two runs;
    # only events that start at the same instant need the rest of the order.
    # (the start times copied into fresh floats, side by side in memory: the sort and the sweep read them in
    # turn, and the events' own are spread over the gigabyte the trace was decoded into)
    starts = array("d", [o.ts for o in ops])
    starts.extend([r.ts for r in rts])
    ts = starts.tolist()
    del starts
    tids = [o.tid for o in ops]
    tids += [r.tid for r in rts]
    order = sorted(range(len(ts)), key=ts.__getitem__)
    _break_ties(order, ts, lambda x: -(ops[x].dur if x < n_ops else rts[x - n_ops].dur))
    parent = array("q", [-1]) * n_ops  # (an array: millions of ints cost a tenth of a list of them)
    rparent = array("q", [-1]) * len(rts)
    root = _Context(None, "forward", 0, {})  # what an op with no parent inherits
    context = [root] * n_ops
    _sweep(order, ts, tids, ops, root, parent, rparent, context)
    fam = list(map(attrgetter("family"), context))
    phase = list(map(attrgetter("phase"), context))
    flags = list(map(attrgetter("flags"), context))
    return OpInfo(parent, fam, phase, flags), rparent


def _sweep(order: list[int], ts: list[float], tids: list[Any], ops: list[CpuEvent], root: _Context,
           parent: array[int], rparent: array[int], context: list[_Context]) -> None:
    """The events in ``order``: each op's parent and context, each runtime call's innermost op."""
    n_ops = len(ops)
    # per thread, (end, op, its context) of the open ops, innermost last, above a bottom that never closes (so
    # the loop needs no test for an empty stack); the threads take turns rarely (a few hundred times in a
    # trace of millions of events), so the loop keeps the current thread's stack and its top at hand
    stacks: dict[Any, list[tuple[float, int, _Context]]] = {}
    thread = object()  # none yet
    stack = [(float("inf"), -1, root)]
    top_end, top, top_ctx = stack[-1]
    for x in order:
        tid = tids[x]
        if tid != thread:
            stack = stacks.setdefault(tid, [(float("inf"), -1, root)])
            thread = tid
            top_end, top, top_ctx = stack[-1]
        t = ts[x]
        while t >= top_end:
            stack.pop()
            top_end, top, top_ctx = stack[-1]
        if x >= n_ops:
            rparent[x - n_ops] = top
            continue
        parent[x] = top
        op = ops[x]
        # ancestors before descendants: the parent, open on the stack, was seen first
        try:
            ctx = top_ctx.children[op.name]
        except KeyError:
            ctx = top_ctx.children[op.name] = top_ctx.child(op.name)
        context[x] = ctx
        top_end, top, top_ctx = t + op.dur, x, ctx
        stack.append((top_end, x, ctx))


def _break_ties(order: list[int], ts: list[float], neg_dur: Callable[[int], float]) -> None:
    """Order, in place, each run of ``order`` that starts at the same instant by (longest first, index)."""
    t = list(map(ts.__getitem__, order))
    if not any(map(eq, islice(t, 1, None), t)):
        return
    same = list(compress(range(1, len(t)), map(eq, islice(t, 1, None), t)))  # positions that start with the one before
    k = 0
    while k < len(same):
        a = b = same[k]  # the run is order[a - 1 : b + 1]
        k += 1
        while k < len(same) and same[k] == b + 1:
            b = same[k]
            k += 1
        order[a - 1:b + 1] = sorted(order[a - 1:b + 1], key=lambda x: (neg_dur(x), x))


def attribute(trace: Trace, gpu: list[GpuEvent], windows: list[tuple[int, float, float]]) -> Attribution:
    """Attribute the GPU events ``gpu`` (one device, sorted by start) to launches, ops and steps."""
    info, rparent = nest(trace)
    rts = trace.runtime
    # the first call of each correlation id (later ones written first, then overwritten)
    rt_by_corr = {r.correlation: j for j, r in zip(range(len(rts) - 1, -1, -1), reversed(rts))}
    rt_by_corr.pop(None, None)
    op_by_ext: dict[int, int] | None = None  # built when an event needs it: a pass over every op
    starts = [a for _, a, _ in windows]
    ends = [b for _, _, b in windows]
    n = len(gpu)
    step, launch, opi = [-1] * n, [-1] * n, [-1] * n
    # each event's category and phase, from its name and kind and its operator's family and phase, in the same
    # pass (looked up once per distinct combination)
    cats: list[str] = []
    phases: list[str] = []
    add_cat, add_phase = cats.append, phases.append
    cat_cache: dict[tuple[Any, ...], str] = {}
    family, phase = info.family, info.phase
    linked = 0
    for i, g in enumerate(gpu):
        o = -1
        j = rt_by_corr.get(g.correlation)
        if j is not None:
            linked += 1
            launch[i] = j
            o = opi[i] = rparent[j]
            t = rts[j].ts
            k = bisect_right(starts, t) - 1
            step[i] = k if k >= 0 and t < ends[k] else -1
        if o < 0 and g.external_id is not None:
            if op_by_ext is None:
                op_by_ext = _ops_by_external_id(trace)
            o = opi[i] = op_by_ext.get(g.external_id, -1)
        if o >= 0:
            fam, ph = family[o], phase[o]
        else:
            fam, ph = None, ""
        key = (g.kind, g.name, fam, ph == "optimizer")
        c = cat_cache.get(key)
        if c is None:
            c = cat_cache[key] = classify.category(g.kind, g.name, fam, ph)
        add_cat(c)
        add_phase(ph)
    notes: list[str] = []
    method: Method = "launch"
    if n and linked < 0.5 * n:
        # Not enough correlation ids to attribute by launch: use the GPU-side step spans, else the
        # CPU windows, by timestamp, and say what that costs.
        method = _by_timestamp(trace, gpu, windows, step, launch)
        notes.append(f"only {linked} of {n} GPU events carry a correlation id matching a CUDA runtime call: GPU "
                     f"work was attributed to steps by {method}, so work a step queued but the GPU ran after the "
                     "step's window counts in the next step, and launch delays, CPU causes of idle gaps and "
                     "per-operator figures are not available for the rest")
    elif n and linked < n:
        notes.append(f"{n - linked} of {n} GPU events have no matching CUDA runtime call (their launch was not "
                     "recorded); they count in the GPU timeline but not in any step's launch figures")
    unattributed = sum(1 for s in step if s < 0)
    return Attribution(gpu, step, launch, opi, cats, phases, rparent, info, method, notes, unattributed)


def _ops_by_external_id(trace: Trace) -> dict[int, int]:
    """The first operator (cat op) of each External id."""
    ops = trace.ops
    return {o.external_id: i for i, o in zip(range(len(ops) - 1, -1, -1), reversed(ops))
            if o.cat == "op" and o.external_id is not None}


def _by_timestamp(trace: Trace, gpu: list[GpuEvent], windows: list[tuple[int, float, float]], step: list[int],
                  launch: list[int]) -> Method:
    spans: dict[int, tuple[float, float]] = {}
    for a in getattr(trace, "gpu_annotations", ()):
        if a.name.startswith("ProfilerStep#"):
            try:
                spans.setdefault(int(a.name.split("#", 1)[1]), (a.ts, a.ts + a.dur))
            except ValueError:
                continue
    numbers = {num: k for k, (num, _, _) in enumerate(windows)}
    use = [(numbers[num], s, e) for num, (s, e) in spans.items() if num in numbers]
    method: Method = "the GPU-side ProfilerStep spans"
    if len(use) < len(windows):
        use = [(k, a, b) for k, (_, a, b) in enumerate(windows)]
        method = "timestamp (the CPU step windows)"
    use.sort(key=lambda x: x[1])
    starts = [s for _, s, _ in use]
    for i, g in enumerate(gpu):
        if launch[i] >= 0 and step[i] >= 0:
            continue
        k = bisect_right(starts, g.ts) - 1
        step[i] = use[k][0] if k >= 0 and g.ts < use[k][2] else -1
    return method
