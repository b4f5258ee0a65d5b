"""Which figure judges a message size, and the latency verdict."""

import pytest

from perfstack.bench import regime as r
from perfstack.model import Measurement


def test_bus_seconds():
    assert r.bus_seconds(450e9, 450.0, 1.0) == pytest.approx(1.0)
    assert r.bus_seconds(315e6, 450.0, 0.7) == pytest.approx(1e-3)
    assert r.bus_seconds(1e6, None, 0.7) is None


@pytest.mark.parametrize("bus,lat,want", [(1e-6, 10e-6, "latency"), (10e-6, 10e-6, "latency"),
                                          (50e-6, 10e-6, "transition"), (200e-6, 10e-6, "bandwidth"),
                                          (1.0, 10e-6, "bandwidth"), (None, 10e-6, "unknown"), (1e-6, None, "unknown")])
def test_regime(bus, lat, want):
    assert r.regime(bus, lat) == want


@pytest.mark.parametrize("time_us,verdict", [(8.0, "good"), (11.0, "good"), (15.0, "below expected"),
                                             (40.0, "low")])
def test_latency_verdict_is_against_latency_plus_bus_time(time_us, verdict):
    m = Measurement(bench="collective", name="collective.all_reduce.4KiB", value=0.5, unit="GB/s")
    r.judge_latency(m, time_us * 1e-6, 10e-6, 1e-6, "nvlink")
    assert m.verdict == verdict
    assert m.value == 0.5  # the bandwidth figure is kept as measured
    assert "judged by latency" in m.notes[0] and "11.0 µs" in m.notes[0]
