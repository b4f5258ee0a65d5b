"""Figures that stand out: per figure and SKU, nodes (or GPUs) far from the fleet's median.

Each figure of each node or GPU is one point. Within a SKU, a point is an outlier when its modified
z-score (distance from the median over the combined robust spread, ``stats.robust_z``) passes
``Z_OUTLIER`` and it is at least ``MIN_RELATIVE`` away from the median. Figures measured with another
method version than the majority's are not compared. Below-median points on a higher-is-better figure
(above-median on a latency) are *slow*; the other side is reported as *fast*, which in a fleet usually
means the rest are held back by something (a driver, a power cap) the fast ones lack.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass

from perfstack.records.fleet import Outlier
from perfstack.fleet.stats import MAD_TO_SD, MIN_RELATIVE, Z_OUTLIER, mad, robust_z
from perfstack.fleet.summary import Figure, NodeSummary

MIN_POINTS = 3  # with fewer points a median cannot say which one is odd
Z_CAP = 999.0


@dataclass
class FigureStats:
    """One figure over the fleet: what the heat map colours each cell by."""

    figure: str
    unit: str
    sku: str
    median: float
    spread_pct: float
    points: int
    cells: dict[tuple[str, str], float]  # (node, subject) -> signed z-score, positive = better


def figure_table(nodes: list[NodeSummary]) -> dict[str, dict[tuple[str, str], Figure]]:
    table: dict[str, dict[tuple[str, str], Figure]] = defaultdict(dict)
    for n in nodes:
        for (name, subject), fig in n.figures.items():
            table[name][(n.name, subject)] = fig
    return table


def outliers(nodes: list[NodeSummary], sku: str) -> tuple[list[Outlier], list[FigureStats], list[str]]:
    """(outliers, per-figure statistics, notes) over the ``ok`` nodes of one SKU."""
    found: list[Outlier] = []
    stats: list[FigureStats] = []
    notes: list[str] = []
    for name, points in sorted(figure_table(nodes).items()):
        versions = Counter(f.method_version for f in points.values())
        method, _ = versions.most_common(1)[0]
        if len(versions) > 1:
            skipped = sorted(f"{node}{'/' + s if s else ''}" for (node, s), f in points.items()
                             if f.method_version != method)
            notes.append(f"{name}: {len(skipped)} point(s) measured with another method version not compared "
                         f"({', '.join(skipped[:5])}{' …' if len(skipped) > 5 else ''})")
            points = {k: f for k, f in points.items() if f.method_version == method}
        if len(points) < MIN_POINTS:
            continue
        values = [f.value for f in points.values()]
        med = statistics.median(values)
        if med <= 0:
            continue
        fleet_sd = MAD_TO_SD * mad(values, med)
        unit = next(iter(points.values())).unit
        hib = next(iter(points.values())).higher_is_better
        cells: dict[tuple[str, str], float] = {}
        for (node, subject), f in points.items():
            # clamped: an identical fleet with noiseless figures gives an infinite score, not JSON
            z = max(-Z_CAP, min(Z_CAP, robust_z(f.value, med, fleet_sd, f.noise * f.value)))
            rel = f.value / med - 1
            cells[(node, subject)] = z if hib else -z
            if abs(z) >= Z_OUTLIER and abs(rel) >= MIN_RELATIVE:
                found.append(Outlier(figure=name, unit=unit, sku=sku, node=node, subject=subject, value=f.value,
                                     median=med, deviation_pct=round(rel * 100, 3), z=round(z, 2),
                                     noise_pct=round(f.noise * 100, 3), fleet_spread_pct=round(fleet_sd / med * 100, 3),
                                     points=len(points), slow=(rel < 0) == hib))
        stats.append(FigureStats(figure=name, unit=unit, sku=sku, median=med,
                                 spread_pct=round(fleet_sd / med * 100, 3), points=len(points), cells=cells))
    found.sort(key=lambda o: (not o.slow, -abs(o.deviation_pct)))
    return found, stats, notes
