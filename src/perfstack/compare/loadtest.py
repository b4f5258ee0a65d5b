"""Two load tests of one server, before and after a change: what moved, judged against its noise.

Levels are matched by mode and load (closed loop at 16 streams against closed loop at 16 streams).
Both Runs are re-aggregated from their request records with one SLO (the after-Run's, else the
before-Run's), so goodput and "meets the SLO" mean the same thing on both sides. Each figure is
judged on samples that are independent of each other:

- TTFT and TPOT: one value per request. The median's change is judged like a benchmark figure
  (``stats.compare``: Mann–Whitney U test and a bootstrap interval of the medians' ratio).
- ITL: the gaps of one stream are not independent, so the median is judged on each request's median
  gap, and the p99 of the pooled gaps with a bootstrap that resamples whole requests.
- p99s: a location test says nothing about a tail, so a p99 is judged by the bootstrap interval of
  the p99s' ratio alone, at 1 - alpha confidence, and only with at least ``MIN_TAIL_VALUES`` values a
  side (below that the p99 is the slowest value or few, and its bootstrap far too narrow).
- Output throughput and goodput: one figure per level, so the level's measured window
  (``metrics.window``) is cut into ``WINDOWS`` equal windows and the figure is taken per window (each
  chunk's tokens placed at its arrival; a good request counted when it ends); the windows are the
  samples. The figure shown is still the level's own; the interval is that of the windows' median.

A change must also be large enough (``MIN_CHANGE``, ``MIN_TAIL_CHANGE``): requests of one run share
the server's state, so their spread understates how far a rerun of an unchanged server moves.

A sweep also compares its knee and the highest load meeting the SLO, recomputed with that SLO.

Levels run several times on both sides (``--repeat``) are judged on the runs' own figures instead: a
change when the order-statistic intervals of the two sides' medians do not overlap (``_repeated_diff``).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import replace
from typing import Callable, Optional, Sequence


from perfstack.records.base import built
from perfstack.records.diff import IMPROVED, NOISE, NOT_COMPARED, REGRESSED, LevelDiff, DiffSlo, LoadtestDiff, MeasurementDelta, SweepDelta
from perfstack.compare.stats import ALPHA, bootstrap_quantile_ratio, compare
from perfstack.loadtest import metrics, sweep
from perfstack.records.loadtest import Level, LoadTest, Request, Slo
from perfstack.model import Run

WINDOWS = 8  # time windows a level is cut into to see its throughput's spread
# A p99 is judged only with at least 10 values beyond it on each side, from at least 20 requests: the
# bootstrap of a quantile near the sample's maximum is too narrow, and a p99 of 30 TTFTs is the slowest one.
MIN_TAIL_VALUES = 1000
MIN_TAIL_REQUESTS = 20
# The smallest change called a change. The requests of one run share the server's state (its caches,
# its neighbours, the host's clocks), so their spread understates how far a rerun moves: two runs of an
# unchanged server differ "significantly" by a percent or two in the median and by tens of percent in
# a p99 made of a few slow gaps. Below these, a change that the statistics support is still noise.
MIN_CHANGE = 0.05  # medians and throughputs
MIN_TAIL_CHANGE = 0.20  # p99s
# What a change of workload means for the comparison, in the words a reader needs.
WORKLOAD_KEYS = (("kind", "workload"), ("file", "prompt file"), ("input_len", "input length"),
                 ("output_len", "output length"), ("spread", "length spread"), ("shared_prefix", "shared prefix"),
                 ("ignore_eos", "ignore_eos"), ("burstiness", "burstiness"))


def load_text(mode: str, load: float) -> str:
    if mode == "concurrency":
        return f"{load:g} streams"
    if mode == "trace":
        return f"trace ×{load:g}"
    return "all at once" if math.isinf(load) else f"{load:g} req/s"


# -- samples ----------------------------------------------------------------------------------
def _measured_ok(lv: Level) -> list[Request]:
    return [r for r in lv.requests if not r.warmup and r.ok]


def _finite(xs: Sequence[Optional[float]]) -> list[float]:
    return [x for x in xs if x is not None and math.isfinite(x)]


def _median(xs: Sequence[float]) -> Optional[float]:
    v = sorted(xs)
    return metrics.percentile(v, 50) if v else None


def _span(lv: Level) -> tuple[float, float]:
    return metrics.window(lv.requests)


def token_windows(lv: Level, n: int = WINDOWS) -> list[float]:
    """Output tokens per second in each of ``n`` equal windows of the level's measured window."""
    t0, t1 = _span(lv)
    width = (t1 - t0) / n
    if width <= 0:
        return []
    tokens = [0.0] * n
    for r in _measured_ok(lv):
        times = metrics.chunk_times(r)
        share = r.output_tokens / len(times)  # a chunk may carry several tokens: spread them evenly
        for t in times:
            if t0 <= t <= t1:  # before it a warm-up may have held the server; after it the load drains
                tokens[min(n - 1, int((t - t0) / width))] += share
    return [x / width for x in tokens]


def good_windows(lv: Level, slo: Slo, n: int = WINDOWS) -> list[float]:
    """Requests meeting the SLO per second in each of ``n`` equal windows, counted when they end."""
    t0, t1 = _span(lv)
    width = (t1 - t0) / n
    if width <= 0:
        return []
    count = [0] * n
    for r in lv.requests:
        end = metrics.end_s(r)
        if not r.warmup and t0 <= end <= t1 and metrics.good(r, slo):
            count[min(n - 1, int((end - t0) / width))] += 1
    return [c / width for c in count]


def _median_gap(r: Request) -> Optional[float]:
    return _median(_finite(r.itl_ms))


# -- judging ----------------------------------------------------------------------------------
def _pct(x: float) -> float:
    return round((x - 1) * 100, 3)


def _figure(name: str, unit: str, before: Optional[float], after: Optional[float], hib: bool) -> MeasurementDelta:
    f = MeasurementDelta(name=name, bench="loadtest", unit=unit, before=before, after=after, verdict=NOT_COMPARED,
                         higher_is_better=hib)
    if before is not None and after is not None and before > 0:
        f.delta_pct = _pct(after / before)
        f.change_pct = f.delta_pct if hib else (_pct(before / after) if after > 0 else None)
    return f


def _verdict(f: MeasurementDelta, ratio: float, significant: bool, min_change: float) -> None:
    small = abs(ratio - 1) < min_change
    if significant and small:
        f.note = f"under {min_change:.0%}: within what a rerun moves"
    f.significant = significant and not small
    f.verdict = (IMPROVED if (ratio > 1) == f.higher_is_better else REGRESSED) if f.significant else NOISE


def judge_median(f: MeasurementDelta, before: list[float], after: list[float], alpha: float) -> MeasurementDelta:
    """The median's change against the samples' spread (test and interval must both reject)."""
    f.n_before, f.n_after = len(before), len(after)
    if f.before is None or f.after is None:
        f.note = "no value on one side"
        return f
    if f.before == 0 or f.after == 0:
        f.note = "zero on both sides" if f.before == f.after else f"zero {'before' if f.before == 0 else 'after'}"
        return f
    c = compare(before, after, key=f.name, alpha=alpha)
    if c is None:
        f.note = "too few samples to judge against the noise"
        return f
    f.p_value = c.p_value
    f.ci_low_pct, f.ci_high_pct = _pct(c.ci_low), _pct(c.ci_high)
    _verdict(f, c.ratio, c.significant, MIN_CHANGE)
    return f


def judge_tail(f: MeasurementDelta, before: list[list[float]], after: list[list[float]], alpha: float) -> MeasurementDelta:
    """A p99's change: significant when the bootstrap interval (1 - alpha) of the ratio excludes 1."""
    f.n_before, f.n_after = len(before), len(after)
    if f.before is None or f.after is None or not f.before:
        f.note = "no value on one side"
        return f
    values = min(sum(map(len, before)), sum(map(len, after)))
    if values < MIN_TAIL_VALUES or min(len(before), len(after)) < MIN_TAIL_REQUESTS:
        f.note = (f"not judged: {values:,} values a side leave {values // 100} beyond the p99 "
                  f"(judged from {MIN_TAIL_VALUES:,} values and {MIN_TAIL_REQUESTS} requests)")
        return f
    lo, hi = bootstrap_quantile_ratio(before, after, 0.99, seed=zlib.crc32(f.name.encode()), confidence=1 - alpha)
    f.ci_low_pct, f.ci_high_pct = _pct(lo), _pct(hi)
    _verdict(f, f.after / f.before, not (lo <= 1.0 <= hi), MIN_TAIL_CHANGE)
    return f


def _latency(name: str, label: str, per_req_b: list[list[float]], per_req_a: list[list[float]],
             alpha: float, median_of: Callable[[list[float]], Optional[float]]) -> list[MeasurementDelta]:
    """p50 and p99 of a latency whose samples come one group per request."""
    pooled_b = sorted(v for g in per_req_b for v in g)
    pooled_a = sorted(v for g in per_req_a for v in g)
    p = (lambda v, q: metrics.percentile(v, q) if v else None)
    units_b = _finite([median_of(g) for g in per_req_b])
    units_a = _finite([median_of(g) for g in per_req_a])
    med = judge_median(_figure(f"{name} p50 @ {label}", "ms", p(pooled_b, 50), p(pooled_a, 50), False),
                       units_b, units_a, alpha)
    if any(len(g) > 1 for g in per_req_b + per_req_a):
        med.note = "; ".join(filter(None, ["judged on each request's median gap", med.note]))
    tail = judge_tail(_figure(f"{name} p99 @ {label}", "ms", p(pooled_b, 99), p(pooled_a, 99), False),
                      per_req_b, per_req_a, alpha)
    return [med, tail]


def _windowed(name: str, unit: str, before: float, after: float, wb: list[float], wa: list[float],
              alpha: float) -> MeasurementDelta:
    f = judge_median(_figure(name, unit, before, after, True), wb, wa, alpha)
    if f.verdict != NOT_COMPARED:
        f.note = "; ".join(filter(None, [f"judged on {WINDOWS} time windows a level", f.note]))
    return f


REPEATED = (("ttft.median", "TTFT p50", "ms", False), ("ttft.p99", "TTFT p99", "ms", False),
            ("tpot.median", "TPOT p50", "ms", False), ("tpot.p99", "TPOT p99", "ms", False),
            ("itl.median", "ITL p50", "ms", False), ("itl.p99", "ITL p99", "ms", False),
            ("output_throughput", "output tok/s", "tok/s", True), ("goodput", "goodput", "req/s", True))


def _repeated_diff(lb: Level, la: Level, slo: Optional[Slo], label: str) -> list[MeasurementDelta]:
    """Both levels were run several times (--repeat): each figure is judged on the runs' own figures,
    changed when the intervals of their medians (order statistics) do not overlap and the change is large
    enough: run-to-run spread is the noise a rerun meets, which one run's requests understate."""
    pb = [metrics.summarize_run(p, slo) for p in metrics.runs(lb.requests)]
    pa = [metrics.summarize_run(p, slo) for p in metrics.runs(la.requests)]
    out = []
    for key, name, unit, hib in REPEATED:
        vb = _finite([metrics.figure(s, key) for s in pb])
        va = _finite([metrics.figure(s, key) for s in pa])
        f = _figure(f"{name} @ {label}", unit, _median(vb), _median(va), hib)
        f.n_before, f.n_after = len(vb), len(va)
        if len(vb) < 2 or len(va) < 2 or not f.before or not f.after:
            f.note = "too few runs with this figure to judge"
            out.append(f)
            continue
        lo_b, hi_b, cov_b = metrics.median_ci(vb)
        lo_a, hi_a, cov_a = metrics.median_ci(va)
        if lo_b > 0 and hi_b > 0:
            f.ci_low_pct, f.ci_high_pct = _pct(lo_a / hi_b), _pct(hi_a / lo_b)
        apart = hi_a < lo_b or lo_a > hi_b
        _verdict(f, f.after / f.before, apart, MIN_TAIL_CHANGE if key.endswith("p99") else MIN_CHANGE)
        f.note = "; ".join(filter(None, [f"judged on {len(vb)} and {len(va)} runs: the intervals of their medians "
                                         f"({cov_b:.0%} and {cov_a:.0%}) {'do not overlap' if apart else 'overlap'}",
                                         f.note]))
        out.append(f)
    return out


def level_diff(lb: Level, la: Level, slo: Optional[Slo], alpha: float = ALPHA) -> LevelDiff:
    label = load_text(la.mode, la.load)
    if len(metrics.runs(lb.requests)) > 1 and len(metrics.runs(la.requests)) > 1:
        return LevelDiff(mode=la.mode, load=la.load, label=label, figures=_repeated_diff(lb, la, slo, label),
                         partial=lb.interrupted or la.interrupted)
    ob, oa = _measured_ok(lb), _measured_ok(la)
    figs: list[MeasurementDelta] = []
    one = lambda rs, get: [[v] for v in _finite([get(r) for r in rs])]  # noqa: E731
    figs += _latency("TTFT", label, one(ob, lambda r: r.ttft_ms), one(oa, lambda r: r.ttft_ms), alpha, _median)
    figs += _latency("TPOT", label, one(ob, lambda r: r.tpot_ms), one(oa, lambda r: r.tpot_ms), alpha, _median)
    gaps = lambda rs: [_finite(r.itl_ms) for r in rs if _finite(r.itl_ms)]  # noqa: E731
    figs += _latency("ITL", label, gaps(ob), gaps(oa), alpha, _median)
    sb, sa = metrics.summarize(lb.requests, slo), metrics.summarize(la.requests, slo)
    figs.append(_windowed(f"output tok/s @ {label}", "tok/s", sb.output_throughput, sa.output_throughput,
                          token_windows(lb), token_windows(la), alpha))
    if slo is not None and sb.goodput is not None and sa.goodput is not None:
        figs.append(_windowed(f"goodput @ {label}", "req/s", sb.goodput, sa.goodput, good_windows(lb, slo),
                              good_windows(la, slo), alpha))
    return LevelDiff(mode=la.mode, load=la.load, label=label, figures=figs, partial=lb.interrupted or la.interrupted)


# -- the whole load test ----------------------------------------------------------------------
def common_slo(lb: LoadTest, la: LoadTest) -> tuple[Optional[Slo], list[str]]:
    if la.slo is None and lb.slo is None:
        return None, []
    if la.slo is not None and lb.slo is not None and la.slo != lb.slo:
        return la.slo, ["the SLOs differ: both Runs are judged against the after-Run's"]
    if la.slo is None:
        return lb.slo, ["only the before-Run gives an SLO: both are judged against it"]
    if lb.slo is None:
        return la.slo, ["only the after-Run gives an SLO: both are judged against it"]
    return la.slo, []


def _rejudged(lt: LoadTest, slo: Optional[Slo]) -> list[Level]:
    return [replace(lv, summary=metrics.summarize(lv.requests, slo)) for lv in lt.levels]


def sweep_rows(lb: LoadTest, la: LoadTest, slo: Optional[Slo]) -> list[SweepDelta]:
    """The sweep's verdicts before and after, recomputed from both Runs' levels with one SLO."""
    if len(lb.levels) < 2 or len(la.levels) < 2:
        return []
    sb, sa = sweep.summary(_rejudged(lb, slo), slo, None), sweep.summary(_rejudged(la, slo), slo, None)
    unit = "streams" if la.levels[0].mode == "concurrency" else "req/s"
    rows = [_sweep_row("knee", unit, sb.get("knee"), sa.get("knee"), None, True),
            _sweep_row("best output throughput", "tok/s", sb.get("best_output_throughput"),
                       sa.get("best_output_throughput"), True, False)]
    if slo is not None:
        rows.append(_sweep_row("highest load meeting the SLO", unit, sb.get("max_load_meeting_slo"),
                               sa.get("max_load_meeting_slo"), True, True))
        rows.append(_sweep_row("goodput at that load", "req/s", sb.get("goodput_at_max"), sa.get("goodput_at_max"),
                               True, False))
    return rows


def _sweep_row(figure: str, unit: str, before: Optional[float], after: Optional[float],
               higher_better: Optional[bool], is_load: bool) -> SweepDelta:
    """A sweep's verdict before and after. One number a side, no samples: a load is the same or not,
    and a throughput within ``MIN_CHANGE`` is the same."""
    if before is None or after is None:
        change = "same" if before == after else "—"
    elif before == after or (not is_load and before > 0 and abs(after / before - 1) < MIN_CHANGE):
        change = "same" if before == after else f"within {MIN_CHANGE:.0%}"
    elif higher_better is None:
        change = "moved"
    else:
        change = "better" if (after > before) == higher_better else "worse"
    return SweepDelta(figure=figure, unit=unit, before=before, after=after, is_load=is_load, change=change)


def _workload_notes(lb: LoadTest, la: LoadTest) -> list[str]:
    notes = []
    for attr, what in (("url", "server URL"), ("model", "model"), ("api", "API")):
        if getattr(lb, attr) != getattr(la, attr):
            notes.append(f"the {what} differs ({getattr(lb, attr)} before, {getattr(la, attr)} after)")
    changed = [f"{what} {lb.workload.get(k)} → {la.workload.get(k)}" for k, what in WORKLOAD_KEYS
               if lb.workload.get(k) != la.workload.get(k)]
    if changed:
        notes.append("the workloads differ (" + ", ".join(changed) + "): the figures measure that too")
    return notes


def loadtest_diff(before: Run, after: Run, alpha: float = ALPHA) -> Optional[LoadtestDiff]:
    """The load-test part of a diff, or None unless both Runs are load tests."""
    if before.loadtest is None or after.loadtest is None:
        return None
    lb, la = before.loadtest, after.loadtest
    slo, notes = common_slo(lb, la)
    notes += _workload_notes(lb, la)
    d = LoadtestDiff(slo=built(DiffSlo, slo.to_dict()) if slo is not None else None, notes=notes, alpha=alpha)
    key = lambda lv: (lv.mode, lv.load)  # noqa: E731
    after_levels = {key(lv): lv for lv in la.levels}
    matched = set()
    for lv in lb.levels:
        other = after_levels.get(key(lv))
        if other is None:
            d.only_before.append(load_text(lv.mode, lv.load))
        else:
            matched.add(key(lv))
            d.levels.append(level_diff(lv, other, slo, alpha))
    d.only_after = [load_text(lv.mode, lv.load) for lv in la.levels if key(lv) not in matched]
    if (d.only_before or d.only_after) and not d.levels:
        d.notes.append("no load level in common: run both with the same --concurrency or --rate list (a rate "
                       "sweep picks its rates from each run's own saturated throughput)")
    if any(lv.partial for lv in d.levels):
        d.notes.append("a level was interrupted on one side: its figures cover fewer requests")
    d.sweep = sweep_rows(lb, la, slo)
    return d
