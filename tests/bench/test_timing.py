import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfstack.bench.timing import (
    HostTimer,
    measure,
    plan_reps,
    spread_notes,
    summarize,
)


class FakeClock:
    """Each call of the measured function advances time by the next duration."""

    def __init__(self, durations):
        self.t, self.durations = 0.0, iter(durations)

    def __call__(self):
        return self.t

    def work(self):
        self.t += next(self.durations)


def test_warmup_by_time_then_reps_from_budget():
    clock = FakeClock([0.01] * 10_000)
    samples = measure(clock.work, HostTimer(clock), budget_s=0.5, warmup_s=0.1, min_reps=5, max_reps=1000)
    assert len(samples) == 50  # 0.5 s budget / 0.01 s per call
    assert samples == pytest.approx([0.01] * 50)


def test_between_runs_outside_the_timed_region():
    clock = FakeClock([0.01] * 1000)
    flushes = []
    samples = measure(clock.work, HostTimer(clock), budget_s=0.05, warmup_s=0.0, min_reps=3,
                      between=lambda: flushes.append(clock.t))
    assert samples == pytest.approx([0.01] * len(samples))
    assert len(flushes) == len(samples) + 2  # two warm-up calls also flush first


def test_plan_reps_bounds():
    assert plan_reps(1.0, 0.5, 5, 100) == 5
    assert plan_reps(1e-6, 0.5, 5, 100) == 100
    assert plan_reps(0.0, 0.5, 5, 100) == 100


def test_summary_and_noisy_note():
    s = summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert s["median"] == 3.0 and s["p10"] == pytest.approx(1.4) and s["p90"] == pytest.approx(4.6)
    assert spread_notes(s) and "noisy" in spread_notes(s)[0]
    assert spread_notes(summarize([1.0, 1.001, 0.999])) == []
    assert summarize([]) == {}


@given(st.lists(st.floats(min_value=1e-9, max_value=1e3), min_size=1, max_size=200))
def test_summary_is_ordered(xs):
    s = summarize(xs)
    assert s["min"] <= s["p10"] <= s["median"] <= s["p90"] <= s["max"]
    assert s["n"] == len(xs) and s["cv"] >= 0
