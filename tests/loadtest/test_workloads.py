"""The workloads people replay: conversations whose history grows, timed traces (mooncake- and BurstGPT-style),
several shared prefixes, and a load that ramps up."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from perfstack.errors import InputError
from perfstack.loadtest import load, trace, workload


def test_conversations_resend_their_growing_history_turn_by_turn():
    wl = workload.synthetic(8, 4, turns=3, conversations=2)
    ps = [wl.more(i) for i in range(6)]  # turn 1 of conversations 0 and 1, then turn 2 of each, then turn 3
    assert [len(p.history) for p in ps] == [0, 0, 2, 2, 4, 4]
    t1, t2, t3 = ps[0], ps[2], ps[4]
    assert t2.history[0] == ("user", t1.text) and t2.history[1][0] == "assistant"
    assert t3.history[:2] == t2.history and t3.history[2] == ("user", t2.text)
    assert ps[1].text != t1.text and ps[3].history[0] == ("user", ps[1].text)
    # the answer in the history is as long as the turn asked for; the count includes it
    own = workload.synthetic(8, 4).more(1)  # conversation 0's turn 2 on its own
    assert len(t2.history[1][1].split()) == t1.max_tokens and t2.input_tokens == t1.input_tokens + 4 + own.input_tokens
    body = workload.body("chat", "m", t3, ignore_eos=False)
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user", "assistant", "user"]
    assert body["messages"][-1]["content"] == t3.text
    assert workload.body("completions", "m", t3, ignore_eos=False)["prompt"].startswith(t1.text)


def test_several_shared_prefixes():
    wl = workload.synthetic(4, 2, shared_prefix=6, prefixes=3)
    heads = [" ".join(wl.more(i).text.split()[:6]) for i in range(6)]
    assert heads[0] == heads[3] and heads[1] == heads[4] and len(set(heads)) == 3
    assert wl.more(0).input_tokens == 6 + 4 + 1


def test_a_ramped_rate_climbs_from_zero_then_holds():
    flat = load.arrivals(100, 2000, 1.0, seed=1)
    ramped = load.arrivals(100, 2000, 1.0, seed=1, ramp_s=4.0)
    assert ramped == sorted(ramped) and ramped[0] == 0
    first_s = sum(t < 1 for t in ramped)  # the rate grows linearly to 100/s over 4 s: 12.5 requests in the first
    assert 0.5 * 12.5 < first_s < 1.5 * 12.5 and sum(t < 1 for t in flat) > 80
    # past the ramp the gaps are the flat process's, shifted by half the ramp
    assert ramped[-1] == pytest.approx(flat[-1] + 2.0)


def _write(path: Path, lines: list) -> str:
    path.write_text("".join((json.dumps(x) if not isinstance(x, str) else x) + "\n" for x in lines))
    return str(path)


def test_a_mooncake_trace_keeps_its_times_lengths_and_shared_blocks(tmp_path):
    f = _write(tmp_path / "t.jsonl", [
        {"timestamp": 1000, "input_length": 20, "output_length": 5, "hash_ids": [0, 1]},
        {"timestamp": 0, "input_length": 12, "output_length": 3, "hash_ids": [0, 2]},
        {"timestamp": 2500, "input_length": 7, "output_length": 2},
        "not json", {"timestamp": -5, "input_length": 3, "output_length": 1},
        {"timestamp": 3000, "input_length": 3, "output_length": 0},
        {"timestamp": 4000, "input_length": 4, "output_length": 2, "hash_ids": ["x"]}])
    wl, notes = trace.load(f, block=10)
    assert wl.arrivals == [0.0, 1.0, 2.5]  # sorted, seconds from the first
    assert [(p.input_tokens, p.max_tokens) for p in wl.prompts] == [(12, 3), (20, 5), (7, 2)]
    a, b = wl.prompts[0].text.split(), wl.prompts[1].text.split()
    assert a[:10] == b[:10] and a[10:] != b[10:12] and len(a) == 12 and len(b) == 20  # block 0 shared
    assert "4 unusable or failed requests" in notes[0] and wl.spec["kind"] == "trace"


class _WordTokenizer:
    """Two tokens per word ("ab" -> "a", "b"), so that a count of words is not a count of tokens."""

    all_special_ids: list[int] = []

    def __len__(self) -> int:
        return 26

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) - 97 for w in text.split() for c in w]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        chars = [chr(97 + i) for i in ids]
        return " ".join("".join(chars[i:i + 2]) for i in range(0, len(chars), 2))


def test_a_trace_with_a_tokenizer_cuts_each_prompt_to_its_recorded_tokens(tmp_path):
    # a trace's blocks are 512 tokens: a request of 20 tokens over one block must send 20, not the block whole
    f = _write(tmp_path / "t.jsonl", [{"timestamp": 0, "input_length": 20, "output_length": 5, "hash_ids": [0]},
                                      {"timestamp": 5, "input_length": 30, "output_length": 5, "hash_ids": [0, 1]}])
    tok = _WordTokenizer()
    wl, _ = trace.load(f, block=512, tokenizer=tok)
    assert [len(tok.encode(p.text)) for p in wl.prompts] == [20, 30]
    assert [p.input_tokens for p in wl.prompts] == [20, 30] and wl.exact_counts
    assert tok.encode(wl.prompts[1].text)[:20] == tok.encode(wl.prompts[0].text)  # the shared block's prefix


def test_burstgpt_columns_as_csv_skip_the_failed_requests(tmp_path):
    p = tmp_path / "burst.csv"
    p.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                 "5,ChatGPT,472,18,490,Conversation log\n6.5,GPT-4,1087,0,1087,API log\n"
                 "7.25,ChatGPT,300,40,340,Conversation log\n")
    wl, notes = trace.load(str(p))
    assert wl.arrivals == [0.0, 2.25] and [p.max_tokens for p in wl.prompts] == [18, 40]
    assert "1 unusable or failed" in notes[0]
    # the same columns as JSONL keys
    wl, _ = trace.load(_write(tmp_path / "b.jsonl", [{"Timestamp": 1, "Request tokens": 5, "Response tokens": 2}]))
    assert wl.prompts[0].input_tokens == 5


def test_a_trace_with_nothing_usable_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="no usable request"):
        trace.load(_write(tmp_path / "t.jsonl", [{"a": 1}, "[]"]))
    with pytest.raises(InputError, match="does not exist"):
        trace.load(str(tmp_path / "missing.jsonl"))


def test_replay_a_trace_and_ramp_up_streams_through_the_cli(tmp_path):
    pytest.importorskip("aiohttp")
    from fake_server import InThread, Server

    from perfstack.cli.main import main
    from perfstack.model import Run

    f = _write(tmp_path / "t.jsonl", [{"timestamp": t, "input_length": 8, "output_length": 3}
                                       for t in (0, 200, 250, 600, 1000)])
    out = tmp_path / "r.json"
    with InThread(Server(interval=0.002, ttft=0.005)) as fs:
        assert main(["loadtest", fs.url, "-q", "-o", str(out), "--trace", f, "--trace-speed", "1,2"]) == 0
        lt = Run.load(out).loadtest
        assert [(lv.mode, lv.load) for lv in lt.levels] == [("trace", 1.0), ("trace", 2.0)]
        for lv in lt.levels:
            starts = sorted(r.start_s for r in lv.requests)
            want = [t / 1e3 / lv.load for t in (0, 200, 250, 600, 1000)]
            assert len(starts) == 5 and all(abs(a - b) < 0.1 for a, b in zip(starts, want)), (starts, want)
            assert lv.summary.completed == 5 and not any(r.warmup for r in lv.requests)
    with InThread(Server(interval=0.002, ttft=0.6)) as fs:  # a first request outlasts the ramp
        assert main(["loadtest", fs.url, "-q", "-o", str(out), "--concurrency", "4", "--ramp-up", "0.6",
                     "--requests", "8", "--output-len", "3", "--warmup", "0"]) == 0
        lv = Run.load(out).loadtest.levels[0]
        firsts = sorted(r.start_s for r in lv.requests)[:4]  # the streams start 0.15 s apart
        assert all(abs(firsts[k] - 0.15 * k) < 0.07 for k in range(4)), firsts
    with InThread(Server(interval=0.002, ttft=0.005)) as fs:
        assert main(["loadtest", fs.url, "-q", "-o", str(out), "--concurrency", "2", "--turns", "3",
                     "--requests", "12", "--output-len", "3", "--input-len", "4"]) == 0
        lv = Run.load(out).loadtest.levels[0]
        ins = sorted({r.input_tokens for r in lv.requests if r.input_tokens})
        assert lv.summary.completed == 12 and len(ins) >= 3  # the prompt grows turn after turn
    assert math.isfinite(lv.summary.output_throughput)


@pytest.mark.parametrize("flags", [["--trace", "x.jsonl", "--rate", "2"], ["--trace-speed", "2"],
                                   ["--turns", "0"], ["--ramp-up", "-1"], ["--turns", "2", "--prompts", "p.jsonl"]])
def test_workload_flags_that_do_not_go_together(flags, capsys):
    from perfstack.cli.main import main
    assert main(["loadtest", "http://127.0.0.1:9", *flags]) == 2
    assert "error" in capsys.readouterr().err


def test_the_embeddings_endpoint_is_timed_whole(tmp_path):
    """Latency is the time to the whole answer; throughput requests and input tokens per second."""
    pytest.importorskip("aiohttp")
    from fake_server import InThread, Server

    from perfstack.cli.main import main
    from perfstack.model import Run

    out = tmp_path / "e.json"
    with InThread(Server(ttft=0.03)) as fs:
        assert main(["loadtest", fs.url, "-q", "-o", str(out), "--api", "embeddings", "--concurrency", "1,4",
                     "--requests", "12", "--input-len", "20", "--slo", "e2e=500ms"]) == 0
    lt = Run.load(out).loadtest
    for lv in lt.levels:
        s = lv.summary
        assert s.completed == 12 and s.failed == 0 and s.output_throughput == 0
        assert 30 <= s.e2e.median < 150 and s.ttft.median == s.e2e.median and s.itl is None and s.tpot is None
        assert s.total_throughput == pytest.approx(s.request_throughput * s.mean_input_tokens, rel=0.05)
        assert s.slo_attainment == 1.0
    assert lt.levels[1].summary.request_throughput > 2 * lt.levels[0].summary.request_throughput
    from perfstack.report.loadtest_view import view_of
    ttft_curve = view_of(lt, Run.load(out)).curves[0]  # latency against requests/s, nothing being generated
    assert ttft_curve.x_label == "requests/s" and all(x > 0 for _, pts, _ in ttft_curve.series for x, *_ in pts)


def test_an_embeddings_answer_without_vectors_is_a_clear_error(tmp_path, capsys):
    """A server whose embeddings answer holds no vector: refused at the probe, exit 2, no traceback."""
    pytest.importorskip("aiohttp")
    from aiohttp import web
    from stream_server import Background

    from perfstack.cli.main import main

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m"}]})

    async def embeddings(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"embedding": []}], "usage": {"prompt_tokens": 3}})
    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/embeddings", embeddings)
    with Background(app) as srv:
        assert main(["loadtest", srv.url, "--api", "embeddings", "--requests", "2"]) == 2
    err = capsys.readouterr().err
    assert "did not answer an embedding" in err and "holds no embedding" in err and "Traceback" not in err
