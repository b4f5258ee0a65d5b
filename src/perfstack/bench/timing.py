"""The measurement method every benchmark uses.

Warm up by time (not by count: the first calls pay for JIT, autotuning and clock ramp-up), pick
the number of timed repetitions from the warm-up estimate and a time budget, time each repetition
separately and keep every raw sample. On a GPU the samples come from CUDA events recorded on the
stream around each repetition, read after one synchronize at the end, so no host clock ever times
asynchronous work. ``between`` runs before each repetition outside the timed region (an L2 flush).

Timers are injected so the method is tested with a fake clock.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable, Protocol, TypedDict

Fn = Callable[[], Any]



class Budget(TypedDict):
    """A benchmark's time budget per suite, passed to ``measure`` as keywords."""

    budget_s: float
    warmup_s: float


# Spread above this coefficient of variation makes a figure "noisy" in its notes.
NOISY_CV = 0.05


class Timer(Protocol):
    def now(self) -> float: ...  # a wall clock for budgets, seconds

    def call(self, fn: Fn) -> None: ...  # run fn to completion (synchronized)

    def samples(self, fn: Fn, reps: int, between: Fn | None) -> list[float]: ...  # seconds per rep


class HostTimer:
    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.now = clock

    def call(self, fn: Fn) -> None:
        fn()

    def samples(self, fn: Fn, reps: int, between: Fn | None) -> list[float]:
        out = []
        for _ in range(reps):
            if between:
                between()
            t0 = self.now()
            fn()
            out.append(self.now() - t0)
        return out


class CudaTimer:
    """CUDA events around each repetition on the current stream; one synchronize at the end."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.now = time.perf_counter

    def call(self, fn: Fn) -> None:
        fn()
        self.torch.cuda.synchronize()

    def samples(self, fn: Fn, reps: int, between: Fn | None) -> list[float]:
        ev = self.torch.cuda.Event
        pairs = [(ev(enable_timing=True), ev(enable_timing=True)) for _ in range(reps)]
        self.torch.cuda.synchronize()
        for start, end in pairs:
            if between:
                between()
            start.record()
            fn()
            end.record()
        self.torch.cuda.synchronize()
        return [s.elapsed_time(e) / 1e3 for s, e in pairs]


def plan_reps(estimate_s: float, budget_s: float, min_reps: int, max_reps: int) -> int:
    if estimate_s <= 0:
        return max_reps
    return max(min_reps, min(max_reps, int(budget_s / estimate_s)))


def measure(fn: Fn, timer: Timer, *, budget_s: float = 0.5, warmup_s: float = 0.1, min_reps: int = 10,
            max_reps: int = 1000, between: Fn | None = None) -> list[float]:
    """Raw per-repetition times in seconds after a warm-up of at least ``warmup_s``."""
    t0 = timer.now()
    n = 0
    while n < 2 or timer.now() - t0 < warmup_s:
        if between:
            between()
        timer.call(fn)
        n += 1
    estimate = (timer.now() - t0) / n
    return timer.samples(fn, plan_reps(estimate, budget_s, min_reps, max_reps), between)


def summarize(samples: list[float]) -> dict[str, float]:
    """Median and spread of raw samples (seconds)."""
    if not samples:
        return {}
    s = sorted(samples)
    mean = statistics.fmean(s)
    return {
        "n": len(s),
        "median": statistics.median(s),
        "p10": _quantile(s, 0.10),
        "p90": _quantile(s, 0.90),
        "min": s[0],
        "max": s[-1],
        "mean": mean,
        "cv": statistics.pstdev(s) / mean if mean > 0 and len(s) > 1 else 0.0,
    }


def _quantile(sorted_samples: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    pos = (len(sorted_samples) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_samples[lo] + (sorted_samples[hi] - sorted_samples[lo]) * (pos - lo)


def spread_notes(stats: dict[str, float]) -> list[str]:
    if stats and stats["cv"] > NOISY_CV:
        return [f"noisy: samples vary by {stats['cv']:.0%} (coefficient of variation); "
                "another process or clock changes may be interfering"]
    return []
