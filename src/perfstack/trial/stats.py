"""How a trial turns step times into a gain, its confidence interval, the machine's noise and a verdict.

Each run of an arm gives a list of step times; the run's figure is their median (the steady state). An
arm's figure is its best run (the fastest median): on a shared or thermally varying machine the slowest
rounds measure the machine, not the fix. The gain of a fix is ``1 - arm / baseline`` of those figures.

Confidence interval: a two-level bootstrap (rounds resampled with replacement, then each resampled round's
steps resampled with replacement; the best median recomputed; the 2.5th and 97.5th percentiles of the gain
over ``B`` resamples, from a fixed seed so a Run re-reads the same). Noise: the spread between the two
fastest baseline runs, in % of the fastest (what separates the best round from the next one when nothing
changed). A gain whose interval holds 0, or whose size is within the noise, is "no measurable gain".
"""

from __future__ import annotations

import random
import statistics
from typing import Optional, Sequence

from perfstack.records.trial import Verdict

B = 1000  # bootstrap resamples
SEED = 20261127


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def best(runs: Sequence[Sequence[float]]) -> Optional[float]:
    """The fastest run's median step time; None when no run has steps."""
    meds = [median(r) for r in runs if r]
    return min(meds) if meds else None


def noise_pct(runs: Sequence[Sequence[float]]) -> Optional[float]:
    """The gap between the two fastest baseline medians, in % of the fastest; None with fewer than two runs."""
    meds = sorted(median(r) for r in runs if r)
    if len(meds) < 2 or meds[0] <= 0:
        return None
    return 100.0 * (meds[1] - meds[0]) / meds[0]


def _resample_best(runs: Sequence[Sequence[float]], rng: random.Random) -> float:
    picked = [runs[rng.randrange(len(runs))] for _ in runs]
    return min(median([r[rng.randrange(len(r))] for _ in r]) for r in picked)


def gain_ci(base: Sequence[Sequence[float]], arm: Sequence[Sequence[float]],
            b: int = B, seed: int = SEED) -> Optional[tuple[float, float]]:
    """The 95% interval of the gain in % (two-level bootstrap; see the module doc)."""
    base = [r for r in base if r]
    arm = [r for r in arm if r]
    if not base or not arm:
        return None
    rng = random.Random(seed)
    gains = sorted(100.0 * (1 - _resample_best(arm, rng) / _resample_best(base, rng)) for _ in range(b))
    return gains[int(0.025 * (b - 1))], gains[int(0.975 * (b - 1))]


def verdict(gain: Optional[float], ci: Optional[tuple[float, float]], noise: Optional[float]) -> Verdict:
    """works / slower / no measurable gain, from the gain, its interval and the noise (all in %)."""
    if gain is None or ci is None:
        return "failed"
    floor = noise or 0.0
    if gain > floor and ci[0] > 0:
        return "works"
    if gain < -floor and ci[1] < 0:
        return "slower"
    return "no measurable gain"


def numerics(base: Sequence[Sequence[float]], arm: Sequence[float], tol: float = 1e-2) -> tuple[str, Optional[float]]:
    """Compare an arm's first values (losses, or step results) with the baseline's.

    ``base`` holds the values of each baseline run. Identical: equal to the first baseline run's, value for
    value. Within tolerance: the largest relative difference is at most ``tol`` and at most ten times what
    the baseline runs differ among themselves, whichever is larger. Changed: beyond it. Returns the word and
    the largest relative difference."""
    ref = next((b for b in base if b), None)
    if ref is None or not arm:
        return "not compared (no loss seen)", None
    n = min(len(ref), len(arm))
    if n == 0:
        return "not compared (no loss seen)", None
    d = max(abs(a - r) / max(abs(r), 1e-12) for a, r in zip(arm[:n], ref[:n]))
    if d == 0:
        return "identical", 0.0
    spread = max((abs(x - r) / max(abs(r), 1e-12) for b in base if b for x, r in zip(b[:n], ref[:n])), default=0.0)
    return ("within tolerance" if d <= max(tol, 10 * spread) else "changed"), d
