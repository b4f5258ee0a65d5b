"""NVML samples taken while a workload ran (capture mode), summarized for the throttling rule."""

from __future__ import annotations

from typing import Any

from perfstack.records.profile import Telemetry

THROTTLE_BITS = {0x4: "SW power cap", 0x8: "HW slowdown", 0x20: "SW thermal slowdown", 0x40: "HW thermal slowdown",
                 0x80: "HW power brake"}


def telemetry_summary(samples: list[dict[str, Any]], spec: Any = None) -> Telemetry | None:
    """Throttle statistics of NVML samples: t, sm_clock_mhz, power_w, temperature_c,
    clocks_event_reasons (bitmask or list of names), utilization_gpu."""
    rows = [s for s in samples if isinstance(s, dict)]
    if not rows:
        return None
    busy = [s for s in rows if (_num(s.get("utilization_gpu")) or 0) >= 5] or rows
    reasons: set[str] = set()
    thr = []
    for s in busy:
        names = _throttle_reasons(s.get("clocks_event_reasons"))
        if names:
            reasons.update(names)
            thr.append(s)
    clocks = _values(rows, "sm_clock_mhz", nonzero=True)
    max_clock = max([*clocks, float(getattr(spec, "boost_clock_mhz", 0) or 0)]) if clocks else 0.0
    tclk = _values(thr, "sm_clock_mhz", nonzero=True)
    temps, power = _values(rows, "temperature_c"), _values(rows, "power_w")
    return Telemetry(samples=len(rows), busy_samples=len(busy), throttled_pct=round(100 * len(thr) / len(busy), 1),
                     reasons=sorted(reasons),
                     throttled_clock_mhz=(sum(tclk) / len(tclk)) if tclk else max_clock, max_clock_mhz=max_clock,
                     max_temperature_c=max(temps) if temps else None,
                     max_power_w=max(power) if power else None)


def _values(rows: list[dict[str, Any]], key: str, nonzero: bool = False) -> list[float]:
    """The numbers the samples hold under ``key`` (with ``nonzero``: those that are not 0)."""
    vs = [_num(s.get(key)) for s in rows]
    return [v for v in vs if v is not None and (v or not nonzero)]


def _throttle_reasons(r: Any) -> list[str]:
    """The throttle reasons in one sample's clocks_event_reasons: NVML's bitmask, or a list of names
    (those that slow the clocks: power, thermal, slowdown, brake)."""
    if isinstance(r, (int, float)) and not isinstance(r, bool):
        return [n for b, n in THROTTLE_BITS.items() if int(r) & b]
    if isinstance(r, (list, tuple)):
        return [str(x) for x in r if any(k in str(x).lower() for k in ("power", "thermal", "slowdown", "brake"))]
    return []


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
