"""The significance tools behind `perfstack diff`, against values from the literature and scipy."""

from __future__ import annotations

import math
import random

import pytest

from perfstack.compare.stats import bootstrap_ratio, compare, mann_whitney


# Reference p-values computed with scipy.stats.mannwhitneyu(alternative="two-sided") (method "auto":
# exact below 8 per side without ties, else the normal approximation with tie and continuity correction).
@pytest.mark.parametrize("a, b, u, p", [
    ([1, 2, 3], [4, 5, 6], 0.0, 0.1),  # complete separation, exact: 2 / C(6,3)
    ([10, 11, 12], [13, 14, 15, 16], 0.0, 0.05714285714285714),  # 2 / C(7,3)
    ([1.1, 2.2, 3.3, 4.4], [2.5, 3.5, 5.5, 6.5, 7.5], 3.0, 0.1111111111111111),
    ([19, 22, 16, 29, 24], [20, 11, 17, 12], 17.0, 0.1111111111111111),
    ([0.91, 0.95, 1.02, 0.99, 0.97], [1.05, 1.1, 1.07, 1.2, 1.01], 1.0, 0.015873015873015872),
    # Hollander & Wolfe's depression scores (scipy's documentation example): ties -> asymptotic
    ([1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30],
     [0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29], 58.0, 0.13291945818531892),
    ([1, 2, 2, 3, 3, 3, 4], [2, 3, 4, 4, 5, 5, 6, 7], 8.5, 0.025279736885893914),
    ([3, 1, 4, 1, 5, 9, 2, 6], [5, 3, 5, 8, 9, 7, 9, 3, 2, 3], 27.0, 0.2617363764241847),
])
def test_mann_whitney_matches_reference(a, b, u, p):
    got_u, got_p = mann_whitney(a, b)
    assert got_u == u
    assert got_p == pytest.approx(p, rel=1e-9)


def test_mann_whitney_large_samples_normal_approximation():
    rng = random.Random(1)
    a = [rng.gauss(1.0, 0.05) for _ in range(200)]
    b = [rng.gauss(1.02, 0.05) for _ in range(300)]
    u, p = mann_whitney(a, b)
    assert u == 22452.0
    assert p == pytest.approx(1.8542606583758014e-06, rel=1e-6)  # scipy, method="asymptotic"


def test_mann_whitney_symmetric_and_all_equal():
    a, b = [1.0, 2.0, 3.5, 4.0], [2.5, 3.0, 5.0, 6.0, 7.0]
    assert mann_whitney(a, b)[1] == pytest.approx(mann_whitney(b, a)[1])
    assert mann_whitney([2.0] * 5, [2.0] * 6)[1] == 1.0
    with pytest.raises(ValueError):
        mann_whitney([], [1.0])


def test_bootstrap_interval_is_seeded_and_brackets_the_ratio():
    rng = random.Random(3)
    before = [rng.gauss(10.0, 0.2) for _ in range(60)]
    after = [x * 1.05 for x in before]
    lo, hi = bootstrap_ratio(before, after, seed=7)
    assert (lo, hi) == bootstrap_ratio(before, after, seed=7)
    assert lo < 1.05 < hi
    assert lo > 1.0  # a 5% shift on 2% noise with 60 samples is well outside the spread


def test_compare_verdicts_against_noise():
    rng = random.Random(5)
    base = [rng.gauss(100.0, 1.0) for _ in range(50)]
    same = [rng.gauss(100.0, 1.0) for _ in range(50)]
    up = [rng.gauss(103.0, 1.0) for _ in range(50)]
    noisy_up = [rng.gauss(101.0, 20.0) for _ in range(50)]
    assert not compare(base, same, "x").significant
    c = compare(base, up, "x")
    assert c.significant and c.ratio == pytest.approx(1.03, abs=0.01)
    assert not compare(base, noisy_up, "x").significant  # a 1% shift inside a 20% spread is noise
    assert compare(base[:2], up, "x") is None  # too few samples to judge
    assert math.isclose(compare(base, up, "k").p_value, compare(base, up, "other-key").p_value)
