"""The figures of a load level, computed from its request records.

Definitions follow vLLM's serving benchmark so that numbers can be compared with the ones users quote:
TTFT from send to the first chunk with text; TPOT per request (e2e - TTFT) / (output tokens - 1); ITL
the pooled gaps between chunks; throughputs over the level's duration; goodput the requests per second
that meet every SLO. Two differences, both deliberate: the duration is the measured window (``window``),
and percentiles interpolate linearly like numpy's default.

The measured window runs from the later of the first measured send and the last warm-up's end to the last
measured send (``window``). Until the last warm-up ends, a warm-up may hold a server slot (on a
batch-capped server the first measured requests queue behind it), so the server's work in that stretch is
not the measured requests'; after the last send the load drains. Throughputs count what arrived inside the
window: each token when its chunk arrived, each request when it ended; latencies and SLO attainment are
every measured request's.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional, Sequence

from perfstack.records.loadtest import Dist, Request, Slo, Summary


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default method)."""
    if not sorted_values:
        raise ValueError("no values")
    k = (len(sorted_values) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def dist(values: Iterable[Optional[float]]) -> Optional[Dist]:
    v = sorted(x for x in values if x is not None and math.isfinite(x))
    if not v:
        return None
    return Dist(n=len(v), mean=sum(v) / len(v), median=percentile(v, 50), p90=percentile(v, 90),
                p99=percentile(v, 99), max=v[-1], min=v[0])


def good(r: Request, slo: Slo) -> bool:
    if not r.ok:
        return False
    if slo.ttft_ms is not None and (r.ttft_ms or 0.0) > slo.ttft_ms:
        return False
    tpot = r.tpot_ms
    if slo.itl_ms is not None and tpot is not None and tpot > slo.itl_ms:
        return False
    return not (slo.e2e_ms is not None and (r.e2e_ms or 0.0) > slo.e2e_ms)


def concurrency_mean(reqs: Sequence[Request], t0: float, t1: float) -> Optional[float]:
    """Requests in flight averaged over [t0, t1] (seconds): the summed busy time over the window."""
    if t1 <= t0:
        return None
    busy = 0.0
    for r in reqs:
        s = r.start_s
        e = s + (r.e2e_ms or 0.0) / 1e3
        busy += max(0.0, min(e, t1) - max(s, t0))
    return busy / (t1 - t0)


def end_s(r: Request) -> float:
    return r.start_s + (r.e2e_ms or 0.0) / 1e3


def window(requests: Sequence[Request]) -> tuple[float, float]:
    """The measured window (s from the level's start): from the later of the first measured send and the
    last warm-up's end, to the last measured send; (0, 0) without measured requests. After the last send
    the load drains (a closed loop's streams end one by one, an open loop's arrivals have stopped), so
    the server no longer runs at the level's load. Where the sends ended in the first half of the span
    (a burst, or arrivals faster than the server: its queue keeps it full meanwhile) the window runs to the
    last end. A warm-up that ended after every measured request (one that hung) does not empty the window:
    it then opens at the first send."""
    measured = [r for r in requests if not r.warmup]
    if not measured:
        return 0.0, 0.0
    t0 = min(r.start_s for r in measured)
    last_end = max(end_s(r) for r in measured)
    warm_end = max((end_s(r) for r in requests if r.warmup), default=t0)
    t0 = warm_end if t0 < warm_end < last_end else t0
    last_send = max(r.start_s for r in measured)
    return t0, (last_send if last_send - t0 >= 0.5 * (last_end - t0) else last_end)


def chunk_times(r: Request) -> list[float]:
    """When each chunk with text arrived (s from the level's start)."""
    if r.ttft_ms is None:
        return []
    at = r.start_s + r.ttft_ms / 1e3
    out = [at]
    for gap in r.itl_ms:
        at += gap / 1e3
        out.append(at)
    return out


def tokens_within(r: Request, t0: float, t1: float) -> float:
    """Output tokens of ``r`` that arrived in [t0, t1], a chunk's tokens spread evenly over it."""
    times = chunk_times(r)
    if not times or (times[0] >= t0 and times[-1] <= t1):
        return float(r.output_tokens) if times else 0.0
    return r.output_tokens * sum(t0 <= t <= t1 for t in times) / len(times)


def runs(requests: Sequence[Request]) -> list[list[Request]]:
    """The requests of each run of a level (``--repeat``), in run order; one list without repeats."""
    by: dict[int, list[Request]] = {}
    for r in requests:
        by.setdefault(r.repeat, []).append(r)
    return [by[k] for k in sorted(by)] or [[]]


def summarize(requests: Sequence[Request], slo: Optional[Slo] = None) -> Summary:
    """The level's figures; a repeated level's are each figure's median over its runs (counts summed)."""
    parts = runs(requests)
    if len(parts) > 1:
        return median_summary([summarize_run(p, slo) for p in parts])
    return summarize_run(requests, slo)


def summarize_run(requests: Sequence[Request], slo: Optional[Slo] = None) -> Summary:
    measured = [r for r in requests if not r.warmup]
    ok = [r for r in measured if r.ok]
    errors: dict[str, int] = {}
    for r in measured:
        if not r.ok:
            errors[r.error or "no-text"] = errors.get(r.error or "no-text", 0) + 1
    t0, t1 = window(requests)
    s = Summary(duration_s=t1 - t0, completed=len(ok), failed=len(measured) - len(ok), errors=errors)
    if measured:
        _figures(s, measured, ok, t0, t1, slo)
    return s


def _figures(s: Summary, measured: list[Request], ok: list[Request], t0: float, t1: float,
             slo: Optional[Slo]) -> None:
    """Rates, distributions, means and goodput of a level with measured requests, into ``s``."""
    duration = max(t1 - t0, 1e-9)
    out_tokens = sum(r.output_tokens for r in ok)
    in_counts = [r.input_tokens for r in ok if r.input_tokens is not None]
    inside = [r for r in ok if t0 <= end_s(r) <= t1]  # the requests that ended in the window
    # a request's prompt counts where its prefill ended (its first token), inside the window or not
    in_window = sum(r.input_tokens or 0 for r in ok if t0 <= r.start_s + (r.ttft_ms or 0.0) / 1e3 <= t1)
    out_window = sum(tokens_within(r, t0, t1) for r in ok)
    s.request_throughput = len(inside) / duration
    s.output_throughput = out_window / duration
    s.total_throughput = (out_window + in_window) / duration
    s.ttft = dist(r.ttft_ms for r in ok)
    s.tpot = dist(r.tpot_ms for r in ok)
    s.itl = dist(x for r in ok for x in r.itl_ms)
    s.e2e = dist(r.e2e_ms for r in ok)
    s.mean_input_tokens = sum(in_counts) / len(in_counts) if in_counts else None
    s.mean_output_tokens = out_tokens / len(ok) if ok else None
    s.concurrency_mean = concurrency_mean(measured, t0, t1)
    if slo is not None:
        n_good = sum(good(r, slo) for r in measured)
        s.goodput = sum(good(r, slo) for r in inside) / duration
        s.slo_attainment = n_good / len(measured)


def meets(s: Summary, slo: Slo) -> bool:
    """A level meets the SLO when enough of its requests are good and almost none failed."""
    return s.slo_attainment is not None and s.slo_attainment >= slo.attainment


def parse_slo(text: str, attainment: float = 0.9) -> Slo:
    """``ttft=500ms,itl=50ms,e2e=10s`` -> Slo (values in ms; ms or s suffix, ms when bare)."""
    from perfstack.errors import UsageError

    slo = Slo(attainment=attainment)
    fields = {"ttft": "ttft_ms", "itl": "itl_ms", "tpot": "itl_ms", "e2e": "e2e_ms", "e2el": "e2e_ms"}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, val = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in fields:
            raise UsageError(f"--slo: cannot read {part!r}", hint="e.g. --slo ttft=500ms,itl=50ms,e2e=20s")
        val = val.strip().lower()
        scale = 1.0
        if val.endswith("ms"):
            val = val[:-2]
        elif val.endswith("s"):
            val, scale = val[:-1], 1e3
        try:
            ms = float(val) * scale
        except ValueError:
            raise UsageError(f"--slo: {part!r} is not a duration", hint="e.g. ttft=500ms") from None
        if not (math.isfinite(ms) and ms > 0):
            raise UsageError(f"--slo: {part!r} must be a positive duration")
        setattr(slo, fields[key], ms)
    if slo.ttft_ms is None and slo.itl_ms is None and slo.e2e_ms is None:
        raise UsageError("--slo names no objective", hint="e.g. --slo ttft=500ms,itl=50ms")
    return slo


# -- repeated runs of a level -------------------------------------------------------------------
RATES = ("request_throughput", "output_throughput", "total_throughput", "goodput", "slo_attainment",
         "mean_input_tokens", "mean_output_tokens", "concurrency_mean", "duration_s")
DISTS = ("ttft", "tpot", "itl", "e2e")
STATS = ("mean", "median", "p90", "p99", "max", "min")
CI_FIGURES = ("request_throughput", "output_throughput", "goodput", "ttft.median", "ttft.p99", "tpot.median",
              "tpot.p99", "itl.median", "itl.p99", "e2e.median", "e2e.p99")


def _med(vals: list[Optional[float]]) -> Optional[float]:
    v = sorted(x for x in vals if x is not None)
    return percentile(v, 50) if v else None


def median_summary(parts: list[Summary]) -> Summary:
    """One summary of several runs: counts summed, every other figure the median of the runs' figures."""
    errors: dict[str, int] = {}
    for p in parts:
        for k, n in p.errors.items():
            errors[k] = errors.get(k, 0) + n
    s = Summary(duration_s=0.0, completed=sum(p.completed for p in parts), failed=sum(p.failed for p in parts),
                errors=errors)
    for name in RATES:
        v = _med([getattr(p, name) for p in parts])
        if v is not None:
            setattr(s, name, v)
    for name in DISTS:
        ds = [getattr(p, name) for p in parts if getattr(p, name) is not None]
        if ds:
            med = {k: _med([getattr(d, k) for d in ds]) or 0.0 for k in STATS}
            setattr(s, name, Dist(n=sum(d.n for d in ds), mean=med["mean"], median=med["median"], p90=med["p90"],
                                  p99=med["p99"], max=med["max"], min=med["min"]))
    return s


def figure(s: Summary, name: str) -> Optional[float]:
    """A figure of a summary by its dotted name ("output_throughput", "ttft.p99")."""
    head, _, stat = name.partition(".")
    v = getattr(s, head, None)
    if stat:
        v = getattr(v, stat, None) if v is not None else None
    return v if isinstance(v, (int, float)) else None


def median_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """The order-statistic interval of the median of ``values`` (no assumption about their distribution):
    the narrowest [x(k), x(n+1-k)] that holds the true median with at least ``confidence``, where
    P(x(k) <= median <= x(n+1-k)) = 1 - 2 P(Binomial(n, 1/2) <= k - 1); below 6 values even the whole
    range holds it less often (3 runs: 75%, 5 runs: 94%). Returns (low, high, that probability)."""
    v = sorted(values)
    n = len(v)
    if n == 0:
        raise ValueError("no values")

    def coverage(k: int) -> float:
        return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / (1 << n)  # 2**n, as an int
    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= confidence:
        k += 1
    return v[k - 1], v[n - k], coverage(k)


def spread(requests: Sequence[Request], slo: Optional[Slo] = None) -> tuple[dict[str, list[float]], Optional[float]]:
    """Each figure's interval over the runs of a repeated level, and the intervals' coverage."""
    parts = [summarize_run(p, slo) for p in runs(requests)]
    if len(parts) < 2:
        return {}, None
    out: dict[str, list[float]] = {}
    cov = None
    for name in CI_FIGURES:
        vals = [x for x in (figure(p, name) for p in parts) if x is not None]
        if len(vals) >= 2:
            lo, hi, cov = median_ci(vals)
            out[name] = [lo, hi]
    return out, cov
