"""Sweeps, knees, capacity, the measured window and the SLO search against servers whose truth is set by hand
(tests/loadtest/fake_server.py): a TTFT that grows with the streams running, a batch cap, a slow start."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")

from fake_server import InThread, Server  # noqa: E402  (pytest puts this folder on sys.path)

from perfstack.cli.main import main  # noqa: E402
from perfstack.loadtest import findings, metrics, sweep  # noqa: E402
from perfstack.records.loadtest import ClientLoad, Level, LoadTest, Request, ServerSample  # noqa: E402
from perfstack.model import Run  # noqa: E402
from perfstack.report.loadtest_html import render_loadtest_html  # noqa: E402
from perfstack.report.loadtest_view import view_of  # noqa: E402


def _run(url: str, tmp_path: Path, *flags: str) -> Run:
    out = tmp_path / "lt.json"
    assert main(["loadtest", url, "-o", str(out), "--no-color", "-q", *flags]) == 0
    return Run.load(out)


def _claims_saturation(f) -> bool:
    return "saturates near" in f.fix or "is saturated" in f.title or "Throughput flat" in f.title


def test_a_sweep_stopped_by_the_slo_while_throughput_grows_reaches_no_knee(tmp_path):
    """TTFT = 20 ms per stream running; 24 tokens every 10 ms: throughput still grows by 40% from 8 to 16
    streams when the TTFT objective (230 ms: 11 streams meet it at 220 ms, 12 do not at 240) stops the sweep."""
    srv = Server(interval=0.01, ttft=0.02, ttft_per_running=0.02)
    with InThread(srv) as fs:
        run = _run(fs.url, tmp_path, "--sweep", "--requests", "12", "--output-len", "24", "--slo", "ttft=230ms")
    lt = run.loadtest
    sw = lt.sweep
    by_load = {lv.load: lv for lv in lt.levels}
    assert by_load[16].summary.output_throughput > 1.3 * by_load[8].summary.output_throughput
    assert "knee" not in sw and "stopped by the SLO at 16 streams" in sw["knee_not_reached"]
    assert not any(_claims_saturation(f) for f in run.findings), [(f.title, f.fix) for f in run.findings]
    # the SLO's boundary, bisected between 8 and 16: the truth is 11 streams
    assert abs(sw["max_load_meeting_slo"] - 11) <= 1
    assert sw["min_load_missing_slo"] == sw["max_load_meeting_slo"] + 1
    # how sure: from the share of good requests at each (a busy host makes some late, and says so)
    assert 0 < sw["confidence_at_max"] <= 1 and 0 < sw["confidence_missing"] <= 1
    assert any(lv.bisect for lv in lt.levels)
    assert "knee not reached: stopped by the SLO at 16 streams" in view_of(lt, run).sweep


def test_a_rate_sweep_measures_capacity_while_the_server_is_full(tmp_path):
    """4 slots, each request 10 ms to its first token and 9 more tokens 5 ms apart: 4 / 55 ms = 72.7 req/s."""
    truth = 4 / (0.01 + 9 * 0.005)
    with InThread(Server(interval=0.005, ttft=0.01, max_running=4)) as fs:
        run = _run(fs.url, tmp_path, "--rate", "inf", "--sweep", "--requests", "40", "--output-len", "10",
                   "--slo", "e2e=10s")
    lt = run.loadtest
    probe = lt.levels[0]
    assert probe.probe and math.isinf(probe.load) and not any(lv.probe for lv in lt.levels[1:])
    # (the whole burst's throughput read 23% low here: its first wave's TTFT and its last, partly filled, wave)
    assert abs(lt.sweep["capacity_req_s"] / truth - 1) < 0.05
    assert [lv.load for lv in lt.levels[1:]] == sweep.rate_loads(lt.sweep["capacity_req_s"])
    # the probe competes neither for the knee nor in the SLO search
    assert math.isfinite(lt.sweep.get("knee", 0)) and math.isfinite(lt.sweep["max_load_meeting_slo"])
    view = view_of(lt, run)
    assert view.rows[0][0] == "all at once (capacity probe)"
    assert all("all at once" not in label for c in view.curves for _, pts, _ in c.series for *_, label in pts)


def test_throughput_at_a_queueing_level_leaves_the_warm_up_out(tmp_path):
    """4 slots, 8 streams, and the first 9 requests (the probe and the 8 warm-ups) 200 ms slower: the
    warm-ups hold the slots while the first measured requests queue behind them (the window that opened at
    the first measured send read 17% low here)."""
    truth = 4 * 10 / (0.01 + 9 * 0.02)  # output tokens/s: 4 slots of 10 tokens per 190 ms
    srv = Server(interval=0.02, ttft=0.01, max_running=4, slow_first=9, slow_extra=0.2)
    with InThread(srv) as fs:
        run = _run(fs.url, tmp_path, "--concurrency", "8", "--requests", "40", "--output-len", "10")
    lv = run.loadtest.levels[0]
    s = lv.summary
    assert abs(s.output_throughput / truth - 1) < 0.05, s.output_throughput
    assert abs(s.request_throughput / (truth / 10) - 1) < 0.05
    # the window opened when the last warm-up ended, after the first measured send
    t0, _ = metrics.window(lv.requests)
    assert t0 > min(r.start_s for r in lv.requests if not r.warmup) + 0.1


def test_one_stream_with_a_ttft_that_varies_is_no_queue(tmp_path):
    """At one stream nothing waits: a TTFT of 10 ms plus 0..200 ms drawn per prompt (with this seed the
    median is 11 times the fastest) is the server's own."""
    with InThread(Server(interval=0.002, ttft=0.01, ttft_jitter=0.2, jitter_seed=3)) as fs:
        run = _run(fs.url, tmp_path, "--concurrency", "1", "--requests", "30", "--output-len", "4")
    s = run.loadtest.levels[0].summary
    assert s.ttft.median > 5 * s.ttft.min  # the spread the old rule read as saturation
    assert "serve-queueing" not in {f.id for f in run.findings}


def _reqs(n: int, ttft: float, spacing: float = 0.05) -> list[Request]:
    return [Request(start_s=i * spacing, ttft_ms=ttft, itl_ms=[10.0] * 19, e2e_ms=ttft + 190, output_tokens=20)
            for i in range(n)]


def _level(load: float, reqs: list[Request], server=(), client=None) -> Level:
    return Level(mode="concurrency", load=load, requests=reqs, summary=metrics.summarize(reqs), server=list(server),
                 client=client)


def _lt(levels: list[Level]) -> LoadTest:
    return LoadTest(url="http://x", api="chat", model="m", workload={}, levels=levels,
                    sweep=sweep.summary(levels, None, None))


def test_a_busy_client_host_is_not_queueing_without_the_servers_word():
    busy = ClientLoad(0.1, 12.0, 30.0, 40.0, cpu_wait_fraction=0.3)
    light, heavy = _level(1, _reqs(20, 50)), _level(4, _reqs(40, 400, 0.02), client=busy)
    assert findings.queueing(_lt([light, heavy])) is None
    # the server's own count of waiting requests stands whatever the client's host did
    queued = _level(4, _reqs(40, 400, 0.02), client=busy, server=[ServerSample(t_s=1, running=2, waiting=3)])
    f = findings.queueing(_lt([light, queued]))
    assert f is not None and "3.0 requests waiting" in f.evidence
    # one level alone: only the server's count shows a queue
    assert findings.queueing(_lt([_level(1, _reqs(20, 50)[:10] + _reqs(10, 400))])) is None


def test_reports_name_the_prompt_file_and_label_the_curve_points(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(f'{{"prompt": "{i}: hello there", "max_tokens": 3}}\n' for i in range(5)))
    with InThread(Server(interval=0.002, ttft=0.005)) as fs:
        run = _run(fs.url, tmp_path, "--prompts", str(prompts), "--concurrency", "1,2", "--requests", "6")
    view = view_of(run.loadtest, run)
    assert view.workload.startswith("5 prompts from p.jsonl")
    html = render_loadtest_html(view)
    assert ">1 streams</text>" in html and ">2 streams</text>" in html
