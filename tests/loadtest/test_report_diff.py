"""perfstack report and diff of load-test Runs: Markdown and HTML reports with the sweep's curves, and a
before/after diff that calls a doubled TTFT a regression and an unchanged server's rerun noise."""

from __future__ import annotations

import json
import math
import random
import statistics
import sys
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from perfstack.cli.main import main
from perfstack.compare import diff_runs
from perfstack.compare.diff import Diff
from perfstack.compare.loadtest import WINDOWS, loadtest_diff, token_windows
from perfstack.loadtest import metrics, sweep
from perfstack.records.loadtest import Level, LoadTest, Request, Slo
from perfstack.model import Finding, Run, Severity
from perfstack.records.meta import RunMeta
from perfstack.report import html, markdown
from perfstack.report.loadtest_md import render_loadtest_md
from perfstack.report.loadtest_view import loadtest_view

MD = MarkdownIt("commonmark").enable("table")
HOSTILE = "<img src=x onerror=alert(1)> [click](javascript:alert(1)) # head | `code` \x1b]0;t\x07"
SLO = Slo(ttft_ms=100.0, itl_ms=30.0)


def _requests(rng: random.Random, n: int, ttft_ms: float, gap_ms: float, tokens: int = 16) -> list[Request]:
    """``n`` back-to-back requests of one stream whose TTFTs and gaps scatter 5% around the given ones."""
    out, t = [], 0.0
    for _ in range(n):
        ttft = ttft_ms * rng.lognormvariate(0, 0.05)
        gaps = [gap_ms * rng.lognormvariate(0, 0.05) for _ in range(tokens - 1)]
        e2e = ttft + sum(gaps)
        out.append(Request(start_s=t, ttft_ms=ttft, e2e_ms=e2e, itl_ms=gaps, output_tokens=tokens, input_tokens=8))
        t += e2e / 1e3
    return out


def _level(rng: random.Random, streams: int, ttft_ms: float, gap_ms: float, n: int = 60) -> Level:
    reqs = [r for _ in range(streams) for r in _requests(rng, n // streams, ttft_ms, gap_ms)]
    return Level(mode="concurrency", load=streams, requests=reqs, summary=metrics.summarize(reqs, SLO))


def _run(seed: int, ttft_ms: float = 40.0, loads: tuple[int, ...] = (1, 4, 16), **lt_fields) -> Run:
    rng = random.Random(seed)
    # the server saturates at 4 streams: each stream's gaps grow with the load beyond it
    levels = [_level(rng, s, ttft_ms * max(1, s / 4), 10.0 * max(1, s / 8)) for s in loads]
    lt = LoadTest(url="http://127.0.0.1:8000", api="chat", model="tiny", levels=levels, slo=SLO,
                  workload={"kind": "synthetic", "input_len": 8, "output_len": 16, "ignore_eos": True},
                  **lt_fields)
    lt.sweep = sweep.summary(levels, SLO, None)
    run = Run(meta=RunMeta(command="loadtest", created="2026-01-01T00:00:00+00:00", source=lt.url))
    run.loadtest = lt
    return run


def _save(run: Run, path: Path) -> str:
    path.write_text(run.to_json())
    return str(path)


# -- the diff, on hand-built records ----------------------------------------------------------
def test_doubled_ttft_is_a_regression_at_every_level():
    d = loadtest_diff(_run(1), _run(2, ttft_ms=80.0))
    assert [lv.label for lv in d.levels] == ["1 streams", "4 streams", "16 streams"]
    for lv in d.levels:
        ttft = next(f for f in lv.figures if f.name.startswith("TTFT p50"))
        assert ttft.verdict == "regressed" and ttft.significant
        assert 80 < ttft.delta_pct < 120 and ttft.ci_low_pct > 50
        tpot = next(f for f in lv.figures if f.name.startswith("TPOT p50"))
        assert tpot.verdict == "within noise"  # the gaps did not change


def test_an_unchanged_servers_rerun_is_noise():
    d = diff_runs(_run(1), _run(2))
    assert not [f.name for f in d.figures() if f.verdict in ("improved", "regressed")]
    assert d.summary()["measurements"]["within noise"] > 0
    assert {r.figure: r.change for r in d.loadtest.sweep}["knee"] == "same"


def test_figures_are_the_records_own_medians():
    before, after = _run(1), _run(2, ttft_ms=80.0)
    d = loadtest_diff(before, after)
    lv_b = before.loadtest.to_dict()["levels"][1]
    ttft = [r["ttft_ms"] for r in lv_b["requests"] if not r.get("warmup")]
    fig = next(f for f in d.levels[1].figures if f.name == "TTFT p50 @ 4 streams")
    assert fig.before == pytest.approx(statistics.median(ttft))
    gaps = [g for r in lv_b["requests"] for g in r["itl_ms"]]
    itl = next(f for f in d.levels[1].figures if f.name == "ITL p50 @ 4 streams")
    assert itl.before == pytest.approx(statistics.median(gaps))


def test_throughput_windows_count_every_token_once():
    # two requests of 10 tokens each, one chunk every 100 ms from 0.1 s, over a 1 s span
    reqs = [Request(start_s=0.0, ttft_ms=100.0, e2e_ms=1000.0, itl_ms=[100.0] * 9, output_tokens=10),
            Request(start_s=0.0, ttft_ms=100.0, e2e_ms=1000.0, itl_ms=[100.0] * 9, output_tokens=20)]
    lv = Level(mode="concurrency", load=2, requests=reqs, summary=metrics.summarize(reqs))
    w = token_windows(lv)
    assert len(w) == WINDOWS
    assert sum(x * (1.0 / WINDOWS) for x in w) == pytest.approx(30)  # tokens/s x window length


def test_a_slower_server_with_more_requests_shows_throughput_and_tail():
    rng_b, rng_a = random.Random(3), random.Random(4)
    before = [_level(rng_b, 8, 40.0, 10.0, n=400)]
    after = [_level(rng_a, 8, 40.0, 20.0, n=400)]
    runs = []
    for levels in (before, after):
        r = Run(meta=RunMeta(command="loadtest"))
        r.loadtest = LoadTest(url="u", api="chat", model="m", workload={}, levels=levels, slo=SLO)
        runs.append(r)
    figs = {f.name: f for f in loadtest_diff(*runs).figures()}
    assert figs["ITL p50 @ 8 streams"].verdict == "regressed"
    assert figs["ITL p99 @ 8 streams"].verdict == "regressed"  # 400 x 15 gaps: enough to judge a tail
    assert figs["TTFT p99 @ 8 streams"].verdict == "not compared"  # 400 TTFTs are not
    assert figs["output tok/s @ 8 streams"].verdict == "regressed"


def test_levels_that_do_not_match_and_workloads_that_differ_are_said():
    before = _run(1, loads=(1, 2))
    after = _run(2, loads=(4, 8))
    assert after.loadtest is not None
    after.loadtest.workload = {**after.loadtest.workload, "input_len": 512}
    d = loadtest_diff(before, after)
    assert not d.levels and d.only_before == ["1 streams", "2 streams"] and d.only_after == ["4 streams", "8 streams"]
    notes = " ".join(d.notes)
    assert "no load level in common" in notes and "input length 8 → 512" in notes


def test_a_loadtest_against_another_kind_of_run_says_so(tmp_path, capsys):
    other = Run(meta=RunMeta(command="doctor"))
    d = diff_runs(other, _run(1))
    assert d.loadtest is None and "different kinds" in d.kinds_differ()
    rc = main(["diff", _save(other, tmp_path / "d.json"), _save(_run(1), tmp_path / "l.json"), "--no-color"])
    assert rc == 0 and "different kinds (doctor before, loadtest after)" in " ".join(capsys.readouterr().out.split())


def test_diff_cli_formats_and_the_regression_gate(tmp_path, capsys):
    b, a = _save(_run(1), tmp_path / "b.json"), _save(_run(2, ttft_ms=80.0), tmp_path / "a.json")
    assert main(["diff", b, a, "--no-color"]) == 0
    out = capsys.readouterr().out
    assert "Load test" in out and "TTFT p50 @ 4 streams" in out and "regressed" in out
    assert main(["diff", b, a, "--fail-on-regression", "10", "--no-color"]) == 1
    assert "TTFT p50 @ 1 streams" in capsys.readouterr().err
    assert main(["diff", b, a, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["loadtest"]["levels"][0]["figures"][0]["verdict"] == "regressed"
    assert Diff.from_dict(d).loadtest.figures()[0].name == "TTFT p50 @ 1 streams"  # loads back
    page = tmp_path / "d.html"
    assert main(["diff", b, a, "-o", str(page)]) == 0
    text = page.read_text()
    assert 'id="loadtest"' in text and 'data-chart="deltas"' in text


# -- reports ----------------------------------------------------------------------------------
def _hostile_run() -> Run:
    run = _run(1, loads=(1, 4, 16, 32), notes=[HOSTILE])  # throughput flat from 16 to 32: a knee
    lt = dict(run.loadtest.to_dict(), model=HOSTILE, url="http://h/" + HOSTILE, server={"version": HOSTILE},
              workload={"kind": "file", "file": HOSTILE, "requests": 3})
    lt["levels"][1]["requests"][0].update(error="bad-stream", detail=HOSTILE, ttft_ms=None)
    lt["levels"][1]["summary"].update(completed=14, failed=1, errors={"bad-stream": 1})
    run.loadtest = LoadTest.from_dict(lt, "loadtest")
    run.findings = [Finding(id="serve-queueing", layer="serving", severity=Severity.WARNING, title=HOSTILE,
                            evidence=HOSTILE, fix=HOSTILE, subject=HOSTILE)]
    return run


def test_markdown_report_is_inert():
    text = render_loadtest_md(loadtest_view(_hostile_run()))
    toks = MD.parse(text)
    inline = [c for t in toks if t.type == "inline" for c in t.children or []]
    assert {c.type for c in inline} <= {"text", "softbreak", "hardbreak", "code_inline", "strong_open",
                                        "strong_close", "html_inline"}
    assert {c.content for c in inline if c.type == "html_inline"} <= {"<br>"}
    assert [t.type for t in toks].count("heading_open") == 1 + len([h for h in text.splitlines() if h.startswith("## ")])
    assert "onerror" in text and "\x1b" not in text  # shown, spelled out, never obeyed
    assert "| 4 streams | 14 +1✗ |" in text.replace("\\", "")  # the failed request is counted in its level


def test_markdown_diff_is_inert():
    before, after = _run(1), _hostile_run()
    text = markdown.render_diff(diff_runs(before, after))
    inline = [c for t in MD.parse(text) if t.type == "inline" for c in t.children or []]
    assert {c.content for c in inline if c.type == "html_inline"} <= {"<br>", "<details>", "<summary>", "</summary>",
                                                                      "</details>"}
    assert not [c for c in inline if c.type in ("link_open", "image")]
    assert "## Load test" in text


def test_html_report_has_the_curves_and_escapes_everything():
    page = html.render_report(_hostile_run())
    assert "<img src=x" not in page and "&lt;img src=x" in page and "\x1b" not in page
    for kind in ("loadtest-ttft", "loadtest-tpot"):
        assert f'data-chart="{kind}"' in page
    for series in ("TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "ITL p50", "ITL p99"):
        assert f'data-series="{series}"' in page
    assert 'data-ref="SLO TTFT ≤ 100 ms"' in page and 'data-ref="SLO TPOT ≤ 30 ms"' in page
    assert 'data-mark="knee: ' in page


def test_a_single_level_has_a_table_and_no_curves():
    page = html.render_report(_run(1, loads=(4,)))
    assert "4 streams" in page and "<figure class=\"chart\"" not in page


# -- end to end against a streaming server ----------------------------------------------------
sys.path.insert(0, str(Path(__file__).parent))


def test_real_runs_report_and_diff(tmp_path, capsys):
    pytest.importorskip("aiohttp")
    from stream_server import Background, make_app

    def load(url: str, name: str, *extra: str) -> str:
        out = tmp_path / f"{name}.json"
        rc = main(["loadtest", url, "--concurrency", "1,4", "--requests", "16", "--output-len", "8",
                   "--slo", "ttft=100ms,itl=20ms", "-o", str(out), "--no-color", "-q", *extra])
        assert rc in (0, 1)  # 1: a finding at or above --fail-on
        return str(out)

    with Background(make_app(interval=0.005, ttft=0.02)) as fast:
        before = load(fast.url, "before", "--html", str(tmp_path / "before.html"))
    with Background(make_app(interval=0.005, ttft=0.08)) as slow:
        after = load(slow.url, "after")
    capsys.readouterr()
    page = (tmp_path / "before.html").read_text()
    assert 'data-chart="loadtest-ttft"' in page and 'data-series="TTFT p50"' in page
    assert main(["report", before, "--no-color"]) == 0
    assert "perfstack loadtest" in capsys.readouterr().out
    assert main(["report", before, "-f", "md"]) == 0
    assert "## Load levels" in capsys.readouterr().out
    assert main(["report", before, "-o", str(tmp_path / "r.html")]) == 0
    assert 'data-chart="loadtest-tpot"' in (tmp_path / "r.html").read_text()
    d = diff_runs(Run.load(before), Run.load(after))
    verdicts = {f.name: f.verdict for f in d.loadtest.figures()}
    assert verdicts["TTFT p50 @ 1 streams"] == "regressed" and verdicts["TTFT p50 @ 4 streams"] == "regressed"


def test_the_terminal_report_formats_the_view_the_markdown_and_html_reports_format():
    import io

    from rich.console import Console

    from perfstack.records.loadtest import ClientLoad
    from perfstack.report.loadtest_text import render_loadtest
    run = _run(1, loads=(1, 4))
    assert run.loadtest is not None
    run.loadtest.levels[0].client = ClientLoad(0.5, 1.25, 2.0, 300.0)
    run.loadtest.levels[1].client = ClientLoad(0.97, 4.0, 9.0, 120.0, processes=3)
    view = loadtest_view(run)
    assert view is not None and view.client[1] == ["4 streams", "97%", "4.00 ms", "120 µs", "3"]
    buf = io.StringIO()
    render_loadtest(view, Console(file=buf, width=140, no_color=True), verbose=True)
    text = buf.getvalue()
    assert "client at 1 streams: 50% CPU, timer lag p99 1.25 ms, 300 µs CPU per chunk" in text
    assert "client at 4 streams in 3 processes (busiest shown): 97% CPU, timer lag p99 4.00 ms" in text
    assert view.headline in text and view.workload in text and all(row[0] in text for row in view.rows)
    # figures are written as they are: only text that could open a list is escaped
    assert "| 4 streams | 97% | 4.00 ms | 120 µs | 3 |" in render_loadtest_md(view)


def test_a_diff_of_rate_sweeps_with_an_unbounded_level_writes_json_that_loads(tmp_path):
    """A rate sweep's capacity probe sends everything at once (load inf). The diff's level and sweep rows name
    that load as the Runs do, "inf": JSON has no infinity (json wrote Infinity, which no JSON reader accepts)."""
    runs = []
    for seed in (1, 2):
        run = _run(seed)
        for lv in run.loadtest.levels:
            lv.mode = "rate"
        run.loadtest.levels[-1].load = math.inf
        run.loadtest.sweep = sweep.summary(run.loadtest.levels, SLO, None)
        runs.append(run)
    d = diff_runs(*runs)
    text = json.dumps(d.to_dict(), allow_nan=False)
    loaded = Diff.from_dict(json.loads(text))
    assert [lv.load for lv in loaded.loadtest.levels][-1] == math.inf
    assert '"load": "inf"' in text
