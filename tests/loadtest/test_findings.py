"""The findings' rules on load levels built from a small server simulation, each with a control that
must stay silent."""

from __future__ import annotations

import random

import pytest

from perfstack.loadtest import findings, metrics, sweep
from perfstack.records.loadtest import ClientLoad, Level, LoadTest, Request, ServerSample, Slo


def _level(load: float, reqs: list[Request], slo: Slo | None = None, server=(), client=None) -> Level:
    return Level(mode="concurrency", load=load, requests=reqs, summary=metrics.summarize(reqs, slo),
                 server=list(server), client=client)


def _lt(levels: list[Level], slo: Slo | None = None) -> LoadTest:
    return LoadTest(url="http://x", api="chat", model="m", workload={"input_len": 512}, levels=levels, slo=slo,
                    sweep=sweep.summary(levels, slo, None))


def _simple(n: int, ttft: float, gap: float, tokens: int = 20, spacing: float = 0.05) -> list[Request]:
    return [Request(start_s=i * spacing, ttft_ms=ttft, itl_ms=[gap] * (tokens - 1), e2e_ms=ttft + gap * (tokens - 1),
                    output_tokens=tokens, input_tokens=512) for i in range(n)]


def test_queueing_named_when_ttft_is_mostly_waiting():
    light = _level(1, _simple(20, 50, 10))
    heavy = _level(32, _simple(100, 900, 12), server=[ServerSample(t_s=1, running=8, waiting=24)])
    f = findings.queueing(_lt([light, heavy]))
    assert f is not None and f.id == "serve-queueing"
    assert "94%" in f.evidence and "24.0 requests waiting" in f.evidence
    # control: latency barely above the light level
    assert findings.queueing(_lt([light, _level(32, _simple(100, 60, 12))])) is None


def _served(stall_at_prefill: bool, seed: int = 0) -> list[Request]:
    """A decode loop stepping every 10 ms; a stall of 80 ms hits every running stream, either when a new
    request's prefill runs (the server does not chunk prefills) or at random steps (the control)."""
    rng = random.Random(seed)
    starts = sorted(rng.uniform(0, 4) for _ in range(40))
    stalls: list[float] = []
    reqs = []
    for s in starts:
        first = s + 0.03  # prefill takes 30 ms
        if stall_at_prefill:
            stalls.append(s)
        reqs.append((s, first))
    if not stall_at_prefill:
        stalls = [rng.uniform(0, 5) for _ in starts]
    out = []
    for s, first in reqs:
        t, gaps = first, []
        for _ in range(60):
            g = 0.010
            if any(t <= x < t + g for x in stalls):
                g += 0.080
            gaps.append(g * 1e3)
            t += g
        out.append(Request(start_s=s, ttft_ms=(first - s) * 1e3, itl_ms=gaps, e2e_ms=(t - s) * 1e3,
                           output_tokens=61, input_tokens=2048))
    return out


def test_prefill_stalls_linked_to_other_requests_prefills():
    f = findings.prefill_stalls(_lt([_level(16, _served(True))]))
    assert f is not None and f.id == "serve-prefill-stalls"
    assert "chunked" in f.fix
    # control: the same number of stalls, at moments unrelated to prefills
    assert findings.prefill_stalls(_lt([_level(16, _served(False))])) is None


def test_plateau_with_full_kv_cache():
    levels = []
    for c, thr_tokens, ttft in ((1, 20, 50), (2, 20, 50), (4, 20, 60), (8, 20, 400), (16, 20, 1500)):
        reqs = _simple(max(20, 3 * c), ttft, 10, tokens=thr_tokens, spacing=0.05 * min(c, 4) / c)
        levels.append(_level(c, reqs, server=[ServerSample(t_s=0.5, running=min(c, 4), kv_usage=min(1.0, c / 4 * 0.96),
                                                           preemptions=float(c))]))
    lt = _lt(levels)
    f = findings.plateau(lt)
    assert f is not None and "KV cache is full" in f.title
    assert "preemptions" in f.evidence


def test_errors_and_their_fix():
    reqs = _simple(50, 50, 10)
    for r in reqs[:10]:
        r.error, r.detail, r.ttft_ms = "http-429", "HTTP 429: too many requests", None
    f = findings.errors(_lt([_level(8, reqs)]))
    assert f is not None and f.severity.value == "critical" and "10 http-429" in f.evidence
    assert "queue" in f.fix
    assert findings.errors(_lt([_level(8, _simple(50, 50, 10))])) is None


def test_decode_bound_fraction():
    lt = _lt([_level(1, _simple(20, 50, 20.0))])
    bound = findings.Bound(itl_ms=lambda b, p, g: 2.0, what="a model on a GPU")
    f = findings.decode_bound(lt, bound)
    assert f is not None and f.title.startswith("Decode runs at 10%")
    assert findings.decode_bound(lt, findings.Bound(itl_ms=lambda b, p, g: 15.0, what="x")) is None


def test_client_saturation():
    hot = ClientLoad(cpu_fraction=0.97, loop_lag_p99_ms=12.0, loop_lag_max_ms=30.0, cpu_us_per_chunk=80)
    cool = ClientLoad(cpu_fraction=0.2, loop_lag_p99_ms=0.3, loop_lag_max_ms=1.0, cpu_us_per_chunk=20)
    assert findings.client_saturated(_lt([_level(512, _simple(20, 50, 10), client=hot)])) is not None
    assert findings.client_saturated(_lt([_level(512, _simple(20, 50, 10), client=cool)])) is None


def test_slo_missed_names_the_failing_metric_and_ranks_first():
    slo = Slo(ttft_ms=200, itl_ms=50)
    light = _level(1, _simple(20, 50, 10), slo)
    heavy = _level(16, _simple(60, 900, 12), slo)
    lt = _lt([light, heavy], slo)
    fs = findings.findings(lt)
    ids = [f.id for f in fs]
    assert ids[0] == "serve-slo-missed" and "serve-queueing" in ids
    assert "TTFT p90 900 ms vs 200 ms ✗" in fs[0].evidence
    assert lt.sweep["max_load_meeting_slo"] == 1


def test_the_decode_bound_is_the_estimates_engine_grade_itl():
    # the load test judges decode against the same model `perfstack estimate infer` shows (kernels' fixed
    # cost included), not against bytes over bandwidth alone
    import argparse

    from perfstack.cli.loadtest import _bound
    from perfstack.estimate import catalog, hardware, infer

    b = _bound(argparse.Namespace(model_config="llama-3.2-1b", gpu="h100-sxm", tp=1))
    assert b is not None
    est = infer.estimate(catalog.get("llama-3.2-1b"), hardware.resolve("h100-sxm", "bf16"),
                         infer.InferSettings(batch=4, prompt=512, gen=64))
    assert b.itl_ms(4, 512, 64) == pytest.approx(est.time["itl_expected_s"] * 1e3)
    assert b.itl_ms(4, 512, 64) > est.time["itl_s"] * 1e3 * 1.5  # the fixed cost is half a 1B step
