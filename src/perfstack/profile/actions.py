"""The replay timeline of a trace (``simulate.Timeline``): the runtime calls the replay models, as actions in
time order with the CPU gap before each and what filled it, and the GPU events they launch.

It is built from columns (``Calls``, ``Work``), not from the trace's events: a column of a million starts is
read side by side in memory, where the events' own floats are spread over the gigabyte a large trace was
decoded into, and columns travel to a second process as the bytes of their arrays (``replays``), which builds
the timeline there while this one sums up the steps. Either way the same code runs on the same doubles, so the
timeline is the same to the last bit.
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left
from collections import Counter
from itertools import compress, islice, repeat
from operator import attrgetter, eq, le, sub
from typing import TYPE_CHECKING, Any, List, NamedTuple, Sequence

from perfstack.profile.cpu import ALLOC_SYNCS, BLOCKING_COPIES, GRAPH_LAUNCHES, KERNEL_LAUNCHES, SYNC_CALLS, CpuSpans
from perfstack.profile.simulate import COPY_SYNC, LAUNCH, SYNC, Ragged, Timeline
from perfstack.profile.timeline import first_after

if TYPE_CHECKING:
    from perfstack.profile.attribute import Attribution
    from perfstack.profile.trace import Trace

_INF = float("inf")
Windows = List[Any]  # (step number, start, end) of each profiled step, in order


class Calls(NamedTuple):
    """The trace's runtime calls (``Trace.runtime``), in its order, as columns."""
    ts: Sequence[float]
    dur: Sequence[float]
    name: Sequence[str]


class Work(NamedTuple):
    """The analysed device's GPU events (``Attribution.gpu``), in its order, as columns, with each one's launch
    (an index of ``Calls``; -1: none) and step (-1: none)."""
    ts: Sequence[float]
    dur: Sequence[float]
    stream: Sequence[int]
    kernel: Sequence[int]  # 1 for a kernel, 0 for a copy or a memset
    launch: Sequence[int]
    step: Sequence[int]


def inputs(trace: Trace, att: Attribution, windows: Windows) -> tuple[Calls, Work] | None:
    """The columns ``build`` reads, taken from the trace once; None where there is no timeline to build (launches
    unknown, or no step)."""
    if att.method != "launch" or not windows:
        return None
    rts, gpu = trace.runtime, att.gpu
    calls = Calls(array("d", map(attrgetter("ts"), rts)), array("d", map(attrgetter("dur"), rts)),
                  list(map(attrgetter("name"), rts)))
    work = Work(array("d", map(attrgetter("ts"), gpu)), array("d", map(attrgetter("dur"), gpu)),
                list(map(attrgetter("stream"), gpu)), array("b", [g.kind == "kernel" for g in gpu]),
                att.launch, att.step)
    return calls, work


def timeline(trace: Trace, att: Attribution, windows: Windows, cs: CpuSpans) -> Timeline | None:
    """The replayable action sequence of the profiled steps, or None when launches are unknown."""
    columns = inputs(trace, att, windows)
    return build(*columns, windows, cs) if columns is not None else None


def build(calls: Calls, work: Work, windows: Windows, cs: CpuSpans) -> Timeline:
    """The frozen timeline of these columns (``windows``: at least one)."""
    # the events of each launch: most launch one, held as its index (a list for each of the 340k launches of a 1 GB
    # trace took 20 MB more)
    by_launch: dict[int, int | list[int]] = {}
    for i, (j, k) in enumerate(zip(work.launch, work.step)):
        if j >= 0 and k >= 0:
            evs = by_launch.get(j)
            if evs is None:
                by_launch[j] = i
            elif isinstance(evs, int):
                by_launch[j] = [evs, i]
            else:
                evs.append(i)
    t0, t_end = windows[0][1], windows[-1][2]
    tl = Timeline(t0=t0, n_steps=len(windows), tail_us=0.0)
    at = _gpu_events(tl, work, by_launch)
    tl.latency_us = _latency(work, calls)
    _bubbles(tl, work, calls, at)
    actions = _actions(tl, calls, work, by_launch, at, t0, t_end)
    del by_launch, at  # (tens of MB of a large trace, not held while the gaps are worked out)
    cursor = _add_actions(tl, actions, [a for _, a, _ in windows], cs)
    tl.tail_us = max(0.0, t_end - cursor)
    return tl.freeze()


class Actions(NamedTuple):
    """The actions of a timeline in start order, as parallel columns (arrays and one Ragged, not a list of floats
    and a list per action: 40 MB less for the 340k actions of a 1 GB trace)."""
    ts: Sequence[float]  # the runtime call's start
    names: list[str]
    took: Sequence[float]  # its duration
    kinds: list[int]  # LAUNCH, COPY_SYNC or SYNC
    events: Ragged  # the GPU events it launches (positions in the timeline, in order)


def _actions(tl: Timeline, calls: Calls, work: Work, by_launch: dict[int, int | list[int]], at: Sequence[int],
             t0: float, t_end: float) -> Actions:
    """The runtime calls of the profiled steps that the replay models, in start order: launches of
    attributed GPU work (a launch that waits for its work to begin is a copy-sync) and syncs; each GPU
    event's action set in ``tl.g_action``."""
    # one pass over the calls that yields every column the timeline takes from them (columns, not a tuple per
    # action taken apart again); the calls are in time order but for a trace built by hand: then sorted after
    ts, took = array("d"), array("d")
    names: list[str] = []
    kinds: list[int] = []
    flat, ends = array("q"), array("q")
    g_action = tl.g_action
    c_ts, c_dur, c_name, g_ts = calls.ts, calls.dur, calls.name, work.ts
    i = len(tl.kind)  # the next action's index
    last, in_order = -_INF, True
    for j in range(bisect_left(c_ts, t0), len(c_ts)):
        t = c_ts[j]
        if t >= t_end:
            break
        name = c_name[j]
        launched = by_launch.get(j)
        if launched is not None:
            if isinstance(launched, int):
                k = at[launched]
                flat.append(k)
                g_action[k] = i
            else:
                evs = sorted(at[e] for e in launched)
                flat.extend(evs)
                for k in evs:
                    g_action[k] = i
            # a call that returns only after its GPU work began (a pageable copy, a blocking memcpy) also
            # waits for the queue ahead of it: a launch followed by a sync (when its work began is looked up last:
            # most calls are kernel launches)
            d = c_dur[j]
            blocking = name in BLOCKING_COPIES or (d > 20.0 and name not in KERNEL_LAUNCHES and name not in GRAPH_LAUNCHES
                                                   and (g_ts[launched] if isinstance(launched, int)
                                                        else min(g_ts[e] for e in launched)) < t + d)
            kinds.append(COPY_SYNC if blocking else LAUNCH)
        elif name in SYNC_CALLS or name in BLOCKING_COPIES or name in ALLOC_SYNCS:
            d = c_dur[j]
            kinds.append(SYNC)
        else:
            continue
        if t < last:
            in_order = False
        last = t
        ts.append(t)
        names.append(name)
        took.append(d)
        ends.append(len(flat))
        i += 1
    events = Ragged(flat, ends)
    if in_order:
        return Actions(ts, names, took, kinds, events)
    order = sorted(range(len(ts)), key=ts.__getitem__)  # stable: calls starting together stay in trace order
    out = Actions(array("d", map(ts.__getitem__, order)), [names[k] for k in order],
                  array("d", map(took.__getitem__, order)), [kinds[k] for k in order],
                  Ragged.of([events[k] for k in order]))
    for i, moved in enumerate(out.events, len(tl.kind)):
        for k in moved:
            g_action[k] = i
    return out


def _gpu_events(tl: Timeline, work: Work, by_launch: dict[int, int | list[int]]) -> array[int]:
    """The attributed GPU events into the timeline, in start order (durations, streams; bubbles and
    dependencies are filled by ``_bubbles``, actions by ``_actions``); the position there of each event of
    ``work`` (-1: not there; an array indexed by event, not a dict: the passes after this look every event up)."""
    launched: list[int] = []
    for evs in by_launch.values():
        if isinstance(evs, int):
            launched.append(evs)
        else:
            launched += evs
    order = sorted(launched, key=work.ts.__getitem__)
    del launched
    first = len(tl.g_dur)
    tl.g_dur.extend(map(work.dur.__getitem__, order))
    tl.g_stream.extend(map(work.stream.__getitem__, order))
    tl.g_bubble.extend([0.0] * len(order))
    tl.g_dep.extend([False] * len(order))
    tl.g_index.extend(order)
    tl.g_action.extend([-1] * len(order))
    at = array("q", [-1]) * len(work.ts)
    for k, i in enumerate(order, first):
        at[i] = k
    return at


def _bubbles(tl: Timeline, work: Work, calls: Calls, at: Sequence[int]) -> None:
    """Each GPU event's bubble: the idle before it that neither its launch nor its stream explains."""
    # a pass over every event of the device: maxima written as comparisons (no call per event), each
    # choosing the same value max() would
    lat, bubble, dep = tl.latency_us, tl.g_bubble, tl.g_dep
    c_ts, c_dur = calls.ts, calls.dur
    prev_end: dict[int, float] = {}
    pending: list[float] = []  # ends of started events, soonest first
    push, pop = heapq.heappush, heapq.heappop
    last_done = -1e300  # the latest end, on any stream, at or before the current start
    # all events of the device, so pre-window work occupies its stream
    for ts, dur, stream, k, j in zip(work.ts, work.dur, work.stream, at, work.launch):
        soon = ts + 1.0
        while pending and pending[0] <= soon:
            done = pop(pending)
            if done > last_done:
                last_done = done
        before = prev_end.get(stream, -1e300)
        if k >= 0:
            own = c_ts[j] + c_dur[j] + lat
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
        end = ts + dur
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
    tl.dur.extend(m if (m := cap[name] if kind == LAUNCH else 8.0) < d else d for name, kind, d in zip(names, kinds, took))
    # the CPU gap before each action: from the end of the latest action before it (the first: from the window's
    # start) to its start; one loop for the three (the running maximum inline: max() called per action, and a
    # comprehension per figure, took twice as long); arrays, a third of the memory of lists of new floats
    gap_a, gap_b, gap = array("d"), array("d"), array("d")
    cursor = tl.t0
    for t, d in zip(ts, took):
        gap_a.append(cursor)
        b = t if t > cursor else cursor
        gap_b.append(b)
        gap.append(b - cursor)
        end = t + d
        if end > cursor:  # the value max(cursor, end) keeps
            cursor = end
    tl.kind.extend(kinds)
    tl.step.extend(_steps(ts, starts))
    tl.gap.extend(gap)
    # what filled each gap, one kind at a time (a list of new floats each, not held at once)
    dl = array("d", cs.dataloader.overlaps(gap_a, gap_b))  # an empty gap overlaps nothing: 0.0
    tl.gap_dl.extend(dl)
    tl.gap_alloc.extend(cs.alloc.overlaps(gap_a, gap_b))
    op = cs.ops.overlaps(gap_a, gap_b)
    # (without DataLoader spans there is nothing to take off: x - 0.0 is x)
    tl.gap_op.extend(x if x > 0.0 else 0.0 for x in (map(sub, op, dl) if len(cs.dataloader) else op))
    del dl, op
    assert isinstance(tl.events, list) and not tl.events  # (built once, into a new timeline)
    tl.events = events  # (freeze keeps it as it is)
    tl.alloc_sync.extend([kind == SYNC and name in ALLOC_SYNCS for name, kind in zip(names, kinds)])
    return cursor


def _caps(names: list[str], took: Sequence[float], kinds: list[int]) -> dict[str, float]:
    """The most a launch call of each name counts: max(4 m, m + 30 µs), m the typical cost of the launches of
    that name (``_counted_median`` of their durations), from the distinct (name, duration) pairs counted at once."""
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


def _steps(ts: Sequence[float], starts: list[float]) -> list[int]:
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


def _counted_median(counts: dict[float, int], n: int) -> float:
    """``sorted(values)[n // 2]`` of ``n`` values, from how many times each distinct one occurs: a launch's
    duration takes a few thousand distinct values (the trace's resolution), and sorting a third of a million of
    them took longer than counting them."""
    k = n // 2
    for value in sorted(counts):
        k -= counts[value]
        if k < 0:
            return value
    raise ValueError("median of no values")


def _latency(work: Work, calls: Calls) -> float:
    """Launch-return to kernel-start delay when the queue is empty (p10 of the positive delays)."""
    ds = []
    c_ts, c_dur = calls.ts, calls.dur
    for ts, kernel, j in zip(islice(work.ts, 200000), work.kernel, work.launch):
        if j >= 0 and kernel:
            d = ts - (c_ts[j] + c_dur[j])
            if d > 0:
                ds.append(d)
    if not ds:
        return 3.0
    ds.sort()
    return min(20.0, ds[len(ds) // 10])
