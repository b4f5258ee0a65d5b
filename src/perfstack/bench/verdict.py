"""How a measured figure compares with the SKU's peak and the known practical ceiling."""

from __future__ import annotations

from perfstack.model import Measurement


def judge(m: Measurement, peak: float | None, source: str, expected: float | None) -> Measurement:
    """Fill peak, fraction and verdict. ``expected`` is the practical ceiling as a fraction of
    peak (cuBLAS GEMM ≈ 0.8 on H100): reaching 90% of it is "good"."""
    m.peak, m.peak_source, m.expected_fraction = peak, source, expected
    if m.value is None or not peak:
        m.verdict = "no reference" if m.value is not None else m.status
        return m
    m.fraction = m.value / peak
    ceiling = expected or 1.0
    ratio = m.fraction / ceiling
    m.verdict = "good" if ratio >= 0.9 else "below expected" if ratio >= 0.7 else "low"
    return m


def lower_is_better(m: Measurement, reference: float, label: str) -> Measurement:
    """For latencies: compare with a reference value (e.g. 2 µs per graph-replayed kernel)."""
    m.peak, m.peak_source = reference, label  # a reference to beat, not a peak: no "% of peak"
    if m.value is not None:
        m.verdict = "good" if m.value <= reference else "below expected" if m.value <= 2 * reference else "low"
    return m
