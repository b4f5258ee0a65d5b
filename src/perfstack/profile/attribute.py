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
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from itertools import chain, compress, islice, repeat
from operator import attrgetter, eq, gt, itemgetter, le, lt
from typing import Any, Callable, NamedTuple, Sequence

from perfstack.profile import classify
from perfstack.profile.trace import CpuEvent, GpuEvent, Trace
# how GPU work was given its step: the words a Run's profile.timeline.attribution keeps
from perfstack.records.profile.means import Attribution as Method

PHASES = ("forward", "backward", "optimizer")
_INF = float("inf")
_END = CpuEvent("op", "", _INF, 0.0, None)  # after the last op (_sweep_merged)
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
    # the start times of trace.ops and trace.runtime, read once here for the nesting and kept as arrays of
    # doubles for the passes that place CPU events in steps (the events' own are spread over the decoded trace)
    op_ts: Sequence[float] = ()
    rt_ts: Sequence[float] = ()


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
    info, rparent, _, _ = _nest(trace)
    return info, rparent


def _nest(trace: Trace) -> tuple[OpInfo, array[int], array[float], array[float]]:
    """``nest``, and the start times of the ops and of the runtime calls it read (arrays of doubles)."""
    ops, rts = trace.ops, trace.runtime
    n_ops = len(ops)
    # One sweep over ops and runtime calls together, by start, longest first, ops before runtime calls,
    # then by index; each thread keeps its own stack of open ops.
    # (the start times copied into fresh floats, side by side in memory: the sweep, and the sort where there is one,
    # read them in turn, and the events' own are spread over the gigabyte the trace was decoded into)
    rt_ts = array("d", [r.ts for r in rts])
    rts_t = rt_ts.tolist()
    rt_tids = [r.tid for r in rts]
    parent = array("q", [-1]) * n_ops  # (an array: millions of ints cost a tenth of a list of them)
    rparent = array("q", [-1]) * len(rts)
    root = _Context(None, "forward", 0, {})  # what an op with no parent inherits
    context = [root] * n_ops
    op_ts = array("d")
    if not (_increasing(rts_t) and _sweep_merged(ops, rts, rts_t, rt_tids, root, parent, rparent, context, op_ts)):
        # Events numbered ops first, runtime calls after (x >= n_ops). Both lists are mostly sorted by start, so
        # sorting by start alone merges two runs; only events that start at the same instant need the rest of
        # the order.
        op_ts = array("d", [o.ts for o in ops])
        ts = op_ts.tolist()
        ts += rts_t
        tids = [o.tid for o in ops]
        tids += rt_tids
        order = sorted(range(len(ts)), key=ts.__getitem__)
        _break_ties(order, ts, lambda x: -(ops[x].dur if x < n_ops else rts[x - n_ops].dur))
        _sweep(order, ts, tids, ops, root, parent, rparent, context)
    # (the fields by position: a context is a tuple, and millions of ops read it)
    fam = list(map(itemgetter(0), context))
    phase = list(map(itemgetter(1), context))
    flags = list(map(itemgetter(2), context))
    return OpInfo(parent, fam, phase, flags), rparent, op_ts, rt_ts


def _sweep(order: list[int], ts: list[float], tids: list[Any], ops: list[CpuEvent], root: _Context,
           parent: array[int], rparent: array[int], context: list[_Context]) -> None:
    """The events in ``order``: each op's parent and context, each runtime call's innermost op."""
    n_ops = len(ops)
    # per thread, (end, op, its context) of the open ops, innermost last, above a bottom that never closes (so
    # the loop needs no test for an empty stack); the threads take turns rarely (a few hundred times in a
    # trace of millions of events), so the loop keeps the current thread's stack and its top at hand
    stacks: dict[Any, list[tuple[float, int, _Context]]] = {}
    thread = object()  # none yet
    stack = [(_INF, -1, root)]
    push, pop = stack.append, stack.pop
    top_end, top, top_ctx = stack[-1]
    for x in order:
        tid = tids[x]
        if tid != thread:
            stack = stacks.setdefault(tid, [(_INF, -1, root)])
            push, pop = stack.append, stack.pop
            thread = tid
            top_end, top, top_ctx = stack[-1]
        t = ts[x]
        while t >= top_end:
            pop()
            top_end, top, top_ctx = stack[-1]
        if x >= n_ops:
            rparent[x - n_ops] = top
            continue
        parent[x] = top
        op = ops[x]
        # ancestors before descendants: the parent, open on the stack, was seen first
        # (a context's children by position, [3]: a field by name is a slower lookup, made for millions of ops)
        try:
            ctx = top_ctx[3][op.name]
        except KeyError:
            ctx = top_ctx[3][op.name] = top_ctx.child(op.name)
        context[x] = ctx
        top_end, top, top_ctx = t + op.dur, x, ctx
        push((top_end, x, ctx))


def _increasing(ts: list[float]) -> bool:
    """Does each start come strictly after the one before, the last before infinity?"""
    return all(map(lt, ts, islice(ts, 1, None))) and (not ts or ts[-1] < _INF)


def _sweep_merged(ops: list[CpuEvent], rts: list[CpuEvent], rts_t: list[float], rt_tids: list[Any], root: _Context,
                  parent: array[int], rparent: array[int], context: list[_Context], op_ts: array[float]) -> bool:
    """``_sweep`` where no two ops start together, nor two runtime calls (start times ``rts_t``, strictly increasing,
    the last before infinity): the ops in their order, each after the calls that start before it, and after a call
    that starts with it only where the call is longer (longest first; ops before calls). Appends the ops' start
    times to ``op_ts``. False, and nothing to read, where two ops are out of order or start together."""
    rts_t.append(_INF)  # after the last call
    stacks: dict[Any, list[tuple[float, int, _Context]]] = {}
    thread = object()  # none yet
    stack = [(_INF, -1, root)]
    push, pop = stack.append, stack.pop
    top_end, top, top_ctx = stack[-1]
    add_ts = op_ts.append
    r = 0
    rt_t = rts_t[0]
    last = -_INF
    # (each op read once, here, for its start, thread, name and length: no copies of them made beforehand)
    for x, op in enumerate(chain(ops, (_END,))):
        t = op.ts
        if not t > last:  # (not <=: a NaN is out of order too)
            rts_t.pop()
            return False
        last = t
        while rt_t <= t:  # the runtime calls before op x
            if rt_t == t and (op is _END or not rts[r].dur > op.dur):
                break
            tid = rt_tids[r]
            if tid != thread:
                stack = stacks.setdefault(tid, [(_INF, -1, root)])
                push, pop = stack.append, stack.pop
                thread = tid
                top_end, top, top_ctx = stack[-1]
            while rt_t >= top_end:
                pop()
                top_end, top, top_ctx = stack[-1]
            rparent[r] = top
            r += 1
            rt_t = rts_t[r]
        if op is _END:
            break
        add_ts(t)
        # op x, as _sweep takes it
        tid = op.tid
        if tid != thread:
            stack = stacks.setdefault(tid, [(_INF, -1, root)])
            push, pop = stack.append, stack.pop
            thread = tid
            top_end, top, top_ctx = stack[-1]
        while t >= top_end:
            pop()
            top_end, top, top_ctx = stack[-1]
        parent[x] = top
        try:
            ctx = top_ctx[3][op.name]
        except KeyError:
            ctx = top_ctx[3][op.name] = top_ctx.child(op.name)
        context[x] = ctx
        top_end, top, top_ctx = t + op.dur, x, ctx
        push((top_end, x, ctx))
    rts_t.pop()
    return True


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
    info, rparent, op_ts, rt_ts = _nest(trace)
    rts = trace.runtime
    # the first call of each correlation id (later ones written first, then overwritten)
    rt_by_corr = dict(zip(map(attrgetter("correlation"), reversed(rts)), range(len(rts) - 1, -1, -1)))
    rt_by_corr.pop(None, None)
    n = len(gpu)
    # Each event's launch, op, step, phase and category, a list at a time: the lookups are mapped over the events
    # (hundreds of thousands on a large trace) rather than made in a loop. Index -1 (no launch, no op) reads the -1,
    # None or "" added at the end of what is looked up.
    found: list[Any] = list(map(rt_by_corr.get, map(attrgetter("correlation"), gpu)))
    linked = n - found.count(None)
    launch: list[int] = found if linked == n else [-1 if j is None else j for j in found]
    del found
    opi = list(map((rparent + array("q", [-1])).__getitem__, launch))
    rt_step = launch_steps(rt_ts, windows)  # the step of each runtime call: a GPU event takes its launch's
    rt_step.append(-1)
    step = list(map(rt_step.__getitem__, launch))
    del rt_step
    # without a launch, or launched outside every op: the op of the event's External id, if any
    lost = [(i, ext) for i in compress(range(n), map(gt, repeat(0), opi))
            if (ext := gpu[i].external_id) is not None]
    if lost:
        op_by_ext = _ops_by_external_id(trace)  # (a pass over every op: only when an event needs it)
        for i, ext in lost:
            opi[i] = op_by_ext.get(ext, -1)
    phases = list(map((info.phase + [""]).__getitem__, opi))
    # the category from the kind, the name, the op's family and phase: worked out once per distinct combination
    cats = list(map(_Categories().__getitem__, zip(map(attrgetter("kind"), gpu), map(attrgetter("name"), gpu),
                                                   map((info.family + [None]).__getitem__, opi), phases)))
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
    unattributed = step.count(-1)
    return Attribution(gpu, step, launch, opi, cats, phases, rparent, info, method, notes, unattributed, op_ts, rt_ts)


def launch_steps(ts: Sequence[float], windows: Sequence[tuple[int, float, float]]) -> array[int]:
    """Per CPU event starting at ``ts``, the index of the step window it was launched in: the last window starting
    at or before it, if the event starts before that window ends; -1 for none. Where the events and the windows are
    in time order (a loaded trace's are), each window's events are found by bisection and filled in at once."""
    starts = [a for _, a, _ in windows]
    ends = [b for _, _, b in windows]
    n = len(ts)
    if not (all(map(le, starts, islice(starts, 1, None))) and all(map(le, ts, islice(ts, 1, None)))):
        out = array("q", [-1]) * n
        for i, t in enumerate(ts):
            k = bisect_right(starts, t) - 1
            if k >= 0 and t < ends[k]:
                out[i] = k
        return out
    out = array("q")
    hi = 0
    for k, a in enumerate(starts):
        lo = bisect_left(ts, a, hi)  # (windows in order: a window's events start where the earlier ones' end)
        out.extend(array("q", [-1]) * (lo - len(out)))
        hi = bisect_left(ts, starts[k + 1], lo) if k + 1 < len(starts) else n
        e = bisect_left(ts, ends[k], lo, hi)
        out.extend(array("q", [k]) * (e - lo))
    out.extend(array("q", [-1]) * (n - len(out)))
    return out


class _Categories(dict):  # type: ignore[type-arg]
    """classify.category of (kind, name, family, phase), computed when first asked for."""

    def __missing__(self, key: tuple[str, str, str | None, str]) -> str:
        c = self[key] = classify.category(*key)
        return c


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
