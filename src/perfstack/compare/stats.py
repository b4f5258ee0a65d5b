"""Is a change between two sets of raw samples real, or inside their spread?

Two distribution-free tools, standard library only:

- ``mann_whitney``: the Mann–Whitney U test (two-sided). Exact null distribution for small samples
  without ties, normal approximation with tie and continuity corrections otherwise (the same
  choices scipy.stats.mannwhitneyu makes with ``method="auto"``).
- ``bootstrap_ratio``: a percentile bootstrap interval for median(after) / median(before), seeded so
  the same two Runs always give the same interval.

``compare`` combines them: a change is significant only when the test rejects *and* the interval
excludes 1 — a shift that one method calls noise is reported as noise.
"""

from __future__ import annotations

import math
import random
import statistics
import zlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from perfstack.records.diff import ALPHA as ALPHA  # the diff's level, its records' default

# ALPHA: two-sided level of the test (the diff's records hold it); the interval is the matching (1 - 5%)
# percentile interval
CONFIDENCE = 0.95
EXACT_MAX_N = 8  # exact U distribution when both samples are smaller than this and have no ties
RESAMPLE_WORK = 200_000  # resamples x sample size per side; caps the bootstrap's cost on long sample lists
MIN_SAMPLES = 3


def _ranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """Average ranks (1-based) and the sizes of the tie groups."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    ties: list[int] = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        if j > i:
            ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


@lru_cache(maxsize=256)
def _u_counts(n1: int, n2: int) -> tuple[int, ...]:
    """How many of the C(n1+n2, n1) orderings give each value of U (0..n1*n2)."""
    # f[i][j][u]: orderings of i x's and j y's with U = u; built one observation at a time.
    prev: list[list[int]] = [[1] for _ in range(n2 + 1)]  # i = 0: U is 0 for every j
    for i in range(1, n1 + 1):
        cur: list[list[int]] = [[1]]  # j = 0: U is 0
        for j in range(1, n2 + 1):
            # the largest value is an x (adds j to U) or a y (adds nothing)
            a, b = prev[j], cur[j - 1]
            size = i * j + 1
            row = [0] * size
            for u, c in enumerate(a):
                row[u + j] += c
            for u, c in enumerate(b):
                row[u] += c
            cur.append(row)
        prev = cur
    return tuple(prev[n2])


def mann_whitney(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(U of ``a``, two-sided p-value) for H0: both samples come from the same distribution."""
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        raise ValueError("both samples need at least one value")
    ranks, ties = _ranks(list(a) + list(b))
    u1 = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    if not ties and n1 < EXACT_MAX_N and n2 < EXACT_MAX_N:
        counts = _u_counts(n1, n2)
        total = math.comb(n1 + n2, n1)
        u = min(u1, n1 * n2 - u1)
        p = 2 * sum(counts[: int(u) + 1]) / total
        return u1, min(1.0, p)
    n = n1 + n2
    mu = n1 * n2 / 2
    tie_term = sum(t**3 - t for t in ties) / (n * (n - 1))
    var = n1 * n2 / 12 * ((n + 1) - tie_term)
    if var <= 0:  # every value equal
        return u1, 1.0
    z = (abs(u1 - mu) - 0.5) / math.sqrt(var)
    return u1, min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2)))


def bootstrap_ratio(before: Sequence[float], after: Sequence[float], seed: int = 0,
                    confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Percentile bootstrap interval of median(after) / median(before)."""
    if not before or not after:
        raise ValueError("both samples need at least one value")
    rng = random.Random(seed)
    n = max(len(before), len(after))
    reps = max(200, min(2000, RESAMPLE_WORK // n))
    ratios = []
    for _ in range(reps):
        mb = statistics.median(rng.choices(before, k=len(before)))
        ma = statistics.median(rng.choices(after, k=len(after)))
        ratios.append(ma / mb if mb else math.inf)
    ratios.sort()
    tail = (1 - confidence) / 2
    lo = ratios[int(math.floor(tail * (reps - 1)))]
    hi = ratios[int(math.ceil((1 - tail) * (reps - 1)))]
    return lo, hi


@dataclass(frozen=True)
class Comparison:
    ratio: float  # median(after) / median(before)
    ci_low: float
    ci_high: float
    p_value: float
    significant: bool


def compare(before: Sequence[float], after: Sequence[float], key: str = "", alpha: float = ALPHA) -> Comparison | None:
    """Test and interval for two sample sets, or None when either has fewer than MIN_SAMPLES values.
    ``key`` seeds the bootstrap, so a figure's interval is reproducible."""
    if len(before) < MIN_SAMPLES or len(after) < MIN_SAMPLES:
        return None
    mb, ma = statistics.median(before), statistics.median(after)
    if mb == 0:
        return None
    _, p = mann_whitney(before, after)
    lo, hi = bootstrap_ratio(before, after, seed=zlib.crc32(key.encode()))
    return Comparison(ma / mb, lo, hi, p, p < alpha and not (lo <= 1.0 <= hi))


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, as the load test's percentiles)."""
    k = (len(sorted_values) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def bootstrap_quantile_ratio(before: Sequence[Sequence[float]], after: Sequence[Sequence[float]], q: float,
                             seed: int = 0, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Percentile bootstrap interval of quantile_q(after) / quantile_q(before), resampling whole groups.

    Each side is a list of groups (one per request) whose values are pooled before the quantile is
    taken: the gaps of one stream are not independent of each other, so the unit resampled is the
    request, not the gap (a cluster bootstrap). A group of one value is the ordinary bootstrap."""
    before = [g for g in before if g]
    after = [g for g in after if g]
    if not before or not after:
        raise ValueError("both samples need at least one value")
    rng = random.Random(seed)
    values = sum(len(g) for g in before) + sum(len(g) for g in after)
    reps = max(100, min(2000, 20 * RESAMPLE_WORK // values))
    ratios = []
    for _ in range(reps):
        qb = _quantile(sorted(v for g in rng.choices(before, k=len(before)) for v in g), q)
        qa = _quantile(sorted(v for g in rng.choices(after, k=len(after)) for v in g), q)
        ratios.append(qa / qb if qb else math.inf)
    ratios.sort()
    tail = (1 - confidence) / 2
    return ratios[int(math.floor(tail * (reps - 1)))], ratios[int(math.ceil((1 - tail) * (reps - 1)))]
