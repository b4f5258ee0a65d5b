"""Replay a profiled window as two timelines, the CPU issuing work and the GPU running it, so that
"what would the step take if ..." has an answer that respects how they interact.

The CPU side is the sequence of *actions* on its critical path (all threads merged by time): kernel,
copy and graph launches, and blocking synchronizations. Between two actions the CPU does *work*
(Python, operator dispatch, data loading, allocator calls), measured from the trace and split by
what it overlapped. The GPU side is every launched event with its measured duration, on its
stream: an event starts when it has been launched (plus the launch latency) and its stream is
free, plus the bubble it had in the trace that neither explains (a cross-stream wait, say). A sync
holds the CPU until the GPU has drained.

Replayed unchanged, the model reproduces the profiled window (``fit``). Scaling the CPU work by
``cpu_scale`` removes the profiler's inflation of CPU-side time; a scenario (no syncs, no data
loading on the main thread, CUDA-graph dispatch, faster kernels) changes one thing and replays.
The recoverable time of a fix is the difference between the two replays, so a faster kernel on
a CPU-bound step recovers nothing, and removing a sync from a GPU-bound loop recovers only the
idle it caused.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from itertools import accumulate, islice
from operator import sub
from typing import Any, Iterable, Iterator, MutableSequence, Sequence

LAUNCH, SYNC, COPY_SYNC = 0, 1, 2
SYNC_OVERHEAD_US = 8.0  # a synchronize call on an idle GPU (H100, torch 2.11): the part of a wait that stays
GRAPH_US_PER_KERNEL = 1.0  # measured: ≈1 µs per kernel replayed from a CUDA graph (H100, torch 2.11)


def _doubles() -> array[float]:
    return array("d")


def _longs() -> array[int]:
    return array("q")


def _bytes() -> array[int]:
    return array("b")


@dataclass
class Timeline:
    """The replayable window. CPU actions in time order (parallel columns) and GPU events. Its columns are
    arrays (a column given as a list becomes one when the timeline is frozen), its events a list of lists until
    then."""
    t0: float  # window start (first step's CPU start), µs
    n_steps: int
    tail_us: float  # CPU work after the last action until the last window ends
    kind: MutableSequence[int] = field(default_factory=_bytes)
    dur: MutableSequence[float] = field(default_factory=_doubles)  # the action's own CPU time (a sync: its fixed overhead)
    step: MutableSequence[int] = field(default_factory=_longs)
    gap: MutableSequence[float] = field(default_factory=_doubles)  # CPU work before the action
    gap_dl: MutableSequence[float] = field(default_factory=_doubles)  # ... of which inside the DataLoader's __next__
    gap_alloc: MutableSequence[float] = field(default_factory=_doubles)  # ... inside allocator calls / empty_cache
    gap_op: MutableSequence[float] = field(default_factory=_doubles)  # ... inside operators (dispatch: what a graph removes)
    alloc_sync: MutableSequence[int] = field(default_factory=_bytes)  # a sync made by the allocator (cudaFree): 1
    events: list[list[int]] | Ragged = field(default_factory=list)  # GPU events each launch enqueues
    g_dur: MutableSequence[float] = field(default_factory=_doubles)
    g_stream: MutableSequence[int] = field(default_factory=_longs)
    g_bubble: MutableSequence[float] = field(default_factory=_doubles)
    g_dep: MutableSequence[int] = field(default_factory=_bytes)  # waited for another stream (1): starts after the device's last end
    g_index: MutableSequence[int] = field(default_factory=_longs)  # the analysed device's event index of each GPU event
    g_action: MutableSequence[int] = field(default_factory=_longs)  # the action that launches each GPU event
    latency_us: float = 3.0
    _positions: array[int] | None = field(default=None, repr=False, compare=False)
    _plan: _Plan | None = field(default=None, repr=False, compare=False)  # see freeze()
    _prev: array[int] | None = field(default=None, repr=False, compare=False)  # see prev_on_stream()

    def freeze(self) -> Timeline:
        """Mark the timeline complete: the replays then derive what they need from its structure (which
        event each action launches, stream slots) once, not once per replay (a summary runs a dozen or
        more). Nothing may change it afterwards."""
        # The durations and gaps every replay reads, as arrays of doubles (the same values to the last bit): side
        # by side in memory, where the events' own floats are spread over the gigabyte a large trace was decoded
        # into (a replay reading them there took twice as long), and a third of the memory of a list of floats
        self.gap, self.gap_dl, self.gap_alloc, self.gap_op, self.dur, self.g_dur, self.g_bubble = (
            _array("d", xs) for xs in (self.gap, self.gap_dl, self.gap_alloc, self.gap_op, self.dur, self.g_dur,
                                       self.g_bubble))
        # and the integer columns as arrays of their width, the events of each action as one flat array: the
        # same values, in a fifth of the memory of lists of a 1 GB trace's 340k actions (lists of lists of
        # int objects: 60 MB), where the replay reads them no slower
        self.kind, self.alloc_sync, self.g_dep = (_array("b", xs) for xs in (self.kind, self.alloc_sync, self.g_dep))
        self.step, self.g_stream, self.g_index, self.g_action = (
            _array("q", xs) for xs in (self.step, self.g_stream, self.g_index, self.g_action))
        if not isinstance(self.events, Ragged):
            self.events = Ragged.of(self.events)
        self._plan = _Plan(self)
        return self

    def prev_on_stream(self) -> array[int]:
        """Per GPU event, the position of the event before it on its stream, in start order (-1: the first);
        built once (each fix that merges kernels asks)."""
        if self._prev is None:
            last: dict[int, int] = {}
            prev = self._prev = array("q", [-1]) * len(self.g_stream)
            for k, st in enumerate(self.g_stream):
                prev[k] = last.get(st, -1)
                last[st] = k
        return self._prev

    def positions(self) -> array[int]:
        """Each GPU event's position here, indexed by its index among the analysed device's events (-1: not
        here; where an index comes twice, its later position), built once: every fix's scenario asks, and the
        timeline no longer changes by then. An array, 3 MB where a dict of a 1 GB trace's 340k events took 40."""
        if self._positions is None:
            if any(gi < 0 for gi in self.g_index):
                raise ValueError("a negative event index")
            at = self._positions = array("q", [-1]) * (max(self.g_index, default=-1) + 1)
            for k, gi in enumerate(self.g_index):
                at[gi] = k
        return self._positions

    def add(self, kind: int, dur: float, step: int, gap: float, dl: float, alloc: float, op: float,
            events: list[int], alloc_sync: bool = False) -> None:
        assert isinstance(self.events, list), "a frozen timeline does not change"
        self.kind.append(kind)
        self.dur.append(dur)
        self.step.append(step)
        self.gap.append(gap)
        self.gap_dl.append(dl)
        self.gap_alloc.append(alloc)
        self.gap_op.append(op)
        self.events.append(events)
        self.alloc_sync.append(alloc_sync)


def _array(code: str, xs: Iterable[Any]) -> array[Any]:
    """``xs`` as an array of ``code``: itself where it is one already (a timeline received whole)."""
    return xs if isinstance(xs, array) and xs.typecode == code else array(code, xs)


class Ragged(Sequence[Sequence[int]]):
    """A list of lists of ints as one flat array and where each list ends: ``r[i]`` is the i-th list, as an
    array."""

    __slots__ = ("flat", "ends")

    def __init__(self, flat: array[int], ends: array[int]) -> None:
        if len(ends) and (ends[0] < 0 or ends[-1] != len(flat) or any(a > b for a, b in zip(ends, ends[1:]))):
            raise ValueError("ends out of order")
        self.flat, self.ends = flat, ends

    @classmethod
    def of(cls, lists: Iterable[Sequence[int]]) -> Ragged:
        lists = list(lists)
        return cls(array("q", [x for xs in lists for x in xs]), array("q", accumulate(map(len, lists))))

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, i: int) -> array[int]:  # type: ignore[override]
        if i < 0:
            i += len(self.ends)
        return self.flat[self.ends[i - 1] if i else 0:self.ends[i]]

    def __iter__(self) -> Iterator[array[int]]:
        flat, start = self.flat, 0
        for end in self.ends:
            yield flat[start:end]
            start = end


@dataclass(frozen=True)
class Scenario:
    """One change to replay. Defaults replay the trace as recorded."""
    name: str = "as recorded"
    keep_sync: str = "all"  # "all" | "last-per-step"
    no_dataloader: bool = False
    no_allocator: bool = False
    graph: bool = False  # dispatch replaced by CUDA-graph replay
    g_dur: Sequence[float] | None = None  # new GPU durations (same indexing as Timeline.g_dur)
    g_bubble: Sequence[float] | None = None
    no_dispatch: frozenset[int] = frozenset()  # launches that disappear (their op is fused into another)
    # actions a graph leaves eager: the optimizer step's, which compiling the model does not capture
    eager: frozenset[int] = frozenset()


def replay(t: Timeline, cpu_scale: float = 1.0, sc: Scenario = Scenario()) -> float:
    """Total µs of the window under ``sc`` with CPU work scaled by ``cpu_scale``."""
    return _replay(t, cpu_scale, sc)


def _replay(t: Timeline, cpu_scale: float, sc: Scenario) -> float:
    # One pass over every action and GPU event per replay, and a summary asks for a dozen or more: the loop
    # zips plain lists, takes the common action (a launch of one GPU event) inline, and compares rather
    # than calling max(). The arithmetic is the model's, in the same order, so every replay gives the same
    # figure to the last bit.
    plan, gap, own, scale = _cpu_inputs(t, sc, cpu_scale)
    g_dur = sc.g_dur if sc.g_dur is not None else t.g_dur
    g_bub = sc.g_bubble if sc.g_bubble is not None else t.g_bubble
    skip = plan.skipped(t, sc)
    dep, stream = t.g_dep, plan.stream
    t0 = t.t0
    free = [t0] * (plan.n_streams or 1)  # when each stream is next free (a slot for ``at`` where there is none)
    gpu_end = cpu = t0
    lat = t.latency_us
    sync_us = SYNC_OVERHEAD_US * cpu_scale
    kinds, events = t.kind, t.events
    # the stream of the latest launch, whose free time is held in ``f`` rather than in ``free`` (consecutive launches
    # go to the same stream, most often): written back before a launch on another stream and around _enqueue
    at, f = 0, t0
    for work, d, e, s in zip(gap, own, plan.one, plan.one_stream):
        if work > 0.0:
            cpu += work * cpu_scale
        if e >= 0:  # a launch of one GPU event that waits for no other stream: _enqueue's steps, inline
            cpu += d * scale
            ready = cpu + lat
            if s != at:
                free[at] = f
                f = free[s]
                at = s
            start = f + g_bub[e]
            if not start > ready:
                start = ready
            f = start + g_dur[e]
            if f > gpu_end:
                gpu_end = f
            continue
        i = -1 - e
        kind = kinds[i]
        if kind != SYNC:
            cpu += d * scale
            free[at] = f
            gpu_end = _enqueue(events[i], cpu + lat, gpu_end, free, stream, g_bub, dep, g_dur)
            f = free[at]
        if kind != LAUNCH and (skip is None or i not in skip):
            cpu += sync_us
            if gpu_end > cpu:
                cpu = gpu_end
    cpu += t.tail_us * cpu_scale
    return max(cpu, gpu_end) - t0


def _enqueue(evs: Sequence[int], ready: float, gpu_end: float, free: list[float], stream: Sequence[int],
             g_bub: Sequence[float], dep: Sequence[int], g_dur: Sequence[float]) -> float:
    """Run the GPU events ``evs``, launched together and ready at ``ready``, each when its stream is free
    (after its bubble) and, where it waited for another stream, after the device's last end; updates
    ``free`` and returns the device's last end."""
    for e in evs:
        s = stream[e]
        b = g_bub[e]
        start = free[s] + b
        if not start > ready:
            start = ready
        if dep[e]:
            after = gpu_end + b
            if after > start:
                start = after
        end = start + g_dur[e]
        free[s] = end
        if end > gpu_end:
            gpu_end = end
    return gpu_end


def _cpu_inputs(t: Timeline, sc: Scenario, cpu_scale: float) -> tuple[_Plan, Sequence[float], Sequence[float], float]:
    """The timeline's plan, the CPU work before each action under ``sc``, and each launch's own CPU time as
    ``own[i] * scale``: under a graph, a fixed cost per kernel (scaled by 1.0, which leaves it exact); a
    launch whose op is fused away costs 0.0."""
    plan = t._plan or _Plan(t)
    changed = sc.no_dataloader or sc.no_allocator or sc.graph or sc.no_dispatch
    gap = plan.work(t, sc) if changed else t.gap
    if sc.graph:
        if not sc.eager:
            return plan, gap, plan.graph_own, 1.0
        mixed = array("d", plan.graph_own)  # (scaled here: the graph's own cost is not)
        for i in sc.eager:
            if 0 <= i < len(mixed):
                mixed[i] = 0.0 if i in sc.no_dispatch else t.dur[i] * cpu_scale
        return plan, gap, mixed, 1.0
    own: Sequence[float] = t.dur
    if sc.no_dispatch:
        own = mine = array("d", own)
        for i in sc.no_dispatch:
            if 0 <= i < len(mine):
                mine[i] = 0.0
    return plan, gap, own, cpu_scale


class _Plan:
    """What a replay derives from the timeline's structure alone, whatever the scenario."""

    def __init__(self, t: Timeline) -> None:
        # per action: the GPU event it launches when it is a launch of exactly one that waits for no other
        # stream (the replay's common case, taken inline), else -1 - its index; and that event's stream slot
        # (from where each action's events start and end in the flat array: no list or slice per action)
        events = t.events if isinstance(t.events, Ragged) else Ragged.of(t.events)
        flat, ends, dep = events.flat, events.ends, t.g_dep
        starts = array("q", [0])
        starts.extend(islice(ends, max(0, len(ends) - 1)))
        self.one = array("q", [flat[a] if k == LAUNCH and b - a == 1 and not dep[flat[a]] else -1 - i
                               for i, (k, a, b) in enumerate(zip(t.kind, starts, ends))])
        slots: dict[int, int] = {}
        self.stream = array("q", [slots.setdefault(s, len(slots)) for s in t.g_stream])  # each event's stream slot
        self.one_stream = array("q", [self.stream[e] if e >= 0 else -1 for e in self.one])
        self.n_streams = len(slots)
        self.graph_own = array("d", [GRAPH_US_PER_KERNEL * (b - a) for a, b in zip(starts, ends)])
        # what a scenario changes on the CPU side, by what it removes (not by the CPU scale: a summary replays the
        # same scenario at two or three scales)
        self._work: dict[tuple[bool, bool, bool, frozenset[int], frozenset[int]], Sequence[float]] = {}
        self._skipped: dict[tuple[bool, str], set[int] | None] = {}

    def work(self, t: Timeline, sc: Scenario) -> Sequence[float]:
        """``_cpu_work(t, sc)``, worked out once per change of the CPU work for a frozen timeline (one not yet
        frozen may still change: nothing is kept)."""
        key = (sc.no_dataloader, sc.no_allocator, sc.graph, sc.no_dispatch, sc.eager)
        out = self._work.get(key)
        if out is None:
            out = _cpu_work(t, sc)
            if t._plan is self:
                self._work[key] = out = array("d", out)
        return out

    def skipped(self, t: Timeline, sc: Scenario) -> set[int] | None:
        """``_skipped_syncs(t, sc)``, worked out once per change of the syncs for a frozen timeline."""
        key = (sc.no_allocator, sc.keep_sync)
        if key in self._skipped:
            return self._skipped[key]
        out = _skipped_syncs(t, sc)
        if t._plan is self:
            self._skipped[key] = out
        return out


def _cpu_work(t: Timeline, sc: Scenario) -> Sequence[float]:
    """The CPU work before each action under ``sc`` (unscaled; the replay counts it where positive)."""
    gone = sc.no_dispatch
    out: MutableSequence[float] = array("d", t.gap)
    # each removal a pass over every action, in the model's order (data loading, allocator, dispatch), so
    # that every action's figure is the same subtraction to the last bit
    if sc.no_dataloader:
        out = array("d", map(sub, out, t.gap_dl))
    if sc.no_allocator:
        out = array("d", map(sub, out, t.gap_alloc))
    if sc.graph:
        eager = sc.eager - gone  # (an eager launch fused away goes as it would without the graph)
        out = array("d", map(sub, out, t.gap_op) if not eager else
                    (w if i in eager else w - op for i, (w, op) in enumerate(zip(out, t.gap_op))))
    else:  # only some launches go: only theirs change
        for i in gone:
            if 0 <= i < len(out):
                out[i] -= t.gap_op[i]
    return out


def _skipped_syncs(t: Timeline, sc: Scenario) -> set[int] | None:
    """The syncs the scenario takes away (None: none)."""
    skip: set[int] = set()
    if sc.no_allocator:
        skip = {i for i, a in enumerate(t.alloc_sync) if a}
    if sc.keep_sync == "last-per-step":
        last = _last_sync_per_step(t)
        skip |= {i for i, k in enumerate(t.kind) if k != LAUNCH and i not in last}
    return skip or None


def _last_sync_per_step(t: Timeline) -> set[int]:
    last: dict[int, int] = {}
    for i, k in enumerate(t.kind):
        if k != LAUNCH and not t.alloc_sync[i]:
            last[t.step[i]] = i
    return set(last.values())


def solve_scale(t: Timeline, target_us: float, lo: float = 0.2) -> float:
    """The CPU scale at which the replayed window takes ``target_us`` (bisection: the replay is
    non-decreasing in the scale). 1.0 when even the recorded CPU speed is not slower than the target."""
    if replay(t, 1.0) <= target_us:
        return 1.0
    if replay(t, lo) >= target_us:
        return lo
    a, b = lo, 1.0
    for _ in range(30):
        m = (a + b) / 2
        if replay(t, m) > target_us:
            b = m
        else:
            a = m
    return (a + b) / 2
