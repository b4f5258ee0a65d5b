"""The figures of a load level, computed from its request records.

Definitions follow vLLM's serving benchmark so that numbers can be compared with the ones users quote:
TTFT from send to the first chunk with text; TPOT per request (e2e - TTFT) / (output tokens - 1); ITL
the pooled gaps between chunks; throughputs over the level's duration; goodput the requests per second
that meet every SLO. Two differences, both deliberate: the duration runs from the first measured send to
the last measured end (warm-up excluded), and percentiles interpolate linearly like numpy's default.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional, Sequence

from perfstack.loadtest.record import Dist, Request, Slo, Summary


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


def summarize(requests: Sequence[Request], slo: Optional[Slo] = None) -> Summary:
    measured = [r for r in requests if not r.warmup]
    ok = [r for r in measured if r.ok]
    errors: dict[str, int] = {}
    for r in measured:
        if not r.ok:
            errors[r.error or "no-text"] = errors.get(r.error or "no-text", 0) + 1
    if measured:
        t0 = min(r.start_s for r in measured)
        t1 = max(r.start_s + (r.e2e_ms or 0.0) / 1e3 for r in measured)
    else:
        t0 = t1 = 0.0
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
    s.request_throughput = len(ok) / duration
    s.output_throughput = out_tokens / duration
    s.total_throughput = (out_tokens + sum(in_counts)) / duration
    s.ttft = dist(r.ttft_ms for r in ok)
    s.tpot = dist(r.tpot_ms for r in ok)
    s.itl = dist(x for r in ok for x in r.itl_ms)
    s.e2e = dist(r.e2e_ms for r in ok)
    s.mean_input_tokens = sum(in_counts) / len(in_counts) if in_counts else None
    s.mean_output_tokens = out_tokens / len(ok) if ok else None
    s.concurrency_mean = concurrency_mean(measured, t0, t1)
    if slo is not None:
        n_good = sum(good(r, slo) for r in measured)
        s.goodput = n_good / duration
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
