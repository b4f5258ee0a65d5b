"""Robust statistics for comparing one figure across many nodes.

A fleet's figures are compared with the median and the median absolute deviation (MAD), not the mean
and standard deviation: one broken node among 64 moves the mean and inflates the standard deviation
enough to hide itself, while the median and MAD barely move.

Every figure also carries its own noise: the spread of the raw samples its benchmark kept. A node is
an outlier only when its distance from the fleet's median is large against *both* the fleet's spread
and its own measurement's spread, so a benchmark that is noisy on every node does not flag the
unlucky ones, and a fleet of identical nodes (MAD near zero) does not flag a 0.3% wobble.
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

# 1.4826 * MAD estimates the standard deviation of normally distributed data.
MAD_TO_SD = 1.4826
# IQR / 1.349 estimates the standard deviation of normally distributed data.
IQR_TO_SD = 1.349
# Iglewicz & Hoaglin's cut-off for the modified z-score: beyond it a value is a likely outlier.
Z_OUTLIER = 3.5
# Below this relative distance from the median nothing is called an outlier, however tight the
# fleet: a 2% difference is within what clocks and temperature change between identical GPUs.
MIN_RELATIVE = 0.02


def mad(values: Sequence[float], center: float | None = None) -> float:
    """Median absolute deviation from ``center`` (default: the median)."""
    if not values:
        raise ValueError("mad of no values")
    c = statistics.median(values) if center is None else center
    return statistics.median(abs(v - c) for v in values)


def relative_noise(samples: Sequence[float]) -> float:
    """The spread of one measurement's per-sample values as a fraction of their median: a robust
    standard deviation (IQR / 1.349) over the median. 0 when there are too few samples to say."""
    if len(samples) < 4:
        return 0.0
    q = statistics.quantiles(samples, n=4, method="inclusive")
    med = q[1]
    if not med:
        return 0.0
    return abs(q[2] - q[0]) / IQR_TO_SD / abs(med)


def robust_z(value: float, center: float, fleet_sd: float, own_sd: float) -> float:
    """How many combined standard deviations ``value`` lies from ``center``; the fleet's robust spread
    and the measurement's own noise (both as absolute standard deviations) add in quadrature."""
    scale = math.hypot(fleet_sd, own_sd)
    if scale == 0:
        return 0.0 if value == center else math.copysign(math.inf, value - center)
    return (value - center) / scale
