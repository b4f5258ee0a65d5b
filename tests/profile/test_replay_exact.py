"""The replay, the CPU-gap overlaps and the typical launch cost are written for speed (plain lists zipped,
comparisons instead of max(), gaps walked in time order, distinct values counted): each must give the figures
of the plain statement to the last bit, on random timelines with every kind of action (syncs, copy-syncs,
launches of several events or none, several streams, cross-stream waits) and every kind of scenario. So must
the shortcuts around it: the union of intervals already in order, the actions' steps found by the windows'
bounds, the bubbles a merging fix removes found from the changed events alone, the actions' columns taken in
one pass over the runtime calls, the typical launch costs from the distinct (name, duration) pairs, and the
CPU spans merged as the operators come."""

from __future__ import annotations

import random
from collections import Counter
from bisect import bisect_left

from hypothesis import given, settings
from hypothesis import strategies as st

from perfstack.profile.actions import Calls, Work, _actions, _caps, _counted_median, _steps
from perfstack.profile.cpu import (ALLOC_CALLS, ALLOC_SYNCS, BLOCKING_COPIES, GRAPH_LAUNCHES, KERNEL_LAUNCHES, SYNC_CALLS,
                                   SYNC_OPS, spans)
from perfstack.profile.simulate import (COPY_SYNC, GRAPH_US_PER_KERNEL, LAUNCH, SYNC, SYNC_OVERHEAD_US, Scenario,
                                        Timeline, replay)
from perfstack.profile.summary import _fix_scenario
from perfstack.profile.timeline import Spans, union, union_in_order
from perfstack.profile.trace import CpuEvent, GpuEvent, Trace
from perfstack.profile.waste import Waste


def reference(t: Timeline, cpu_scale: float, sc: Scenario) -> float:
    """The model stated plainly: one action after another, each GPU event after its launch and its stream."""
    g_dur = sc.g_dur if sc.g_dur is not None else t.g_dur
    g_bub = sc.g_bubble if sc.g_bubble is not None else t.g_bubble
    skip = skipped(t, sc)
    free = dict.fromkeys(t.g_stream, t.t0)
    gpu_end = cpu = t.t0
    for i, kind in enumerate(t.kind):
        work = t.gap[i]
        if sc.no_dataloader:
            work -= t.gap_dl[i]
        if sc.no_allocator:
            work -= t.gap_alloc[i]
        graphed = sc.graph and i not in sc.eager  # (the optimizer's launches a compiled model leaves eager)
        if graphed or i in sc.no_dispatch:
            work -= t.gap_op[i]
        if work > 0.0:
            cpu += work * cpu_scale
        if kind != SYNC:
            evs = t.events[i]
            if graphed:
                cpu += GRAPH_US_PER_KERNEL * len(evs)
            elif i in sc.no_dispatch:
                cpu += 0.0
            else:
                cpu += t.dur[i] * cpu_scale
            ready = cpu + t.latency_us
            for e in evs:
                start = max(free[t.g_stream[e]] + g_bub[e], ready)
                if t.g_dep[e]:
                    start = max(start, gpu_end + g_bub[e])
                free[t.g_stream[e]] = start + g_dur[e]
                gpu_end = max(gpu_end, start + g_dur[e])
        if kind != LAUNCH and i not in skip:
            cpu = max(cpu + SYNC_OVERHEAD_US * cpu_scale, gpu_end)
    cpu += t.tail_us * cpu_scale
    return max(cpu, gpu_end) - t.t0


def skipped(t: Timeline, sc: Scenario) -> set[int]:
    """The syncs a scenario takes away: the allocator's, or all but the last of each step."""
    skip: set[int] = set()
    if sc.no_allocator:
        skip = {i for i, a in enumerate(t.alloc_sync) if a}
    if sc.keep_sync == "last-per-step":
        last: dict[int, int] = {}
        for i, k in enumerate(t.kind):
            if k != LAUNCH and not t.alloc_sync[i]:
                last[t.step[i]] = i
        skip |= {i for i, k in enumerate(t.kind) if k != LAUNCH and i not in last.values()}
    return skip


def random_timeline(rng: random.Random, n: int) -> Timeline:
    t = Timeline(t0=rng.uniform(0, 1e9), n_steps=3, tail_us=rng.uniform(0, 500), latency_us=rng.uniform(0, 20))

    def us() -> float:
        return rng.choice([0.0, rng.uniform(0, 5), rng.uniform(0, 500), rng.expovariate(0.01)])

    launched = []
    for i in range(n):
        kind = rng.choices([LAUNCH, SYNC, COPY_SYNC], [8, 1, 1])[0]
        evs = []
        if kind != SYNC:
            for _ in range(rng.choices([0, 1, 2, 5], [1, 12, 2, 1])[0]):
                evs.append(len(t.g_dur))
                t.g_dur.append(us())
                t.g_stream.append(rng.choice([7, 7, 7, 13, 22]))
                t.g_bubble.append(us() if rng.random() < 0.5 else 0.0)
                t.g_dep.append(rng.random() < 0.1)
                t.g_action.append(i)
                launched.append(evs[-1])
        gap = us() - (rng.uniform(0, 3) if rng.random() < 0.1 else 0.0)  # a scenario's work may go negative
        t.add(kind, us(), i * 3 // n, gap, rng.uniform(0, gap) if gap > 0 and rng.random() < 0.3 else 0.0,
              rng.uniform(0, gap) if gap > 0 and rng.random() < 0.3 else 0.0, rng.uniform(0, gap) if gap > 0 else 0.0,
              evs, kind == SYNC and rng.random() < 0.3)
    # the timeline keeps its events in start order, which is not always their launch order
    order = list(range(len(t.g_dur)))
    rng.shuffle(order)
    t.g_index.extend(order)
    return t


def scenarios(rng: random.Random, t: Timeline) -> list[Scenario]:
    n, m = len(t.kind), len(t.g_dur)
    faster = [d * rng.choice([0.5, 1.0]) for d in t.g_dur]
    merged = [0.0 if rng.random() < 0.5 else b for b in t.g_bubble]
    gone = frozenset(rng.sample(range(n), min(n, 5)) + [n + 3, -1])  # indices outside the timeline change nothing
    return [Scenario(), Scenario(keep_sync="last-per-step"), Scenario(no_dataloader=True),
            Scenario(no_allocator=True), Scenario(graph=True), Scenario(g_dur=faster, g_bubble=merged),
            Scenario(g_dur=faster, no_dispatch=gone), Scenario(graph=True, g_dur=faster, no_dispatch=gone,
                                                                  no_allocator=True, keep_sync="last-per-step"),
            Scenario(g_dur=[1.0] * m), Scenario(graph=True, eager=frozenset(rng.sample(range(n), n // 2))),
            Scenario(graph=True, g_dur=faster, no_dispatch=gone, eager=frozenset(rng.sample(range(n), n // 2)) | gone)]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**9), n=st.integers(1, 60), scale=st.sampled_from([1.0, 0.7234, 0.2, 0.3547]))
def test_the_replay_gives_the_plain_models_figures_to_the_last_bit(seed, n, scale):
    rng = random.Random(seed)
    t = random_timeline(rng, n)
    for sc in scenarios(rng, t):
        want = reference(t, scale, sc)
        assert replay(t, scale, sc) == want  # exactly: not approx
    t.freeze()  # what a replay derives from the structure, built once: the same figures
    for sc in scenarios(random.Random(seed), t):
        assert replay(t, scale, sc) == reference(t, scale, sc)
    # and what it derives from a scenario's CPU side, kept for the next replay of the same change at another scale
    more = [Scenario(graph=True, g_dur=[0.5] * len(t.g_dur)), Scenario(no_dispatch=frozenset([0])),
            Scenario(no_allocator=True, keep_sync="last-per-step")]
    for sc in scenarios(random.Random(seed), t) + more:
        for other in (1.0, 0.5, scale):
            assert replay(t, other, sc) == reference(t, other, sc)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**9))
def test_overlaps_of_many_gaps_are_each_gaps_overlap(seed):
    rng = random.Random(seed)
    spans = Spans((s, s + rng.choice([0.0, rng.uniform(0, 50)])) for s in (rng.uniform(0, 1000) for _ in range(40)))
    pairs = []
    cursor = 0.0
    for _ in range(rng.randrange(60)):
        if rng.random() < 0.8:  # a timeline's gaps: in time order, some empty
            a = cursor
            b = max(a, a + rng.uniform(-5, 60))
            cursor = b + rng.uniform(0, 20)
        else:  # any interval
            a = rng.uniform(-50, 1100)
            b = a + rng.uniform(-10, 200)
        pairs.append((a, b))
    got = spans.overlaps([a for a, _ in pairs], [b for _, b in pairs])
    assert got == [spans.overlap(a, b) for a, b in pairs]
    assert Spans([]).overlaps([0.0, 1.0], [5.0, 2.0]) == [0.0, 0.0]


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.one_of(st.sampled_from([0.0, 3.0, 4.5]), st.floats(0, 1e4)), min_size=1, max_size=80))
def test_the_typical_launch_cost_is_the_sorted_middle_value(values):
    assert _counted_median(Counter(values), len(values)) == sorted(values)[len(values) // 2]


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**9))
def test_the_union_of_intervals_in_order_is_the_union(seed):
    rng = random.Random(seed)
    starts = sorted(rng.choice([0.0, 5.0, rng.uniform(0, 100)]) for _ in range(rng.randrange(40)))
    pairs = [(s, s + rng.choice([0.0, -1.0, rng.uniform(0, 30)])) for s in starts]  # same starts in any order
    assert union_in_order(pairs) == union(pairs)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**9))
def test_each_actions_step_is_the_window_bisection_finds(seed):
    rng = random.Random(seed)
    ts = sorted(rng.choice([0.0, 10.0, 10.0 - 1e-10, rng.uniform(-5, 60)]) for _ in range(rng.randrange(50)))
    starts = sorted(rng.choice([0.0, 10.0, rng.uniform(0, 50)]) for _ in range(rng.randrange(6)))
    if rng.random() < 0.2:
        rng.shuffle(starts)  # windows out of order: the bisection's answer all the same
    assert _steps(ts, starts) == [max(0, bisect_left(starts, t + 1e-9) - 1) for t in ts]


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 10**9), frozen=st.booleans())
def test_a_merging_fix_takes_the_bubbles_between_its_changed_events_on_a_stream(seed, frozen):
    rng = random.Random(seed)
    t = random_timeline(rng, rng.randrange(1, 60))
    if frozen:
        t.freeze()
    w = Waste("unfused-elementwise", new_dur={gi: 0.5 for gi in t.g_index if rng.random() < 0.5})
    w.new_dur[len(t.g_index) + 7] = 1.0  # an event not in the timeline changes nothing
    want = list(t.g_bubble)
    prev: dict[int, int] = {}
    for k, (gi, stream) in enumerate(zip(t.g_index, t.g_stream)):  # in start order
        if gi in w.new_dur and prev.get(stream) in w.new_dur:
            want[k] = 0.0
        prev[stream] = gi
    assert list(_fix_scenario(w, None, t, True).g_bubble or ()) == want  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**9))
def test_the_typical_cost_of_each_launch_name_is_the_median_of_its_launches(seed):
    rng = random.Random(seed)
    n = rng.randrange(40)
    names = [rng.choice(["cudaLaunchKernel", "cuLaunchKernel", "cudaMemcpyAsync"]) for _ in range(n)]
    took = [rng.choice([0.0, 3.0, 4.5, 4.5, rng.uniform(0, 100)]) for _ in range(n)]
    kinds = [rng.choice([LAUNCH, LAUNCH, SYNC, COPY_SYNC]) for _ in range(n)]
    typical: dict[str, list[float]] = {}
    for name, d, kind in zip(names, took, kinds):
        if kind == LAUNCH:
            typical.setdefault(name, []).append(d)
    want = {name: max(4 * m, m + 30.0) for name, m in ((name, sorted(v)[len(v) // 2]) for name, v in typical.items())}
    assert _caps(names, took, kinds) == want


def plain_actions(t: Timeline, rts, gpu, by_launch, at, t0, t_end):
    """The actions as the model states them: each modelled call as a (start, index, kind) tuple, sorted."""
    cand = []
    for j in range(bisect_left([r.ts for r in rts], t0), len(rts)):
        r = rts[j]
        if r.ts >= t_end:
            break
        if j in by_launch:
            evs = by_launch[j]
            began = min(gpu[i].ts for i in evs)
            blocking = r.name in BLOCKING_COPIES or (began < r.ts + r.dur and r.dur > 20.0
                                                     and r.name not in KERNEL_LAUNCHES and r.name not in GRAPH_LAUNCHES)
            cand.append((r.ts, j, COPY_SYNC if blocking else LAUNCH))
        elif r.name in SYNC_CALLS or r.name in BLOCKING_COPIES or r.name in ALLOC_SYNCS:
            cand.append((r.ts, j, SYNC))
    cand.sort()
    g_action = [-1] * len(t.g_action)
    events = []
    for i, (_, j, _) in enumerate(cand, len(t.kind)):
        evs = sorted(at[e] for e in by_launch.get(j, []))
        for e in evs:
            g_action[e] = i
        events.append(evs)
    return ([c[0] for c in cand], [rts[j].name for _, j, _ in cand], [rts[j].dur for _, j, _ in cand],
            [c[2] for c in cand], events, g_action)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**9), in_order=st.booleans())
def test_the_actions_columns_are_the_sorted_calls(seed, in_order):
    rng = random.Random(seed)
    names = ["cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemcpy", "cudaStreamSynchronize", "cudaFree",
             "cudaGraphLaunch", "cudaEventRecord"]
    rts = [CpuEvent("runtime", rng.choice(names), rng.choice([10.0, 50.0, rng.uniform(0, 100)]),
                    rng.choice([1.0, 25.0, rng.uniform(0, 40)]), 1) for _ in range(rng.randrange(30))]
    rts.sort(key=lambda r: r.ts)
    if not in_order:  # a trace built by hand: some calls out of time order
        for _ in range(3):
            if len(rts) > 1:
                a, b = rng.randrange(len(rts)), rng.randrange(len(rts))
                rts[a], rts[b] = rts[b], rts[a]
    gpu = [GpuEvent("kernel", "k", rng.uniform(0, 120), 2.0, 0, 7, None, None, None) for _ in range(rng.randrange(40))]
    by_launch: dict[int, list[int]] = {}
    for i in range(len(gpu)):
        if rts and rng.random() < 0.8:
            by_launch.setdefault(rng.randrange(len(rts)), []).append(i)
    t = Timeline(t0=0.0, n_steps=1, tail_us=0.0)
    t.g_action.extend([-1] * len(gpu))
    at = list(range(len(gpu)))
    rng.shuffle(at)  # the events' positions in the timeline (start order)
    t0, t_end = rng.choice([0.0, 20.0]), rng.choice([90.0, 200.0])
    want = plain_actions(t, rts, gpu, by_launch, at, t0, t_end)
    calls = Calls([r.ts for r in rts], [r.dur for r in rts], [r.name for r in rts])
    work = Work([g.ts for g in gpu], [g.dur for g in gpu], [g.stream for g in gpu], [1] * len(gpu), [], [])
    got = _actions(t, calls, work, by_launch, at, t0, t_end)
    assert (list(got.ts), got.names, list(got.took), got.kinds, [list(evs) for evs in got.events],
            list(t.g_action)) == want


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**9))
def test_the_cpu_spans_are_the_unions_of_their_operators_and_calls(seed):
    rng = random.Random(seed)
    names = ["aten::add", "aten::mm", "aten::item", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
             "torch.cuda.empty_cache", "Optimizer.step#AdamW.step", "ProfilerStep#3", "enumerate(x)#y"]
    ops = sorted((CpuEvent(rng.choice(["op", "op", "annotation", "python_function"]), rng.choice(names),
                           rng.choice([5.0, rng.uniform(0, 100)]), rng.choice([0.0, 3.0, rng.uniform(0, 30)]), 1)
                  for _ in range(rng.randrange(40))), key=lambda o: o.ts)
    runtime = [CpuEvent("runtime", rng.choice(["cudaLaunchKernel", "cudaMalloc", "cudaStreamSynchronize", "cudaMemcpy"]),
                        rng.uniform(0, 100), rng.uniform(0, 10), 1) for _ in range(rng.randrange(10))]
    got = spans(Trace(path="t", ops=ops, runtime=runtime))

    def of(pairs):
        return Spans([(e.ts, e.ts + e.dur) for e in pairs])
    dl = [o for o in ops if o.name.startswith("enumerate(DataLoader)")]
    alloc = [o for o in ops if "empty_cache" in o.name] + [r for r in runtime if r.name in ALLOC_CALLS]
    sync = [o for o in ops if o.name in SYNC_OPS] + [r for r in runtime if r.name in SYNC_CALLS or r.name in BLOCKING_COPIES]
    dispatch = [o for o in ops if o.cat == "op" or (o.cat == "annotation" and "#" in o.name
                                                   and not o.name.startswith("enumerate("))]
    for a, b in zip((got.dataloader, got.alloc, got.sync, got.ops), (of(dl), of(alloc), of(sync), of(dispatch))):
        assert (list(a.starts), list(a.ends)) == (list(b.starts), list(b.ends))
