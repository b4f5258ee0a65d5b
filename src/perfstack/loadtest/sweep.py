"""From light load to saturation: which loads to try, where the knee is, and the most the SLO allows.

A concurrency sweep doubles the number of streams until throughput stops growing (under 5% for a
doubling), requests start failing, or the latency SLO is clearly lost. A rate sweep first sends every
request at once, a probe that measures the server's capacity over the stretch where requests were still
queued (the server was full; the ramp-up and the drain are left out, which a whole burst's throughput is
not), and then tries fixed fractions of that capacity, as peers do. The probe competes neither for the
knee nor in the SLO search.

The knee is the lowest load of the sweep (the SLO search's loads aside) that reaches 90% of the best
throughput seen, provided the sweep tried a heavier load: past it, more load buys latency, not
throughput. When the sweep stopped at the load with the best throughput (the SLO or failures stopped it
while throughput still grew), no knee was seen, and the summary says so instead of naming the last load.

With an SLO, the doubling leaves a gap between the last load that met it and the first that did not; the
sweep bisects that gap down to one stream (or 2.5% of the capacity for rates). The highest load meeting the
SLO comes with its confidence: the probability, given how many of its requests were good, that the share
of good requests at that load is truly at or above the target (a uniform prior on the share).
"""

from __future__ import annotations

import math
from typing import Any, Optional

from perfstack.loadtest import metrics
from perfstack.records.loadtest import Level, Request, Slo, Summary

RATE_FRACTIONS = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
KNEE_SHARE = 0.9
FLAT_GAIN = 0.05
MAX_ERROR_SHARE = 0.1
RATE_STEP = 0.025  # the bisection's resolution for rates, a share of the capacity
MAX_BISECT = 8  # levels a bisection may add (a gap of 256 streams takes 8)


def _error_share(level: Level) -> float:
    s = level.summary
    return s.failed / max(s.completed + s.failed, 1)


def _load(lv: Level) -> str:
    return f"{lv.load:g} streams" if lv.mode == "concurrency" else f"trace ×{lv.load:g}" if lv.mode == "trace" else (
        f"{lv.load:g} req/s")


def tput(lv: Level) -> float:
    """The throughput a sweep follows: output tokens/s, or requests/s where nothing is generated (embeddings)."""
    return lv.summary.output_throughput or lv.summary.request_throughput


def should_stop(levels: list[Level], slo: Optional[Slo]) -> Optional[str]:
    """Why a concurrency sweep stops after its last level, or None to go on."""
    last = levels[-1]
    if last.interrupted:
        return "interrupted"
    if _error_share(last) > MAX_ERROR_SHARE:
        return f"stopped by failing requests at {_load(last)} ({_error_share(last):.0%} failed)"
    if len(levels) >= 2:
        prev = tput(levels[-2])
        gain = tput(last) / prev - 1 if prev > 0 else 1.0
        if gain < FLAT_GAIN:
            return (f"stopped at saturation: throughput grew {gain:+.0%} from {levels[-2].load:g} to "
                    f"{_load(last)}")
    if slo is not None and last.summary.slo_attainment is not None and last.summary.slo_attainment < slo.attainment / 2:
        return f"stopped by the SLO at {_load(last)} (only {last.summary.slo_attainment:.0%} of requests met it)"
    return None


def candidates(levels: list[Level]) -> list[Level]:
    """The levels a knee or an SLO search may name: measured, whole, not the capacity probe; by load."""
    return sorted((lv for lv in levels if not lv.interrupted and not lv.probe and lv.summary.completed),
                  key=lambda lv: lv.load)


def knee_candidate(levels: list[Level]) -> Optional[Level]:
    # the sweep's own loads only: the SLO search's loads sit close together, and close to the heaviest load
    # any curve that still climbs is within 10% of it
    ok = [lv for lv in candidates(levels) if not lv.bisect]
    if not ok:
        return None
    best = max(tput(lv) for lv in ok)
    return min((lv for lv in ok if tput(lv) >= KNEE_SHARE * best), key=lambda lv: lv.load)


def knee(levels: list[Level]) -> Optional[Level]:
    """The knee, when the sweep went past it: a heavier load was tried and gave no more throughput."""
    k = knee_candidate(levels)
    if k is None or not any(lv.load > k.load for lv in candidates(levels) if not lv.bisect):
        return None
    return k


def capacity(probe: Level) -> float:
    """The capacity a probe measured; a repeated probe's is the median of its runs' (each on its own clock)."""
    parts = metrics.runs(probe.requests)
    if len(parts) == 1:
        return _capacity(probe.requests, probe.summary)
    caps = sorted(_capacity(p, metrics.summarize_run(p)) for p in parts)
    return metrics.percentile(caps, 50)


def _capacity(requests: list[Request], whole: Summary) -> float:
    """Requests per second the server sustains when full, from an everything-at-once level: the output
    tokens that arrived while requests were still waiting for their first token (from the first request's
    first token to the last one's), per second, over the mean output length. A burst the server took in one
    batch leaves no such stretch: its whole throughput stands. Warm-up requests count here: they filled the
    server's slots as much as the measured ones."""
    ok = [r for r in requests if r.ok]
    firsts = sorted(r.start_s + (r.ttft_ms or 0.0) / 1e3 for r in ok)
    if len(firsts) < 4 or not whole.mean_output_tokens:
        return whole.request_throughput
    a, b = firsts[0], firsts[-1]
    if b - a < 0.25 * max(whole.duration_s, 1e-9):
        return whole.request_throughput
    tokens = 0.0
    for r in ok:
        times = metrics.chunk_times(r)
        tokens += r.output_tokens * sum(a <= t <= b for t in times) / len(times)
    return tokens / (b - a) / whole.mean_output_tokens


def rate_loads(cap: float) -> list[float]:
    return [round(f * cap, 3) for f in RATE_FRACTIONS if f * cap > 0]


def _prefix_meeting(levels: list[Level], slo: Slo) -> tuple[Optional[Level], Optional[Level]]:
    """The heaviest level below which every level met the SLO, and the first that did not (by load)."""
    best = None
    for lv in candidates(levels):
        if not metrics.meets(lv.summary, slo):
            return best, lv
        best = lv
    return best, None


def bisect_next(levels: list[Level], slo: Optional[Slo], step: float, integer: bool) -> Optional[float]:
    """The next load to try between the highest meeting the SLO and the lightest missing it, or None once
    they are within ``step`` (or the bisection has added MAX_BISECT levels)."""
    if slo is None or sum(lv.bisect for lv in levels) >= MAX_BISECT:
        return None
    ok, bad = _prefix_meeting(levels, slo)
    if bad is None:
        return None
    lo = ok.load if ok is not None else 0.0
    hi = bad.load
    if hi - lo <= step * (1 + 1e-9):
        return None
    mid = math.floor((lo + hi) / 2) if integer else round((lo + hi) / 2, 3)
    if mid <= lo or mid >= hi or any(lv.load == mid for lv in levels):
        return None
    return float(mid)


def p_meets(good: int, n: int, target: float) -> float:
    """P(share of good requests >= target | ``good`` of ``n`` were good), with a uniform prior: the
    Beta(good+1, n-good+1) tail, which equals P(Binomial(n+1, target) <= good)."""
    if n <= 0:
        return 0.0
    if target <= 0:
        return 1.0
    if target >= 1:
        return 0.0
    lt, lq = math.log(target), math.log1p(-target)
    total = 0.0
    for k in range(good + 1):
        total += math.exp(math.lgamma(n + 2) - math.lgamma(k + 1) - math.lgamma(n + 2 - k) + k * lt + (n + 1 - k) * lq)
    return min(1.0, total)


def _good_count(lv: Level, slo: Slo) -> tuple[int, int]:
    measured = [r for r in lv.requests if not r.warmup]
    return sum(metrics.good(r, slo) for r in measured), len(measured)


def summary(levels: list[Level], slo: Optional[Slo], stopped: Optional[str],
            capacity_rps: Optional[float] = None) -> dict[str, Any]:
    swept = candidates(levels)
    out: dict[str, Any] = {"mode": levels[0].mode if levels else "", "loads": [lv.load for lv in levels]}
    k = knee(levels)
    if k is not None:
        out["knee"] = k.load
        out["knee_output_throughput"] = tput(k)
    elif len(swept) >= 2:
        out["knee_not_reached"] = stopped if stopped and stopped != "interrupted" else (
            f"the heaviest load tried, {_load(swept[-1])}, gave the most throughput")
    # (requests/s where nothing is generated: an embeddings sweep)
    out["best_output_throughput"] = max((tput(lv) for lv in swept), default=0.0)
    if capacity_rps is not None:
        out["capacity_req_s"] = capacity_rps
    if slo is not None:
        # the highest load below which every level met the SLO: a lucky heavier level after a miss is not
        # a load to plan on
        best, first_miss = _prefix_meeting(levels, slo)
        out["max_load_meeting_slo"] = best.load if best is not None else None
        if best is not None:
            out["goodput_at_max"] = best.summary.goodput
            good, n = _good_count(best, slo)
            out["confidence_at_max"] = p_meets(good, n, slo.attainment)
        if first_miss is not None:
            out["min_load_missing_slo"] = first_miss.load
            good, n = _good_count(first_miss, slo)
            out["confidence_missing"] = 1.0 - p_meets(good, n, slo.attainment)
    if stopped:
        out["stopped"] = stopped
    return out
