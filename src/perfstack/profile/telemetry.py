"""NVML samples taken while a workload ran (capture mode), summarized for the throttling rule."""

from __future__ import annotations

from typing import Any

THROTTLE_BITS = {0x4: "SW power cap", 0x8: "HW slowdown", 0x20: "SW thermal slowdown", 0x40: "HW thermal slowdown",
                 0x80: "HW power brake"}


def telemetry_summary(samples: list[dict], spec: Any = None) -> dict | None:
    """Throttle statistics of NVML samples: t, sm_clock_mhz, power_w, temperature_c,
    clocks_event_reasons (bitmask or list of names), utilization_gpu."""
    rows = [s for s in samples if isinstance(s, dict)]
    if not rows:
        return None
    busy = [s for s in rows if (_num(s.get("utilization_gpu")) or 0) >= 5] or rows
    reasons: set[str] = set()
    thr = []
    for s in busy:
        r = s.get("clocks_event_reasons")
        names = []
        if isinstance(r, (int, float)) and not isinstance(r, bool):
            names = [n for b, n in THROTTLE_BITS.items() if int(r) & b]
        elif isinstance(r, (list, tuple)):
            names = [str(x) for x in r if any(k in str(x).lower() for k in ("power", "thermal", "slowdown", "brake"))]
        if names:
            reasons.update(names)
            thr.append(s)
    clocks = [c for c in (_num(s.get("sm_clock_mhz")) for s in rows) if c]
    max_clock = max([*clocks, float(getattr(spec, "boost_clock_mhz", 0) or 0)]) if clocks else 0.0
    tclk = [c for c in (_num(s.get("sm_clock_mhz")) for s in thr) if c]
    temps = [t for t in (_num(s.get("temperature_c")) for s in rows) if t is not None]
    power = [w for w in (_num(s.get("power_w")) for s in rows) if w is not None]
    return {"samples": len(rows), "busy_samples": len(busy), "throttled_pct": round(100 * len(thr) / len(busy), 1),
            "reasons": sorted(reasons), "throttled_clock_mhz": (sum(tclk) / len(tclk)) if tclk else max_clock,
            "max_clock_mhz": max_clock, "max_temperature_c": max(temps) if temps else None,
            "max_power_w": max(power) if power else None}


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
