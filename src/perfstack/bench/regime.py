"""Which figure judges a message size: its latency or its bandwidth.

A collective's time is roughly a fixed latency plus the bytes it moves over the bus divided by the
bus bandwidth. Small messages are all latency: their bus bandwidth is tiny on any fabric, and
judging it against the link's peak would call every healthy machine slow. Large messages are all
bandwidth. So each size is judged by the term that dominates it:

- latency regime (bus time below the reference latency): the measured time against the reference
  latency plus the bus time at the practical ceiling;
- bandwidth regime (the latency is under 5% of the bus time): bus bandwidth against the link's peak
  and practical ceiling, as every bandwidth benchmark is judged;
- in between both terms matter and neither reference applies alone: reported, not judged.

The reference latencies are thresholds, not measurements of this machine: the book (sources.BOOK) puts NCCL's
small-message latency inside one node at a few microseconds over NVLink and at tens of
microseconds once peer-to-peer is off (ch. 4); the thresholds sit between those.
"""

from __future__ import annotations

from perfstack.bench.verdict import lower_is_better
from perfstack.model import Measurement
from perfstack.sources import BOOK

REFERENCE_LATENCY_S = {"nvlink": 10e-6, "pcie": 25e-6}
LATENCY_SOURCE = ("healthy intra-node NCCL small-message latency over {link} (a threshold: a few µs over "
                  f"NVLink, tens of µs with peer-to-peer off, per the book {BOOK})")
BANDWIDTH_FROM = 20.0  # bus time / latency at and above which a size is judged by bandwidth


def bus_seconds(bus_bytes: float, peak_gbps: float | None, practical: float | None) -> float | None:
    """Seconds ``bus_bytes`` take at the practical ceiling of the link (None when the peak is unknown)."""
    if not peak_gbps:
        return None
    return bus_bytes / (peak_gbps * (practical or 1.0) * 1e9)


def regime(bus_s: float | None, latency_s: float | None) -> str:
    """"latency", "transition", "bandwidth", or "unknown" when either reference is missing."""
    if bus_s is None or not latency_s:
        return "unknown"
    if bus_s <= latency_s:
        return "latency"
    if bus_s >= BANDWIDTH_FROM * latency_s:
        return "bandwidth"
    return "transition"


def judge_latency(m: Measurement, time_s: float, latency_s: float, bus_s: float, link: str) -> Measurement:
    """Verdict of a latency-regime size from its time; the bandwidth figure stays as measured."""
    reference = latency_s + bus_s
    shadow = Measurement(bench=m.bench, name=m.name, value=time_s * 1e6, unit="µs")
    lower_is_better(shadow, reference * 1e6, "")
    m.verdict = shadow.verdict
    m.notes.insert(0, f"judged by latency: {time_s * 1e6:.1f} µs per call against {reference * 1e6:.1f} µs "
                      f"({latency_s * 1e6:.0f} µs {LATENCY_SOURCE.format(link=link)} + the bytes at the practical "
                      f"bus bandwidth); its bus bandwidth is small at this size on any fabric")
    return m
