"""Interval arithmetic on a timeline (µs): unions, overlaps and an exclusive category sweep."""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from itertools import repeat
from operator import lt
from typing import Iterable, Sequence


_INF = float("inf")


def union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Merge (start, end) pairs into disjoint sorted intervals."""
    return union_in_order(sorted(intervals))


def union_in_order(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """``union`` of pairs already in order of their starts (those with the same start in any order: they merge
    into the same interval), without sorting them."""
    out: list[tuple[float, float]] = []
    add = out.append
    cur_s = cur_e = 0.0
    started = False
    for s, e in intervals:
        if e <= s:
            continue
        if started and s <= cur_e:
            if e > cur_e:
                cur_e = e
        else:
            if started:
                add((cur_s, cur_e))
            cur_s, cur_e, started = s, e, True
    if started:
        add((cur_s, cur_e))
    return out


class Spans:
    """Disjoint sorted intervals with O(log n) overlap queries."""

    def __init__(self, intervals: Iterable[tuple[float, float]]) -> None:
        merged = union(intervals)
        self._set([s for s, _ in merged], [e for _, e in merged])

    @classmethod
    def of_merged(cls, starts: Sequence[float], ends: Sequence[float]) -> Spans:
        """Spans from intervals already disjoint and sorted (as ``union`` leaves them)."""
        self = cls.__new__(cls)
        self._set(starts, ends)
        return self

    def _set(self, starts: Sequence[float], ends: Sequence[float]) -> None:
        # arrays of doubles (the same values), side by side in memory: the queries read them a million times on
        # a large trace, and the events' own floats are spread over the memory the trace was decoded into
        self.starts, self.ends = array("d", starts), array("d", ends)
        cum = self.cum = array("d", [0.0])
        add = cum.append
        total = 0.0
        for s, e in zip(starts, ends):
            total += e - s
            add(total)

    def __len__(self) -> int:
        return len(self.starts)

    def overlap(self, a: float, b: float) -> float:
        """Length of [a, b] covered by these intervals."""
        if b <= a or not self.starts:
            return 0.0
        starts, ends = self.starts, self.ends
        i = bisect_right(ends, a)  # first interval ending after a
        j = bisect_left(starts, b)  # intervals [i, j) start before b
        if i >= j:
            return 0.0
        # the parts of the first and last intervals outside [a, b] taken off where positive (comparisons
        # rather than max(): a million calls on a large trace, the same figures)
        total = self.cum[j] - self.cum[i]
        cut = a - starts[i]
        if cut > 0.0:
            total -= cut
        cut = ends[j - 1] - b
        if cut > 0.0:
            total -= cut
        return total if total > 0.0 else 0.0

    def overlaps(self, a_s: Sequence[float], b_s: Sequence[float]) -> list[float]:
        """``overlap(a, b)`` of each pair of ``a_s`` and ``b_s``, in one call for a whole timeline's gaps."""
        if not self.starts:
            return [0.0] * len(a_s)
        starts, ends, cum = self.starts, self.ends, self.cum
        n = len(starts)
        out: list[float] = []
        add = out.append
        i = j = 0
        last_a = last_b = -_INF
        for a, b in zip(a_s, b_s):
            if b <= a:
                add(0.0)
                continue
            # i and j as overlap() finds them by bisection: the gaps of a timeline come in time order, and
            # stepping on from the previous ones reads the intervals in order (a bisection per gap reads a
            # million floats scattered in memory: three times slower on a large trace)
            if a >= last_a and b >= last_b:
                while i < n and ends[i] <= a:
                    i += 1
                while j < n and starts[j] < b:
                    j += 1
            else:
                i = bisect_right(ends, a)
                j = bisect_left(starts, b)
            last_a, last_b = a, b
            if i >= j:
                add(0.0)
                continue
            # the same arithmetic as overlap()
            total = cum[j] - cum[i]
            cut = a - starts[i]
            if cut > 0.0:
                total -= cut
            cut = ends[j - 1] - b
            if cut > 0.0:
                total -= cut
            add(total if total > 0.0 else 0.0)
        return out

    def ends_within(self, a: float, b: float) -> bool:
        """Does some interval end inside [a, b]?"""
        i = bisect_left(self.ends, a)
        return i < len(self.ends) and self.ends[i] <= b


def first_after(ts: Sequence[float], a: float) -> int:
    """The first index of the sorted ``ts`` whose ``ts + 1e-9 > a``: from there on, bisect_left(starts, ts + 1e-9)
    (how the passes find the step window an event at ts is in) passes the window starting at ``a`` (bisection by
    hand: no list of the sums)."""
    lo, hi = 0, len(ts)
    while lo < hi:
        mid = (lo + hi) // 2
        if ts[mid] + 1e-9 > a:
            hi = mid
        else:
            lo = mid + 1
    return lo


def gaps(busy: Sequence[tuple[float, float]], a: float, b: float, lo: int = 0) -> list[tuple[float, float]]:
    """Idle intervals of [a, b] not covered by the disjoint sorted ``busy`` intervals (scanning from
    index ``lo``, at or before the first interval that reaches ``a``)."""
    out, cur = [], a
    for k in range(lo, len(busy)):  # by index: a slice would copy the rest of a long timeline per call
        s, e = busy[k]
        if s >= b:
            break
        if e <= cur:
            continue
        if s > cur:
            out.append((cur, s))
        if e > cur:  # (max(cur, e) by a comparison: a call per interval, hundreds of thousands on a large trace)
            cur = e
    if cur < b:
        out.append((cur, b))
    return out


def sweep(events: Sequence[tuple[float, float, int]], a: float, b: float, n_cats: int,
          comm: int | None = None) -> tuple[list[float], float, float]:
    """Exclusive time per category over [a, b]: each instant goes to the lowest-index active
    category. Returns (time per category, communication time overlapped by other work,
    communication time with nothing else running)."""
    points: list[tuple[float, int, int]]
    starts, ends, cats = zip(*events) if events else ((), (), ())
    if all(map(lt, starts, ends)) and (not starts or (a <= min(starts) and max(ends) <= b)):
        # every event inside [a, b] and longer than nothing (a step's are): the points built at once, the same
        # points in another order before the sort. Only equal points can end up in another order after it, and
        # the loop below gives the same figures in any order of those
        points = list(zip(starts, repeat(1), cats))
        points += zip(ends, repeat(-1), cats)
    else:
        points = []
        add = points.append
        for s, e, c in events:  # clipped to [a, b] by comparisons (no call per event), as max() and min() would
            if a > s:
                s = a
            if b < e:
                e = b
            if e > s:
                add((s, 1, c))
                add((e, -1, c))
    points.sort()
    active = [0] * n_cats
    mask = 0  # bit k set while category k is active: the lowest set bit is the one that counts
    comm_bit = 0 if comm is None else 1 << comm
    out = [0.0] * n_cats
    overlapped = exposed = 0.0
    prev = 0.0
    for t, d, c in points:
        if mask and t > prev:
            k = (mask & -mask).bit_length() - 1
            out[k] += t - prev
            if mask & comm_bit:
                if k == comm:
                    exposed += t - prev
                else:
                    overlapped += t - prev
        n = active[c] = active[c] + d
        if n:
            mask |= 1 << c
        else:
            mask &= ~(1 << c)
        prev = t
    return out, overlapped, exposed
