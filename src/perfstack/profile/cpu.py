"""The CPU side of a trace: what the host was doing (data loading, allocator calls, blocking syncs,
operator dispatch), why each GPU idle gap happened, and the action sequence the replay model runs.

Why a gap happened is decided by the launch of the kernel that ends it (its correlation id): if
that launch had already returned when the GPU went idle, the kernel was queued and the GPU was
waiting on itself (a dependency between streams, an event, a bubble between dependent kernels);
otherwise the GPU waited for the CPU, and what the CPU did between the start of the gap and that
launch names the cause: the DataLoader, the allocator, a blocking sync that had drained the queue,
operator dispatch, or host code outside any recorded operator.
"""

from __future__ import annotations

import heapq
from array import array
from collections import Counter
from bisect import bisect_left
from itertools import compress, islice, repeat
from operator import eq, le, sub
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from perfstack.profile.simulate import COPY_SYNC, LAUNCH, SYNC, Timeline
from perfstack.profile.timeline import Spans, first_after
from perfstack.profile.trace import CpuEvent, GpuEvent, Trace

if TYPE_CHECKING:
    from perfstack.profile.attribute import Attribution

SYNC_CALLS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cuStreamSynchronize",
              "cuCtxSynchronize", "cuEventSynchronize"}
BLOCKING_COPIES = {"cudaMemcpy", "cudaMemcpy2D", "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2", "cuMemcpy"}
SYNC_OPS = {"aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero"}
ALLOC_CALLS = {"cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync", "cuMemAlloc_v2", "cuMemFree_v2",
               "cudaHostAlloc", "cudaFreeHost", "cudaMallocHost", "cuMemCreate", "cuMemMap", "cuMemUnmap",
               "cuMemRelease", "cuMemAddressReserve", "cuMemSetAccess"}
ALLOC_SYNCS = {"cudaFree", "cuMemFree_v2", "cudaFreeHost"}  # these wait for the device to be idle
KERNEL_LAUNCHES = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                   "cudaLaunchCooperativeKernel", "cudaLaunchCooperativeKernelMultiDevice"}
GRAPH_LAUNCHES = {"cudaGraphLaunch", "cuGraphLaunch"}
REASONS = ("data loading", "allocator", "sync", "cpu dispatch", "cpu outside ops", "gpu queued", "unknown")


@dataclass
class CpuSpans:
    dataloader: Spans
    alloc: Spans
    sync: Spans  # blocking calls (runtime syncs, blocking copies, .item())
    ops: Spans  # inside any operator (dispatch)


def spans(trace: Trace) -> CpuSpans:
    dl: list[tuple[float, float]] = []
    alloc: list[tuple[float, float]] = []
    sync: list[tuple[float, float]] = []
    # Dispatch: operators, and the user's record_function ranges (Optimizer.step#...) that a CUDA graph
    # captures along with them; not the DataLoader nor the step markers. There is one per operator of
    # the trace: merged as they come (the trace's ops are sorted by start), not held as millions of pairs.
    starts: list[float] = []
    ends: list[float] = []
    last_s, last_e, in_order = -_INF, -_INF, True
    # per name: the list it goes to and whether it is dispatch as an annotation, or None for the names that are
    # neither in a list nor dispatch as annotations (nearly all: their case is tested first)
    roles: dict[str, tuple[list[tuple[float, float]] | None, bool] | None] = {}
    for o in trace.ops:
        name = o.name
        try:
            role = roles[name]
        except KeyError:
            role = roles[name] = _role(name, dl, alloc, sync)
        s = o.ts
        e = s + o.dur
        if role is None:
            if o.cat != "op":
                continue
        else:
            if role[0] is not None:
                role[0].append((s, e))
            if not (o.cat == "op" or (role[1] and o.cat == "annotation")):
                continue
        if not s >= last_s:
            in_order = False
        last_s = s
        if e <= s or not in_order:
            continue
        if s <= last_e:
            if e > last_e:
                last_e = ends[-1] = e
        else:
            starts.append(s)
            ends.append(e)
            last_e = e
    for r in trace.runtime:  # (the interval built only for the few calls kept: most are launches)
        name = r.name
        if name in ALLOC_CALLS:
            alloc.append((r.ts, r.ts + r.dur))
        if name in SYNC_CALLS or name in BLOCKING_COPIES:
            sync.append((r.ts, r.ts + r.dur))
    if in_order:
        dispatch = Spans.of_merged(starts, ends)
    else:  # a trace built by hand
        dispatch = Spans((o.ts, o.ts + o.dur) for o in trace.ops
                         if o.cat == "op" or (o.cat == "annotation" and (roles[o.name] or (None, False))[1]))
    return CpuSpans(Spans(dl), Spans(alloc), Spans(sync), dispatch)


_INF = float("inf")


def _role(name: str, dl: list[tuple[float, float]], alloc: list[tuple[float, float]],
          sync: list[tuple[float, float]]) -> tuple[list[tuple[float, float]] | None, bool] | None:
    """Which CPU span an op of this name makes (the DataLoader, allocator, sync, or none), and whether
    it is dispatch when it is a user annotation; None for neither."""
    of = dl if name.startswith("enumerate(DataLoader)") else alloc if "empty_cache" in name else \
        sync if name in SYNC_OPS else None
    annotation = "#" in name and not name.startswith("enumerate(")
    return None if of is None and not annotation else (of, annotation)


def gap_reason(a: float, b: float, launch: CpuEvent | None, cs: CpuSpans) -> str:
    """Why the GPU was idle over [a, b]; ``launch`` is the runtime call of the event that ends it."""
    if launch is None:
        return "unknown"
    if launch.ts + launch.dur <= a + 1.0:
        return "gpu queued"
    c0, c1 = a, max(a, launch.ts)
    n = c1 - c0
    if n <= 0:
        return "cpu dispatch"
    if cs.dataloader.overlap(c0, c1) >= 0.3 * n:
        return "data loading"
    if cs.alloc.overlap(c0, c1) >= 0.3 * n:
        return "allocator"
    if cs.sync.overlap(c0 - 5.0, c1) > 0 or cs.sync.ends_within(c0 - 20.0, c1):
        return "sync"
    if cs.ops.overlap(c0, c1) >= 0.3 * n:
        return "cpu dispatch"
    return "cpu outside ops"


def timeline(trace: Trace, att: Attribution, windows: list[tuple[int, float, float]], cs: CpuSpans) -> Timeline | None:
    """The replayable action sequence of the profiled steps, or None when launches are unknown."""
    if att.method != "launch" or not windows:
        return None
    by_launch: dict[int, list[int]] = {}
    for i, (j, k) in enumerate(zip(att.launch, att.step)):
        if j >= 0 and k >= 0:
            lst = by_launch.get(j)
            if lst is None:
                by_launch[j] = [i]
            else:
                lst.append(i)
    t0, t_end = windows[0][1], windows[-1][2]
    tl = Timeline(t0=t0, n_steps=len(windows), tail_us=0.0)
    at = _gpu_events(tl, att.gpu, by_launch)
    tl.latency_us = _latency(att.gpu, att, trace.runtime)
    _bubbles(tl, att, trace.runtime, at)
    actions = _actions(tl, trace.runtime, att.gpu, by_launch, at, t0, t_end)
    del by_launch, at  # (a list per launch: tens of MB of a large trace, not held while the gaps are worked out)
    cursor = _add_actions(tl, actions, [a for _, a, _ in windows], cs)
    tl.tail_us = max(0.0, t_end - cursor)
    return tl.freeze()


class Actions(NamedTuple):
    """The actions of a timeline in start order, as parallel lists."""
    ts: list[float]  # the runtime call's start
    names: list[str]
    took: list[float]  # its duration
    kinds: list[int]  # LAUNCH, COPY_SYNC or SYNC
    events: list[list[int]]  # the GPU events it launches (positions in the timeline, in order)


def _actions(tl: Timeline, rts: list[CpuEvent], gpu: list[GpuEvent], by_launch: dict[int, list[int]], at: list[int],
             t0: float, t_end: float) -> Actions:
    """The runtime calls of the profiled steps that the replay models, in start order: launches of
    attributed GPU work (a launch that waits for its work to begin is a copy-sync) and syncs; each GPU
    event's action set in ``tl.g_action``."""
    # one pass over the calls that yields every column the timeline takes from them (columns, not a tuple per
    # action taken apart again); the calls are in time order but for a trace built by hand: then sorted after
    ts, took = array("d"), array("d")
    names: list[str] = []
    kinds: list[int] = []
    events: list[list[int]] = []
    g_action = tl.g_action
    i = len(tl.kind)  # the next action's index
    last, in_order = -_INF, True
    for j in range(_first_at(rts, t0), len(rts)):
        r = rts[j]
        t = r.ts
        if t >= t_end:
            break
        name = r.name
        launched = by_launch.get(j)
        if launched is not None:
            if len(launched) == 1:
                k = at[launched[0]]
                evs = [k]
                g_action[k] = i
            else:
                evs = sorted(at[e] for e in launched)
                for k in evs:
                    g_action[k] = i
            # a call that returns only after its GPU work began (a pageable copy, a blocking memcpy) also
            # waits for the queue ahead of it: a launch followed by a sync (when its work began is looked up last:
            # most calls are kernel launches, and the events' starts are spread over memory)
            d = r.dur
            blocking = name in BLOCKING_COPIES or (d > 20.0 and name not in KERNEL_LAUNCHES and name not in GRAPH_LAUNCHES
                                                   and min(gpu[e].ts for e in launched) < t + d)
            kinds.append(COPY_SYNC if blocking else LAUNCH)
        elif name in SYNC_CALLS or name in BLOCKING_COPIES or name in ALLOC_SYNCS:
            d = r.dur
            evs = []
            kinds.append(SYNC)
        else:
            continue
        if t < last:
            in_order = False
        last = t
        ts.append(t)
        names.append(name)
        took.append(d)
        events.append(evs)
        i += 1
    # the starts and durations as fresh floats side by side (the calls' own are spread over the memory the trace
    # was decoded into: the passes over them took twice as long)
    if in_order:
        return Actions(ts.tolist(), names, took.tolist(), kinds, events)
    order = sorted(range(len(ts)), key=ts.__getitem__)  # stable: calls starting together stay in trace order
    out = Actions([ts[k] for k in order], [names[k] for k in order], [took[k] for k in order],
                  [kinds[k] for k in order], [events[k] for k in order])
    for i, evs in enumerate(out.events, len(tl.kind)):
        for k in evs:
            g_action[k] = i
    return out


def _first_at(rts: list[CpuEvent], t0: float) -> int:
    """The index of the first call starting at or after ``t0`` in the time-ordered ``rts`` (bisect_left on
    their starts, without building a list of a million starts for one search)."""
    lo, hi = 0, len(rts)
    while lo < hi:
        mid = (lo + hi) // 2
        if rts[mid].ts < t0:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _gpu_events(tl: Timeline, gpu: list[GpuEvent], by_launch: dict[int, list[int]]) -> list[int]:
    """The attributed GPU events into the timeline, in start order (durations, streams; bubbles and
    dependencies are filled by ``_bubbles``, actions by ``_actions``); the position there of each event of
    ``gpu`` (-1: not there; a list, not a dict: the passes after this look every event up)."""
    starts = [g.ts for g in gpu]
    order = sorted((i for evs in by_launch.values() for i in evs), key=starts.__getitem__)
    first = len(tl.g_dur)
    events = [gpu[i] for i in order]
    tl.g_dur.extend([g.dur for g in events])
    tl.g_stream.extend([g.stream for g in events])
    tl.g_bubble.extend([0.0] * len(order))
    tl.g_dep.extend([False] * len(order))
    tl.g_index.extend(order)
    tl.g_action.extend([-1] * len(order))
    at = [-1] * len(gpu)
    for k, i in enumerate(order, first):
        at[i] = k
    return at


def _bubbles(tl: Timeline, att: Attribution, rts: list[CpuEvent], at: list[int]) -> None:
    """Each GPU event's bubble: the idle before it that neither its launch nor its stream explains."""
    # a pass over every event of the device: maxima written as comparisons (no call per event), each
    # choosing the same value max() would
    gpu, lat, launch, bubble, dep = att.gpu, tl.latency_us, att.launch, tl.g_bubble, tl.g_dep
    prev_end: dict[int, float] = {}
    pending: list[float] = []  # ends of started events, soonest first
    push, pop = heapq.heappush, heapq.heappop
    last_done = -1e300  # the latest end, on any stream, at or before the current start
    for g, k, j in zip(gpu, at, launch):  # all events of the device, so pre-window work occupies its stream
        ts, stream = g.ts, g.stream
        soon = ts + 1.0
        while pending and pending[0] <= soon:
            done = pop(pending)
            if done > last_done:
                last_done = done
        before = prev_end.get(stream, -1e300)
        if k >= 0:
            r = rts[j]
            own = r.ts + r.dur + lat
            if not own > before:
                own = before
            if last_done > own:
                # it waited for another stream's work (an event dependency): replayed after whatever ran
                # last on the device, with only the idle that followed that as its own bubble
                dep[k] = True
                idle = ts - last_done
            else:
                idle = ts - own
            bubble[k] = idle if idle > 0.0 else 0.0
        end = ts + g.dur
        prev_end[stream] = end if end > before else before
        push(pending, end)


def _add_actions(tl: Timeline, actions: Actions, starts: list[float], cs: CpuSpans) -> float:
    """The actions into the timeline, each with the CPU gap before it and what filled that gap; the
    end of the last one."""
    ts, names, took, kinds, events = actions
    # A launch call that blocks because the launch queue is full is waiting for the GPU, not working:
    # count each call at most a few times the typical cost of its kind, and let the replay's GPU
    # timeline supply the wait.
    cap = _caps(names, took, kinds)
    durs = [m if (m := cap[name] if kind == LAUNCH else 8.0) < d else d for name, kind, d in zip(names, kinds, took)]
    # the CPU gap before each action: from the end of the latest action before it (the first: from the window's
    # start) to its start; one loop for the three (the running maximum inline: max() called per action, and a
    # comprehension per figure, took twice as long)
    gap_a: list[float] = []
    gap_b: list[float] = []
    gap: list[float] = []
    cursor = tl.t0
    for t, d in zip(ts, took):
        gap_a.append(cursor)
        b = t if t > cursor else cursor
        gap_b.append(b)
        gap.append(b - cursor)
        end = t + d
        if end > cursor:  # the value max(cursor, end) keeps
            cursor = end
    dl = cs.dataloader.overlaps(gap_a, gap_b)  # an empty gap overlaps nothing: 0.0
    op = cs.ops.overlaps(gap_a, gap_b)
    tl.kind.extend(kinds)
    tl.dur.extend(durs)
    tl.step.extend(_steps(ts, starts))
    tl.gap.extend(gap)
    tl.gap_dl.extend(dl)
    tl.gap_alloc.extend(cs.alloc.overlaps(gap_a, gap_b))
    # (without DataLoader spans there is nothing to take off: x - 0.0 is x)
    tl.gap_op.extend([x if x > 0.0 else 0.0 for x in (map(sub, op, dl) if len(cs.dataloader) else op)])
    assert isinstance(tl.events, list)  # (not frozen yet)
    tl.events.extend(events)
    tl.alloc_sync.extend([kind == SYNC and name in ALLOC_SYNCS for name, kind in zip(names, kinds)])
    return cursor


def _caps(names: list[str], took: list[float], kinds: list[int]) -> dict[str, float]:
    """The most a launch call of each name counts: max(4 m, m + 30 µs), m the typical cost of the launches of
    that name (``_median`` of their durations), from the distinct (name, duration) pairs counted at once."""
    counts = Counter(compress(zip(names, took), map(eq, kinds, repeat(LAUNCH))))
    by_name: dict[str, dict[float, int]] = {}
    for (name, d), c in counts.items():
        of_name = by_name.get(name)
        if of_name is None:
            by_name[name] = {d: c}
        else:
            of_name[d] = c
    cap: dict[str, float] = {}
    for name, of_name in by_name.items():
        m = _counted_median(of_name, sum(of_name.values()))
        cap[name] = max(4 * m, m + 30.0)
    return cap


def _steps(ts: list[float], starts: list[float]) -> list[int]:
    """The step of each action (``ts``: their starts, in time order): the last window starting before it
    (bisect_left(starts, t + 1e-9) - 1), the first window for those before every window; the windows' bounds
    found by bisection, not each action's step."""
    if not all(map(le, starts, islice(starts, 1, None))):  # windows out of order (a trace built by hand)
        return [max(0, bisect_left(starts, t + 1e-9) - 1) for t in ts]
    out: list[int] = []
    done = 0
    for k, a in enumerate(starts):  # the actions from ``done`` to the first after ``a`` are in window k - 1
        first = first_after(ts, a)
        out += [k - 1 if k > 1 else 0] * (first - done)
        done = first
    out += [len(starts) - 1 if len(starts) > 1 else 0] * (len(ts) - done)
    return out


def _median(values: list[float]) -> float:
    """``sorted(values)[len(values) // 2]``, sorting each distinct value once: a launch's duration takes a
    few thousand distinct values (the trace's resolution), and sorting a third of a million of them took
    longer than counting them."""
    return _counted_median(Counter(values), len(values))


def _counted_median(counts: dict[float, int], n: int) -> float:
    """``_median`` of ``n`` values, from how many times each distinct one occurs."""
    k = n // 2
    for value in sorted(counts):
        k -= counts[value]
        if k < 0:
            return value
    raise ValueError("median of no values")


def _latency(gpu: list[GpuEvent], att: Attribution, rts: list[CpuEvent]) -> float:
    """Launch-return to kernel-start delay when the queue is empty (p10 of the positive delays)."""
    ds = []
    for g, j in zip(islice(gpu, 200000), att.launch):
        if j >= 0 and g.kind == "kernel":
            r = rts[j]
            d = g.ts - (r.ts + r.dur)
            if d > 0:
                ds.append(d)
    if not ds:
        return 3.0
    ds.sort()
    return min(20.0, ds[len(ds) // 10])
