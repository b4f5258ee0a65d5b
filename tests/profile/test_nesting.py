"""How ops nest and what they inherit (per thread, when threads take turns), which copy operator owns an op,
and which step a CPU event counts in: the shortcuts a large trace needs give what the plain rules give."""

from __future__ import annotations

import random
from bisect import bisect_left
from types import SimpleNamespace

from perfstack.profile import analyze, copies
from perfstack.profile.attribute import CASTING, COMPILED, COPYING, nest
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
