"""Interval arithmetic on a timeline (µs): unions, overlaps and an exclusive category sweep."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Iterable, Sequence


def union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Merge (start, end) pairs into disjoint sorted intervals."""
    out: list[tuple[float, float]] = []
    add = out.append
    cur_s = cur_e = 0.0
    started = False
    for s, e in sorted(intervals):
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
    def of_merged(cls, starts: list[float], ends: list[float]) -> Spans:
        """Spans from intervals already disjoint and sorted (as ``union`` leaves them)."""
        self = cls.__new__(cls)
        self._set(starts, ends)
        return self

    def _set(self, starts: list[float], ends: list[float]) -> None:
        self.starts, self.ends = starts, ends
        cum = self.cum = [0.0]
        total = 0.0
        for s, e in zip(starts, ends):
            total += e - s
            cum.append(total)

    def __len__(self) -> int:
        return len(self.starts)

    def overlap(self, a: float, b: float) -> float:
        """Length of [a, b] covered by these intervals."""
        if b <= a or not self.starts:
            return 0.0
        i = bisect_right(self.ends, a)  # first interval ending after a
        j = bisect_left(self.starts, b)  # intervals [i, j) start before b
        if i >= j:
            return 0.0
        total = self.cum[j] - self.cum[i]
        total -= max(0.0, a - self.starts[i])
        total -= max(0.0, self.ends[j - 1] - b)
        return max(0.0, total)

    def ends_within(self, a: float, b: float) -> bool:
        """Does some interval end inside [a, b]?"""
        i = bisect_left(self.ends, a)
        return i < len(self.ends) and self.ends[i] <= b


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
        cur = max(cur, e)
    if cur < b:
        out.append((cur, b))
    return out


def sweep(events: Sequence[tuple[float, float, int]], a: float, b: float, n_cats: int,
          comm: int | None = None) -> tuple[list[float], float, float]:
    """Exclusive time per category over [a, b]: each instant goes to the lowest-index active
    category. Returns (time per category, communication time overlapped by other work,
    communication time with nothing else running)."""
    points: list[tuple[float, int, int]] = []
    for s, e, c in events:
        s, e = max(s, a), min(e, b)
        if e > s:
            points.append((s, 1, c))
            points.append((e, -1, c))
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
