"""The level figures against independent computations (numpy) and vLLM's definitions."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from perfstack.errors import UsageError
from perfstack.loadtest import metrics
from perfstack.loadtest.load import arrivals
from perfstack.records.loadtest import Request, Slo


def _reqs(seed: int = 1, n: int = 60) -> list[Request]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ttft = rng.uniform(20, 400)
        itl = [rng.uniform(5, 40) for _ in range(rng.randint(1, 30))]
        out.append(Request(start_s=i * 0.1, ttft_ms=ttft, itl_ms=itl, e2e_ms=ttft + sum(itl),
                           output_tokens=len(itl) + 1, input_tokens=100 + i))
    return out


def test_percentiles_match_numpy():
    v = sorted(random.Random(3).uniform(0, 100) for _ in range(101))
    for q in (0, 1, 50, 90, 99, 100):
        assert metrics.percentile(v, q) == pytest.approx(float(np.percentile(v, q)))


def test_summary_follows_vllm_definitions():
    reqs = _reqs()
    s = metrics.summarize(reqs)
    ttft = [r.ttft_ms for r in reqs]
    tpot = [(r.e2e_ms - r.ttft_ms) / (r.output_tokens - 1) for r in reqs]
    itl = [x for r in reqs for x in r.itl_ms]
    assert s.ttft.median == pytest.approx(float(np.median(ttft)))
    assert s.tpot.p99 == pytest.approx(float(np.percentile(tpot, 99)))
    assert s.itl.mean == pytest.approx(float(np.mean(itl)))
    # the window: first send to last send (the load drains after it), every count taken inside it
    t0, t1 = reqs[0].start_s, reqs[-1].start_s
    dur = t1 - t0
    assert s.duration_s == pytest.approx(dur)
    arrivals = [(r.start_s + (r.ttft_ms + float(np.sum(r.itl_ms[:k]))) / 1e3, r.output_tokens / (len(r.itl_ms) + 1))
                for r in reqs for k in range(len(r.itl_ms) + 1)]
    out = sum(share for t, share in arrivals if t0 <= t <= t1)
    firsts = [r for r in reqs if r.start_s + r.ttft_ms / 1e3 <= t1]
    ended = [r for r in reqs if r.start_s + r.e2e_ms / 1e3 <= t1]
    assert s.output_throughput == pytest.approx(out / dur)
    assert s.total_throughput == pytest.approx((out + sum(r.input_tokens for r in firsts)) / dur)
    assert s.request_throughput == pytest.approx(len(ended) / dur)
    busy = sum(min(r.start_s + r.e2e_ms / 1e3, t1) - r.start_s for r in reqs)
    assert s.concurrency_mean == pytest.approx(busy / dur)


def test_warmup_and_failures_are_kept_apart():
    reqs = _reqs(n=20)
    reqs[0].warmup = True
    reqs[1].error, reqs[1].ttft_ms = "http-5xx", None
    reqs[2].error = "timeout"
    s = metrics.summarize(reqs)
    assert s.completed == 17 and s.failed == 2
    assert s.errors == {"http-5xx": 1, "timeout": 1}
    assert s.ttft.n == 17


def test_goodput_counts_requests_meeting_every_objective():
    reqs = _reqs()
    slo = Slo(ttft_ms=200, itl_ms=25)
    s = metrics.summarize(reqs, slo)
    good = [r for r in reqs if r.ttft_ms <= 200 and (r.e2e_ms - r.ttft_ms) / (r.output_tokens - 1) <= 25]
    assert 0 < len(good) < len(reqs)
    assert s.slo_attainment == pytest.approx(len(good) / len(reqs))
    ended = [r for r in good if r.start_s + r.e2e_ms / 1e3 <= reqs[-1].start_s]  # in the window
    assert s.goodput == pytest.approx(len(ended) / s.duration_s)
    assert metrics.meets(s, Slo(ttft_ms=200, itl_ms=25, attainment=len(good) / len(reqs)))
    assert not metrics.meets(s, Slo(ttft_ms=200, itl_ms=25, attainment=1.0))


def test_empty_level():
    s = metrics.summarize([])
    assert s.completed == 0 and s.ttft is None and s.request_throughput == 0


@pytest.mark.parametrize("text,expect", [
    ("ttft=500ms,itl=50ms", (500, 50, None)),
    ("TTFT=1.5s, e2e=20s", (1500, None, 20000)),
    ("tpot=40", (None, 40, None)),
])
def test_parse_slo(text, expect):
    s = metrics.parse_slo(text)
    assert (s.ttft_ms, s.itl_ms, s.e2e_ms) == expect


@pytest.mark.parametrize("text", ["", "ttft", "ttft=abc", "foo=1ms", "ttft=-5ms", "itl=nan"])
def test_parse_slo_rejects(text):
    with pytest.raises(UsageError):
        metrics.parse_slo(text)


def test_arrivals_poisson_rate_and_burstiness():
    a = arrivals(10.0, 20000, 1.0, seed=0)
    gaps = np.diff(a)
    assert np.mean(gaps) == pytest.approx(0.1, rel=0.03)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1.0, rel=0.05)  # exponential: CV 1
    bursty = np.diff(arrivals(10.0, 20000, 0.25, seed=0))
    assert np.mean(bursty) == pytest.approx(0.1, rel=0.05)
    assert np.std(bursty) / np.mean(bursty) == pytest.approx(2.0, rel=0.08)  # gamma(k): CV 1/sqrt(k)
    assert arrivals(10.0, 50, 1.0, seed=4) == arrivals(10.0, 50, 1.0, seed=4)
    assert arrivals(math.inf, 3, 1.0, 0) == [0.0, 0.0, 0.0]
