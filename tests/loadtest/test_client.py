"""perfstack loadtest end to end against a streaming server with known timing and planted faults."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")

from perfstack.cli.main import main  # noqa: E402
from perfstack.records.loadtest import LoadTest  # noqa: E402
from perfstack.model import Run  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from stream_server import STATE, Background, html_app, make_app  # noqa: E402


def _run(url: str, tmp_path: Path, *flags: str) -> tuple[int, Run | None]:
    out = tmp_path / "lt.json"
    rc = main(["loadtest", url, "-o", str(out), "--no-color", *flags])
    return rc, (Run.load(out) if out.exists() else None)


def test_figures_match_the_servers_schedule(tmp_path, capsys):
    with Background(make_app(interval=0.01, ttft=0.05)) as srv:
        rc, run = _run(srv.url, tmp_path, "--concurrency", "1,4", "--requests", "12", "--output-len", "8")
        lateness = sorted(srv.app[STATE].lateness)
    assert rc == 0 and run is not None
    lt = run.loadtest
    assert [lv.load for lv in lt.levels] == [1, 4]
    for lv in lt.levels:
        s = lv.summary
        assert s.completed == (12 if lv.load == 1 else 12) and s.failed == 0
        assert all(r.output_tokens == 8 and r.tokens_from == "usage" for r in lv.requests if not r.warmup)
        # what the client saw minus what the server sent: the client's own delay, well under a token's interval
        assert 50 <= s.ttft.median < 50 + 40
        assert 10 - 3 <= s.itl.median < 10 + 5 + lateness[len(lateness) // 2] * 1e3
        assert s.output_throughput > 0 and s.concurrency_mean > 0
    assert sum(r.warmup for r in lt.levels[1].requests) == 4  # one wave of warm-up per level
    assert "approximate" in " ".join(lt.notes)
    assert "perfstack loadtest" in capsys.readouterr().out


def test_server_metrics_are_scraped_and_queueing_named(tmp_path):
    with Background(make_app(interval=0.01, ttft=0.01, max_running=2)) as srv:
        rc, run = _run(srv.url, tmp_path, "--concurrency", "1,8", "--requests", "24", "--output-len", "10")
    lt = run.loadtest
    assert lt.server.get("metrics") == "/metrics"
    heavy = lt.levels[1]
    assert heavy.server and max(x.waiting for x in heavy.server) >= 1
    assert max(x.running for x in heavy.server) <= 2
    assert "serve-queueing" in {f.id for f in run.findings}


@pytest.mark.parametrize("mode,kind", [("flaky-cut", "disconnect"), ("flaky-malformed", "bad-stream"),
                                       ("flaky-error-chunk", "server-error"), ("flaky-fail-500", "http-5xx"),
                                       ("flaky-fail-429", "http-429"), ("flaky-stall", "stall")])
def test_failures_mid_run_are_counted_by_kind(tmp_path, mode, kind):
    with Background(make_app(interval=0.005, ttft=0.01)) as srv:
        rc, run = _run(srv.url, tmp_path, "--model", mode, "--concurrency", "2", "--requests", "8",
                       "--output-len", "6", "--stall-timeout", "0.5", "--warmup", "0")
    assert rc == 0
    s = run.loadtest.levels[0].summary
    assert s.errors.get(kind, 0) >= 3 and s.completed >= 3
    f = {f.id: f for f in run.findings}["serve-errors"]
    assert kind in f.evidence


@pytest.mark.parametrize("mode", ["fail-500", "cut", "malformed", "empty"])
def test_a_server_that_cannot_stream_is_a_clear_error(tmp_path, capsys, mode):
    with Background(make_app(interval=0.005, ttft=0.01)) as srv:
        rc, run = _run(srv.url, tmp_path, "--model", mode, "--requests", "2")
    err = capsys.readouterr().err
    assert rc == 2 and run is None
    assert "did not stream a completion" in err and "Traceback" not in err


def test_not_openai_and_unreachable(tmp_path, capsys):
    with Background(html_app()) as srv:
        rc, _ = _run(srv.url, tmp_path)
    assert rc == 2 and "does not look like an OpenAI-compatible server" in capsys.readouterr().err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, _ = _run(f"http://127.0.0.1:{port}", tmp_path)
    assert rc == 2 and "cannot reach" in capsys.readouterr().err
    rc, _ = _run("ftp://x", tmp_path)
    assert rc == 2


def test_api_key_is_sent_and_never_recorded(tmp_path, monkeypatch):
    seen = []
    app = make_app(interval=0.002, ttft=0.002)

    @__import__("aiohttp").web.middleware
    async def spy(request, handler):
        seen.append(request.headers.get("Authorization"))
        return await handler(request)
    app.middlewares.append(spy)
    monkeypatch.setenv("MY_KEY", "sk-test-123456")
    with Background(app) as srv:
        rc, run = _run(srv.url.replace("http://", "http://user:pw@"), tmp_path, "--api-key-env", "MY_KEY",
                       "--requests", "3", "--output-len", "3")
    assert rc == 0 and "Bearer sk-test-123456" in seen
    text = (tmp_path / "lt.json").read_text()
    assert "sk-test-123456" not in text and "user:pw" not in text


def test_prompt_file_with_bad_lines(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "hello there", "max_tokens": 5}\nnot json\n{"text": 3}\n\n'
                 '{"prompt": "second", "max_tokens": 4}\n')
    with Background(make_app(interval=0.002, ttft=0.002)) as srv:
        rc, run = _run(srv.url, tmp_path, "--prompts", str(f), "--requests", "6", "--api", "completions")
    assert rc == 0
    lt = run.loadtest
    assert any("2 unusable entries" in n for n in lt.notes)
    assert {r.output_tokens for r in lt.levels[0].requests} == {4, 5}
    empty = tmp_path / "e.jsonl"
    empty.write_text("nope\n")
    assert main(["loadtest", "http://127.0.0.1:9", "--prompts", str(empty)]) == 2


def test_open_loop_rate_and_sweep(tmp_path):
    with Background(make_app(interval=0.002, ttft=0.005, max_running=4)) as srv:
        rc, run = _run(srv.url, tmp_path, "--rate", "50", "--requests", "20", "--output-len", "4")
        assert rc == 0
        lv = run.loadtest.levels[0]
        assert lv.mode == "rate" and lv.summary.completed == 20
        # 8 streams on 4 slots wait a whole stream (over 40 ms) for their first token; up to 4 streams do not
        # (a busy host may make one request of eight late: 75% must meet the objective)
        rc, run = _run(srv.url, tmp_path, "--sweep", "--sweep-max", "16", "--requests", "8", "--output-len", "20",
                       "--slo", "ttft=40ms", "--slo-attainment", "0.75")
    lt = run.loadtest
    # a knee among the loads tried, or the sweep says it stopped before one (exactly one of the two)
    assert rc == 0 and (lt.sweep.get("knee") in [lv.load for lv in lt.levels]) != ("knee_not_reached" in lt.sweep)
    assert lt.sweep["max_load_meeting_slo"] is not None and lt.sweep["max_load_meeting_slo"] < 16


def test_ctrl_c_saves_the_partial_run(tmp_path):
    out = tmp_path / "partial.json"
    with Background(make_app(interval=0.05, ttft=0.01)) as srv:
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2] / "src"))
        p = subprocess.Popen([sys.executable, "-m", "perfstack", "loadtest", srv.url, "--concurrency", "4",
                              "--requests", "400", "--output-len", "10", "-o", str(out)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while time.time() < deadline and srv.app[STATE].running < 4:
            time.sleep(0.1)
        time.sleep(2.5)
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr
    lt = LoadTest.from_dict(json.loads(out.read_text())["loadtest"], "loadtest")
    assert lt.interrupted and lt.levels[0].interrupted
    assert any(r.error == "interrupted" for r in lt.levels[0].requests)
    assert lt.levels[0].summary.completed > 0


def test_hostile_run_section_is_refused(tmp_path):
    with Background(make_app(interval=0.002, ttft=0.002)) as srv:
        _run(srv.url, tmp_path, "--requests", "2", "--output-len", "2")
    d = json.loads((tmp_path / "lt.json").read_text())
    d["loadtest"]["levels"][0]["requests"][0]["ttft_ms"] = "fast"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    from perfstack.errors import InputError
    with pytest.raises(InputError, match="ttft_ms"):
        Run.load(bad)


@pytest.mark.parametrize("flags", [["--concurrency", "0"], ["--concurrency", "1.5"], ["--rate", "x"],
                                   ["--slo", "ttft=fast"], ["--requests", "0"], ["--timeout", "-1"],
                                   ["--model-config", "llama-3-8b"], ["--sweep", "--rate", "1,2"]])
def test_bad_flags_are_usage_errors(flags, capsys):
    assert main(["loadtest", "http://127.0.0.1:9", *flags]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_a_level_shared_by_client_processes_reads_as_one(tmp_path):
    with Background(make_app(interval=0.01, ttft=0.02, record_sends=True)) as srv:
        rc, run = _run(srv.url, tmp_path, "--concurrency", "6", "--client-procs", "3", "--requests", "18",
                       "--output-len", "5")
        sends = srv.app[STATE].sends
    assert rc == 0
    lv = run.loadtest.levels[0]
    assert lv.client.processes == 3 and lv.summary.completed == 18 and sum(r.warmup for r in lv.requests) == 6
    assert lv.summary.concurrency_mean > 3  # the three processes ran at the same time
    # the merged records keep the prompts' order: record k was prompt k (synthetic prompts are numbered;
    # prompt 0 was also the probe's)
    for k, r in enumerate(lv.requests[1:], 1):
        assert len(sends[k]) == r.output_tokens == 5


@pytest.mark.parametrize("where, word", [("api", "chatty"), ("mode", "burst"), ("tokens_from", "guess")])
def test_a_word_outside_the_load_tests_vocabulary_is_refused(tmp_path, capsys, where, word):
    """The load test's fixed sets (api, mode, where output tokens were counted) are checked when a Run is read:
    a word outside them is an input error naming the field, not a report that renders it as if it were known."""
    with Background(make_app(interval=0.002, ttft=0.002)) as srv:
        _run(srv.url, tmp_path, "--requests", "2", "--output-len", "2")
    d = json.loads((tmp_path / "lt.json").read_text())
    lt = d["loadtest"]
    target = {"api": lt, "mode": lt["levels"][0], "tokens_from": lt["levels"][0]["requests"][0]}[where]
    target[where] = word
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    assert main(["report", str(bad)]) == 2
    err = capsys.readouterr().err
    assert word in err and where in err and "Traceback" not in err


def test_a_huge_word_outside_the_vocabulary_is_quoted_short(tmp_path, capsys):
    """The refusal names the field but does not echo a hostile Run's huge value back whole."""
    with Background(make_app(interval=0.002, ttft=0.002)) as srv:
        _run(srv.url, tmp_path, "--requests", "2", "--output-len", "2")
    d = json.loads((tmp_path / "lt.json").read_text())
    d["loadtest"]["api"] = "\x1b]0;t\x07" + "A" * 100_000
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    assert main(["report", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "loadtest.api" in err and len(err) < 1000 and "\x1b" not in err
