"""--repeat N: every figure the median over N runs of its level, with an order-statistic interval; the diff
judges repeated levels on their runs."""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import pytest

from perfstack.compare.loadtest import level_diff
from perfstack.loadtest import metrics
from perfstack.records.loadtest import Level, Request


@pytest.mark.parametrize("n,want", [(3, 0.75), (5, 0.9375), (10, 0.978515625)])
def test_the_medians_interval_holds_the_true_median_as_often_as_it_says(n, want):
    rng = random.Random(n)
    held = 0
    trials = 4000
    for _ in range(trials):
        values = [rng.lognormvariate(0, 1) for _ in range(n)]  # skewed: the true median is 1
        lo, hi, cov = metrics.median_ci(values)
        held += lo <= 1.0 <= hi
    assert cov == pytest.approx(want)
    assert abs(held / trials - want) < 0.02


def _runs(rng: random.Random, runs: int, ttft_ms: float, n: int = 30) -> list[Request]:
    out = []
    for k in range(runs):
        t = 0.0
        for _ in range(n):
            ttft = ttft_ms * rng.lognormvariate(0, 0.3)
            out.append(Request(start_s=t, ttft_ms=ttft, itl_ms=[10.0] * 7, e2e_ms=ttft + 70, output_tokens=8,
                               repeat=k))
            t += (ttft + 70) / 1e3
    return out


def _level(reqs: list[Request]) -> Level:
    return Level(mode="concurrency", load=1, requests=reqs, summary=metrics.summarize(reqs))


def test_a_repeated_level_is_the_median_of_its_runs():
    reqs = _runs(random.Random(1), 5, 50)
    per_run = [metrics.summarize_run(p) for p in metrics.runs(reqs)]
    s = metrics.summarize(reqs)
    assert s.completed == 150 and s.ttft.n == 150
    assert s.ttft.median == pytest.approx(statistics.median(p.ttft.median for p in per_run))
    assert s.output_throughput == pytest.approx(statistics.median(p.output_throughput for p in per_run))
    ci, cov = metrics.spread(reqs)
    assert cov == pytest.approx(0.9375)
    assert ci["ttft.median"] == [min(p.ttft.median for p in per_run), max(p.ttft.median for p in per_run)]


def test_the_diff_judges_repeated_levels_on_their_runs():
    rng = random.Random(2)
    before = _level(_runs(rng, 5, 50))
    slower = level_diff(before, _level(_runs(rng, 5, 75)), None)
    same = level_diff(before, _level(_runs(rng, 5, 50)), None)
    v = {f.name: f for f in slower.figures}
    assert v["TTFT p50 @ 1 streams"].verdict == "regressed" and "5 and 5 runs" in v["TTFT p50 @ 1 streams"].note
    assert {f.name: f.verdict for f in same.figures}["TTFT p50 @ 1 streams"] == "within noise"


def test_repeat_through_the_cli(tmp_path: Path):
    pytest.importorskip("aiohttp")
    from fake_server import InThread, Server

    from perfstack.cli.main import main
    from perfstack.model import Run
    from perfstack.report.loadtest_md import render_loadtest_md
    from perfstack.report.loadtest_view import view_of

    out = tmp_path / "r.json"
    with InThread(Server(interval=0.002, ttft=0.005, ttft_jitter=0.02)) as fs:
        assert main(["loadtest", fs.url, "-q", "-o", str(out), "--concurrency", "2", "--requests", "8",
                     "--output-len", "4", "--repeat", "3"]) == 0
    run = Run.load(out)
    lv = run.loadtest.levels[0]
    assert lv.repeats == 3 and {r.repeat for r in lv.requests} == {0, 1, 2} and lv.ci_coverage == 0.75
    assert lv.summary.completed == 24 and set(lv.ci) >= {"output_throughput", "ttft.median", "tpot.p99"}
    view = view_of(run.loadtest, run)
    assert view.repeats[0][:2] == ["2 streams", "3"] and view.repeats[0][-1] == "75%"
    assert "Median over the runs" in render_loadtest_md(view)


def test_csv_per_level_and_per_request_through_the_cli(tmp_path: Path):
    """The CSV files beside the JSON: a row per level and per request, and a server's text inert in a spreadsheet."""
    pytest.importorskip("aiohttp")
    import csv

    from fake_server import InThread, Server

    from perfstack.cli.main import main

    stem = tmp_path / "lt"
    with InThread(Server(interval=0.002, ttft=0.005, model="=HYPERLINK(\"http://x\")")) as fs:
        assert main(["loadtest", fs.url, "-q", "-o", str(tmp_path / "lt.json"), "--csv", str(stem),
                     "--concurrency", "1,2", "--requests", "6", "--output-len", "4"]) == 0
    levels = list(csv.DictReader((tmp_path / "lt.levels.csv").read_text().splitlines()))
    reqs = list(csv.DictReader((tmp_path / "lt.requests.csv").read_text().splitlines()))
    assert [r["load"] for r in levels] == ["1.0", "2.0"] and all(float(r["output_throughput"]) > 0 for r in levels)
    assert float(levels[0]["ttft_median_ms"]) >= 5
    assert len(reqs) == 6 + 1 + 6 + 2 and sum(r["warmup"] == "true" for r in reqs) == 3
    assert all(len(r["itl_ms"].split()) == 3 for r in reqs)
    # the same files from the saved Run
    again = tmp_path / "again"
    assert main(["report", str(tmp_path / "lt.json"), "--csv", str(again)]) == 0
    assert (tmp_path / "again.levels.csv").read_text() == (tmp_path / "lt.levels.csv").read_text()


def test_csv_cells_from_the_server_do_not_run_as_formulas():
    from perfstack.report.loadtest_csv import cell
    assert cell("=cmd|' /C calc'!A0") == "'=cmd|' /C calc'!A0" and cell("-2+3") == "'-2+3" and cell("@SUM(1)") == "'@SUM(1)"
    assert cell("http-5xx") == "http-5xx" and cell(-1.5) == "-1.5" and cell(float("inf")) == "inf" and cell(None) == ""


def test_a_repeated_capacity_probe_is_measured_run_by_run():
    """Each run counts time from its own start: pooled, two runs' tokens would fill one stretch twice."""
    from perfstack.loadtest import sweep

    def wave_run(k: int) -> list[Request]:  # 4 slots, waves of 4 every 100 ms, 10 tokens 10 ms apart
        return [Request(start_s=0.0, ttft_ms=100.0 * w + 10, itl_ms=[10.0] * 9, e2e_ms=100.0 * w + 100,
                        output_tokens=10, repeat=k) for w in range(5) for _ in range(4)]
    one = wave_run(0)
    single = sweep.capacity(Level(mode="rate", load=float("inf"), requests=one, summary=metrics.summarize(one)))
    both = one + wave_run(1)
    repeated = sweep.capacity(Level(mode="rate", load=float("inf"), requests=both, summary=metrics.summarize(both)))
    assert single == pytest.approx(40, rel=0.05) and repeated == pytest.approx(single)


def test_diff_of_repeated_runs_through_the_cli(tmp_path: Path, capsys):
    """Two --repeat 3 runs, the second against a server 40 ms slower to its first token: perfstack diff
    judges each figure on the runs and calls the TTFT regressed."""
    pytest.importorskip("aiohttp")
    import json

    from fake_server import InThread, Server

    from perfstack.cli.main import main

    def measure(ttft: float, name: str) -> str:
        out = tmp_path / name
        with InThread(Server(interval=0.005, ttft=ttft)) as fs:
            assert main(["loadtest", fs.url, "-q", "-o", str(out), "--concurrency", "2", "--requests", "8",
                         "--output-len", "6", "--repeat", "3"]) == 0
        return str(out)
    before, after = measure(0.02, "b.json"), measure(0.06, "a.json")
    capsys.readouterr()
    assert main(["diff", before, after, "--json"]) == 0
    figs = {f["name"]: f for f in json.loads(capsys.readouterr().out)["loadtest"]["levels"][0]["figures"]}
    assert figs["TTFT p50 @ 2 streams"]["verdict"] == "regressed"
    assert "3 and 3 runs" in figs["TTFT p50 @ 2 streams"]["note"]
