"""From light load to saturation: which loads to try, where the knee is, and the most the SLO allows.

A concurrency sweep doubles the number of streams until throughput stops growing (under 5% for a
doubling), requests start failing, or the latency SLO is clearly lost. A rate sweep first measures the
saturated throughput (every request at once) and then tries fixed fractions of it, as peers do. The
knee is the lowest load that reaches 90% of the best throughput seen: past it, more load buys latency,
not throughput.
"""

from __future__ import annotations

from typing import Any, Optional

from perfstack.loadtest import metrics
from perfstack.loadtest.record import Level, Slo

RATE_FRACTIONS = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
KNEE_SHARE = 0.9
FLAT_GAIN = 0.05
MAX_ERROR_SHARE = 0.1


def _error_share(level: Level) -> float:
    s = level.summary
    return s.failed / max(s.completed + s.failed, 1)


def should_stop(levels: list[Level], slo: Optional[Slo]) -> Optional[str]:
    """Why a concurrency sweep stops after its last level, or None to go on."""
    last = levels[-1]
    if last.interrupted:
        return "interrupted"
    if _error_share(last) > MAX_ERROR_SHARE:
        return f"{_error_share(last):.0%} of requests failed at {last.load:g}"
    if len(levels) >= 2:
        prev = levels[-2].summary.output_throughput
        gain = last.summary.output_throughput / prev - 1 if prev > 0 else 1.0
        if gain < FLAT_GAIN:
            return f"throughput grew {gain:+.0%} from {levels[-2].load:g} to {last.load:g}: saturated"
    if slo is not None and last.summary.slo_attainment is not None and last.summary.slo_attainment < slo.attainment / 2:
        return f"only {last.summary.slo_attainment:.0%} of requests met the SLO at {last.load:g}"
    return None


def knee(levels: list[Level]) -> Optional[Level]:
    ok = [lv for lv in levels if not lv.interrupted and lv.summary.completed]
    if not ok:
        return None
    best = max(lv.summary.output_throughput for lv in ok)
    return min((lv for lv in ok if lv.summary.output_throughput >= KNEE_SHARE * best), key=lambda lv: lv.load)


def summary(levels: list[Level], slo: Optional[Slo], stopped: Optional[str]) -> dict[str, Any]:
    k = knee(levels)
    out: dict[str, Any] = {"mode": levels[0].mode if levels else "", "loads": [lv.load for lv in levels]}
    if k is not None:
        out["knee"] = k.load
        out["knee_output_throughput"] = k.summary.output_throughput
    out["best_output_throughput"] = max((lv.summary.output_throughput for lv in levels), default=0.0)
    if slo is not None:
        # the highest load below which every level met the SLO: a lucky heavier level after a miss is not
        # a load to plan on
        best = None
        for lv in sorted((lv for lv in levels if not lv.interrupted), key=lambda lv: lv.load):
            if not metrics.meets(lv.summary, slo):
                break
            best = lv
        out["max_load_meeting_slo"] = best.load if best is not None else None
        if best is not None:
            out["goodput_at_max"] = best.summary.goodput
    if stopped:
        out["stopped"] = stopped
    return out
