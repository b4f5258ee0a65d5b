"""perfstack loadtest against a real inference server: `transformers serve` with continuous batching and a
tiny random-weight Llama built on the spot (no download)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.server
pytest.importorskip("aiohttp")
for mod in ("transformers", "fastapi", "uvicorn", "torch"):
    pytest.importorskip(mod)
if not shutil.which("transformers"):
    pytest.skip("the transformers command is not installed", allow_module_level=True)

from perfstack.cli.main import main  # noqa: E402
from perfstack.model import Run  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _builder():
    spec = importlib.util.spec_from_file_location("loadtest_model", ROOT / "benchmarks" / "loadtest_model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model = tmp_path_factory.mktemp("tiny")
    _builder().build(model, "tiny", "float32")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    home = tmp_path_factory.mktemp("home")
    (home / ".cache" / "huggingface" / "hub").mkdir(parents=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HOME=str(home), HF_HOME=str(home / ".cache" / "huggingface"))
    log = open(model / "server.log", "w")
    p = subprocess.Popen(["transformers", "serve", str(model), "--host", "127.0.0.1", "--port", str(port),
                          "--continuous-batching",
                          # A KV cache of 64 blocks is plenty for these few short requests; sized from free
                          # memory it took 12 GB of the CI machine's 24 GiB on the CPU.
                          "--cb-num-blocks", "64"], stdout=log, stderr=subprocess.STDOUT, env=env,
                         start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 180
        while True:
            try:
                urllib.request.urlopen(url + "/v1/models", timeout=2).read()
                break
            except OSError:
                if p.poll() is not None or time.time() > deadline:
                    log.flush()
                    pytest.fail("transformers serve did not start: " + (model / "server.log").read_text()[-2000:])
                time.sleep(0.5)
        yield url, model
    finally:
        try:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(p.pid, signal.SIGKILL)
        log.close()


def test_loadtest_of_a_real_continuous_batching_server(server, tmp_path):
    url, model = server
    out = tmp_path / "lt.json"
    rc = main(["loadtest", url, "--model", str(model), "--concurrency", "1,3", "--requests", "6", "--input-len", "24",
               "--output-len", "8", "--tokenizer", str(model), "-o", str(out), "--no-color"])
    assert rc == 0
    lt = Run.load(out).loadtest
    assert lt.server["models"] or any("/v1/models" in n for n in lt.notes)
    for lv in lt.levels:
        s = lv.summary
        assert s.completed == max(6, 3 * lv.load) and s.failed == 0
        assert s.ttft.median > 0 and s.itl is not None
        measured = [r for r in lv.requests if not r.warmup]
        # the server counts tokens itself (usage in the last chunk) and honours max_tokens
        assert all(r.tokens_from == "usage" and 1 <= r.output_tokens <= 8 for r in measured)
        assert all(abs(r.input_tokens - 26) <= 4 for r in measured)  # 24 words, a number and the chat markers
    assert lt.levels[1].summary.concurrency_mean > lt.levels[0].summary.concurrency_mean


def test_completions_endpoint_and_an_unknown_model(server, tmp_path, capsys):
    url, model = server
    rc = main(["loadtest", url, "--model", str(model), "--api", "completions", "--requests", "3", "--output-len", "4", "--tokenizer", str(model),
               "-o", str(tmp_path / "c.json"), "--no-color"])
    assert rc == 0
    rc = main(["loadtest", url, "--model", "no-such-model", "--requests", "2", "--no-color"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err


def test_multi_turn_conversations_grow_their_prompts(server, tmp_path):
    """Three turns resend the history: the server's own prompt counts grow turn by turn."""
    url, model = server
    out = tmp_path / "mt.json"
    rc = main(["loadtest", url, "--model", str(model), "--tokenizer", str(model), "--turns", "3", "--concurrency", "2",
               "--requests", "12", "--warmup", "0", "--input-len", "16", "--output-len", "6", "-o", str(out),
               "--no-color"])
    assert rc == 0
    lv = Run.load(out).loadtest.levels[0]
    assert lv.summary.completed == 12 and lv.summary.failed == 0
    counts = sorted(r.input_tokens for r in lv.requests if r.input_tokens)
    # turn 1 about 18 tokens, turn 2 adds an answer and a turn (about 40), turn 3 about 62
    assert counts[0] < 30 and counts[-1] > 50


def test_a_trace_is_replayed_at_its_times(server, tmp_path):
    url, model = server
    trace = tmp_path / "t.jsonl"
    times = (0, 300, 350, 900, 1500, 1600)
    trace.write_text("".join(f'{{"timestamp": {t}, "input_length": 20, "output_length": 5, "hash_ids": [0, {i + 1}]}}\n'
                             for i, t in enumerate(times)))
    out = tmp_path / "tr.json"
    rc = main(["loadtest", url, "--model", str(model), "--tokenizer", str(model), "--trace", str(trace),
               "--trace-block", "10", "-o", str(out), "--no-color"])
    assert rc == 0
    lv = Run.load(out).loadtest.levels[0]
    assert lv.mode == "trace" and lv.summary.completed == len(times)
    starts = sorted(r.start_s for r in lv.requests)
    assert all(abs(s - t / 1e3) < 0.1 for s, t in zip(starts, times))
