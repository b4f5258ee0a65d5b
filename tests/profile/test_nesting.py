"""How ops nest and what they inherit (per thread, when threads take turns), which copy operator owns an op,
and which step a CPU event counts in: the shortcuts a large trace needs give what the plain rules give."""

from __future__ import annotations

import random
from bisect import bisect_left, bisect_right
from types import SimpleNamespace

from perfstack.profile import analyze, copies
from perfstack.profile.attribute import CASTING, COMPILED, COPYING, launch_steps, nest
from perfstack.profile.trace import CpuEvent, Trace


def test_each_thread_keeps_its_own_open_ops_when_the_threads_take_turns():
    ops = [
        CpuEvent("op", "Optimizer.step#AdamW.step", 0.0, 100.0, 1),  # 0: thread 1, open until 100
        CpuEvent("op", "aten::linear", 10.0, 40.0, 2),  # 1: thread 2, while 0 is open on thread 1
        CpuEvent("op", "aten::mul_", 20.0, 10.0, 1),  # 2: inside 0, not inside 1
        CpuEvent("op", "aten::addmm", 25.0, 10.0, 2),  # 3: inside 1
        CpuEvent("op", "aten::relu", 60.0, 5.0, 2),  # 4: after 1 closed
    ]
    rts = [CpuEvent("runtime", "cudaLaunchKernel", 22.0, 2.0, 1),  # inside 2
           CpuEvent("runtime", "cudaLaunchKernel", 27.0, 2.0, 2),  # inside 3
           CpuEvent("runtime", "cudaLaunchKernel", 70.0, 2.0, 2)]  # inside nothing on thread 2
    info, rparent = nest(Trace(path="t", ops=ops, runtime=rts))
    assert list(info.parent) == [-1, -1, 0, 1, -1]
    assert list(rparent) == [2, 3, -1]
    assert info.phase == ["optimizer", "forward", "optimizer", "forward", "forward"]
    assert info.family == [None, "gemm", None, "gemm", None]


def test_copy_and_cast_flags_reach_every_op_below_them():
    ops = [
        CpuEvent("op", "aten::cat", 0.0, 50.0, 1),  # 0
        CpuEvent("op", "aten::copy_", 5.0, 10.0, 1),  # 1: a copy under a copy
        CpuEvent("op", "aten::to", 60.0, 30.0, 1),  # 2: a cast
        CpuEvent("op", "aten::copy_", 65.0, 10.0, 1),  # 3: a copy under a cast
        CpuEvent("op", "aten::add", 100.0, 10.0, 1),  # 4: neither
    ]
    info, _ = nest(Trace(path="t", ops=ops))
    assert [bool(f & COPYING) for f in info.flags] == [True, True, False, True, False]
    assert [bool(f & CASTING) for f in info.flags] == [False, False, True, True, False]
    assert not any(f & COMPILED for f in info.flags)
    A = SimpleNamespace(trace=SimpleNamespace(ops=ops), att=SimpleNamespace(ops=info))
    # the outermost copy operator owns the copy under it
    assert copies._root(A, 1) == 0 and copies._root(A, 0) == 0  # type: ignore[arg-type]


def test_step_ranges_by_bisection_give_each_event_the_step_the_plain_rule_gives():
    rng = random.Random(7)
    for _ in range(200):
        starts = sorted(rng.choice([0.0, 10.0, 20.0, 35.0, 50.0]) for _ in range(rng.randint(1, 4)))
        ends = [a + rng.choice([0.0, 5.0, 10.0, 15.0]) for a in starts]
        ts = sorted(rng.choice([-5.0, 0.0, 5.0, 10.0, 14.0, 20.0, 30.0, 35.0, 49.0, 50.0, 60.0])
                    for _ in range(rng.randint(0, 12)))
        want: list[list[int]] = [[] for _ in starts]
        for i, t in enumerate(ts):  # the rule _cpu_counts states: the last window starting before, if still open
            k = bisect_left(starts, t + 1e-9) - 1
            if k >= 0 and t < ends[k]:
                want[k].append(i)
        ranges = analyze._ranges(ts, starts, ends)
        assert ranges is not None
        assert [list(range(lo, hi)) for lo, hi in ranges] == want
    assert analyze._ranges([2.0, 1.0], [0.0], [5.0]) is None  # not in time order: the caller loops instead


def test_each_runtime_calls_step_by_the_windows_bounds_is_the_one_bisection_gives():
    # attribution gives a GPU event the step its launch starts in: the last window starting at or before the
    # call, if the call starts before that window ends; found per window where calls and windows are in order
    rng = random.Random(11)
    for _ in range(300):
        starts = sorted(rng.choice([0.0, 10.0, 20.0, 35.0, 50.0]) for _ in range(rng.randint(0, 4)))
        windows = [(k, a, a + rng.choice([0.0, 5.0, 10.0, 15.0, 30.0])) for k, a in enumerate(starts)]
        ts = sorted(rng.choice([-5.0, 0.0, 5.0, 10.0, 14.0, 20.0, 30.0, 35.0, 49.0, 50.0, 60.0, 80.0])
                    for _ in range(rng.randint(0, 12)))
        if rng.random() < 0.2:
            rng.shuffle(ts)  # calls out of order: each placed by bisection
        if rng.random() < 0.1:
            rng.shuffle(windows)  # windows out of order: the bisection's answer all the same
            starts = [a for _, a, _ in windows]
        want = []
        for t in ts:
            k = bisect_right(starts, t) - 1
            want.append(k if k >= 0 and t < windows[k][2] else -1)
        assert list(launch_steps(ts, windows)) == want


def test_nesting_merged_as_it_goes_is_the_nesting_of_the_sorted_sweep(monkeypatch):
    # where no two ops and no two runtime calls start together (a trace recorded to the nanosecond), the sweep
    # merges the two lists as it goes instead of sorting them: the same parents, contexts and innermost ops,
    # ties between an op and a call included, on several threads taking turns; where two ops do start together,
    # it stops there and the sort takes over
    from perfstack.profile import attribute

    names = ["aten::linear", "aten::addmm", "Optimizer.step#AdamW.step", "aten::copy_", "aten::to", "aten::mul",
             "autograd::engine::evaluate_function: AddmmBackward0"]
    rng = random.Random(5)
    for _ in range(300):
        n_ops, n_rts = rng.randint(0, 30), rng.randint(0, 20)
        grid = rng.sample(range(200), n_ops + n_rts)
        op_ts = sorted(rng.sample(range(200), n_ops))
        if rng.random() < 0.3:  # two ops starting together, or out of order: the sort after all, from scratch
            op_ts = sorted(rng.choices(range(40), k=n_ops)) if rng.random() < 0.5 else rng.sample(range(200), n_ops)
        rt_ts = sorted(rng.choice([rng.choice(op_ts or [0]), g]) for g in grid[n_ops:])  # some with an op's start
        rt_ts = sorted(set(rt_ts))
        durs = [0.0, 1.0, 2.0, 5.0, 20.0, 60.0]
        ops = [CpuEvent("op", rng.choice(names), float(t), rng.choice(durs), rng.choice([1, 2])) for t in op_ts]
        rts = [CpuEvent("runtime", "cudaLaunchKernel", float(t), rng.choice(durs), rng.choice([1, 2]))
               for t in rt_ts]
        trace = Trace(path="t", ops=ops, runtime=rts)
        info, rparent = nest(trace)
        with monkeypatch.context() as m:
            m.setattr(attribute, "_increasing", lambda ts: False)  # the sort and the sweep of the sorted order
            want, want_r = nest(trace)
        assert list(info.parent) == list(want.parent) and list(rparent) == list(want_r)
        assert (info.family, info.phase, info.flags) == (want.family, want.phase, want.flags)
        _, _, op_starts, rt_starts = attribute._nest(trace)  # the start times it read, kept for the passes
        assert list(op_starts) == [o.ts for o in ops] and list(rt_starts) == [r.ts for r in rts]
