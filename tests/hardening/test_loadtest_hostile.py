"""perfstack loadtest against servers that misbehave on purpose: a server is input too.

Each hostile server answers the first request (the client's probe) as an honest one, then misbehaves on
every other request, so that the load test runs its level: it must end bounded in time and memory, count
each bad request as an error of its kind, keep the Run, and keep nothing the server echoed of the API key.
The load tests run in a subprocess whose peak RSS is read with getrusage.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")
from aiohttp import web  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "loadtest"))
from stream_server import Background  # noqa: E402

from perfstack.cli.main import main  # noqa: E402

SRC = str(Path(__file__).parents[2] / "src")
KEY = "opensesame-4711-quux"  # shaped like nothing a value pattern knows: only the literal scrub finds it
RSS_MAX_MB = 400  # the client's whole process; the endless stream reached 3.6 GB before the bounds
COUNT = web.AppKey("count", list)


def _chunk(text: str) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}).encode() + b"\n\n"


async def _models(request: web.Request) -> web.Response:
    auth = request.headers.get("Authorization", "")
    return web.json_response({"data": [{"id": "fake"}, {"id": f"echo {auth}"}]},
                             headers={"Server": f"echo/{auth}", "x-vllm-version": auth})


async def _version(request: web.Request) -> web.Response:
    return web.json_response({"version": "0.0 " + request.headers.get("Authorization", "")})


async def _honest(resp: web.StreamResponse, n: int) -> None:
    for i in range(n):
        await resp.write(_chunk(f" t{i}"))
    await resp.write(b"data: [DONE]\n\n")


async def _send(resp: web.StreamResponse, mode: str, n: int, auth: str, count: int) -> None:
    if mode == "honest":
        await _honest(resp, n)
    elif mode == "endless":  # valid chunks of text, as fast as the socket takes them, never [DONE]
        while True:
            await resp.write(_chunk(" x") * 64)
    elif mode == "blank":  # blank lines, forever
        while True:
            await resp.write(b"\n" * 65536)
    elif mode == "gzip-blank":  # 1 GiB of blank lines in ~1 MB of gzip, over and over
        z = zlib.compressobj(9, zlib.DEFLATED, 31)
        block = z.compress(b"\n" * (16 << 20)) + z.flush(zlib.Z_SYNC_FLUSH)
        while True:
            await resp.write(block)
    elif mode == "trickle":  # a comment line every 20 ms: never silent, never done
        while True:
            await resp.write(b": keep-alive\n\n")
            await asyncio.sleep(0.02)
    elif mode == "bad-utf8":
        await resp.write(_chunk(" a") + b'data: {"choices": [{"delta": {"content": "\xff"}}]}\n\n')
        await _honest(resp, n)
    elif mode == "echo":
        if count // 2 % 3 == 1:
            await resp.write(b'data: {"error": {"message": "denied for ' + auth.encode() + b'"}}\n\n')
        else:
            await resp.write(b"data: {not json " + auth.encode() + b" " + KEY.encode() + b"\n\n")


async def _chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    mode, n = str(body.get("model")), int(body.get("max_tokens") or 8)
    count = request.app[COUNT]
    count[0] += 1
    auth = request.headers.get("Authorization", "")
    if not mode.startswith("always-") and count[0] % 2 == 1:
        mode = "honest"  # the probe, and every other request after it
    mode = mode.removeprefix("always-")
    if mode == "echo" and count[0] // 2 % 3 == 0:
        return web.Response(status=500, text=f"bad request from {auth} with key {KEY}")
    headers = {"Content-Type": "text/event-stream"}
    if mode == "gzip-blank":
        headers["Content-Encoding"] = "gzip"
    resp = web.StreamResponse(headers=headers)
    await resp.prepare(request)
    try:
        await _send(resp, mode, n, auth, count[0])
    except (ConnectionError, RuntimeError):  # the client went away
        pass
    return resp


async def _embeddings(request: web.Request) -> web.Response:
    count = request.app[COUNT]
    count[0] += 1
    if count[0] % 2 == 1:  # the probe, and every other request after it
        return web.json_response({"data": [{"embedding": [0.1, 0.2]}], "usage": {"prompt_tokens": 3}})
    return web.Response(body=b'{"data": [{"embedding": [0.1]}], "note": "\xff"}', content_type="application/json")


def hostile_app() -> web.Application:
    app = web.Application()
    app[COUNT] = [0]
    app.router.add_post("/v1/embeddings", _embeddings)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/version", _version)
    app.router.add_post("/v1/chat/completions", _chat)
    return app


_MEASURE = ("import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:]).returncode; "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, file=sys.stderr); sys.exit(rc)")


def _loadtest(url: str, tmp_path: Path, *flags: str, timeout: float = 240) -> tuple[int, dict | None, str, str, int]:
    """(exit code, the saved Run, stdout, stderr, peak RSS of the client in MB)."""
    out = tmp_path / "lt.json"
    env = dict(os.environ, PYTHONPATH=SRC, OPENAI_API_KEY=KEY, COLUMNS="200")
    p = subprocess.run([sys.executable, "-c", _MEASURE, sys.executable, "-m", "perfstack", "loadtest", url,
                        "-o", str(out), "--no-color", *flags], env=env, capture_output=True, text=True,
                       timeout=timeout)
    *err, rss = p.stderr.rstrip("\n").split("\n")
    return p.returncode, (json.loads(out.read_text()) if out.exists() else None), p.stdout, "\n".join(err), int(rss)


def _errors(run: dict) -> dict:
    return run["loadtest"]["levels"][0]["summary"].get("errors", {})


@pytest.mark.parametrize("mode, kind, flags", [
    ("endless", "oversize", ()),  # before: 3.6 GB RSS and a 448 MB Run; with --timeout, MemoryError and no Run
    ("endless", "oversize", ("--output-len", "100000")),  # a large chunk bound: the request's own max_tokens
    ("blank", "oversize", ()),
    ("gzip-blank", "bad-stream", ()),  # before: ~1 GB, the loop blocked, --timeout never fired
    ("trickle", "timeout", ("--timeout", "2")),
    ("bad-utf8", "bad-stream", ()),  # before: the level stopped silently short, exit 0
])
@pytest.mark.slow
def test_a_hostile_stream_is_that_requests_error_and_the_run_is_kept(tmp_path, mode, kind, flags):
    with Background(hostile_app()) as srv:
        rc, run, _, err, rss = _loadtest(srv.url, tmp_path, "--model", mode, "--concurrency", "2", "--requests", "6",
                                         "--warmup", "0", "--output-len", "16", "--timeout", "30", *flags)
    assert rc == 0, err
    assert run is not None and "Traceback" not in err
    level = run["loadtest"]["levels"][0]
    assert not level.get("interrupted") and not level.get("stopped")
    assert len([r for r in level["requests"] if not r.get("warmup")]) == 6  # the whole level, not a part
    assert _errors(run).get(kind, 0) >= 2, _errors(run)
    assert level["summary"]["completed"] >= 2
    tokens = int(flags[flags.index("--output-len") + 1]) if "--output-len" in flags else 16
    assert all(len(r.get("itl_ms", [])) <= tokens + 64 for r in level["requests"])  # the gaps kept are bounded
    assert rss < RSS_MAX_MB, f"peak RSS {rss} MB"
    print(f"{mode}{' ' + ' '.join(flags) if flags else ''}: peak RSS {rss} MB, Run {len(json.dumps(run))} bytes")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["endless", "gzip-blank", "bad-utf8"])
def test_a_server_hostile_from_the_first_request_is_a_clear_error(tmp_path, mode):
    # before: invalid UTF-8 at the probe was exit 4 (internal error)
    with Background(hostile_app()) as srv:
        rc, run, _, err, rss = _loadtest(srv.url, tmp_path, "--model", f"always-{mode}", "--requests", "2",
                                         "--timeout", "30")
    assert rc == 2, err
    assert "did not stream a completion" in err and "Traceback" not in err and "internal error" not in err
    assert rss < RSS_MAX_MB


def test_a_server_that_echoes_the_api_key_never_gets_it_recorded(tmp_path, capsys):
    # before: the key echoed by the server was in the Run, the HTML and the Markdown
    with Background(hostile_app()) as srv:
        rc, run, out, err, _ = _loadtest(srv.url, tmp_path, "--model", "echo", "--concurrency", "2", "--requests", "8",
                                         "--warmup", "0", "--output-len", "4", "--html", str(tmp_path / "lt.html"))
    assert rc == 0, err
    assert run is not None
    assert {"http-5xx", "server-error", "bad-stream"} <= set(_errors(run)), _errors(run)
    # the reports of the saved Run, in this process (the Run is what crosses from the child)
    assert main(["report", str(tmp_path / "lt.json"), "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert main(["report", str(tmp_path / "lt.json"), "-v"]) == 0
    text = capsys.readouterr().out
    saved = (tmp_path / "lt.json").read_text()
    for where, doc in (("Run", saved), ("HTML", (tmp_path / "lt.html").read_text()), ("Markdown", md),
                       ("terminal", out + err + text)):
        assert KEY not in doc, where
    assert "echo" in json.dumps(run["loadtest"]["server"])  # the rest of what the server said is kept


def test_client_processes_with_a_short_warmup_keep_the_run(tmp_path):
    # before: --client-procs 2 with --warmup below the stream count was exit 4 (StopIteration), the run lost
    with Background(hostile_app()) as srv:
        rc, run, _, err, _ = _loadtest(srv.url, tmp_path, "--model", "honest", "--concurrency", "4", "--client-procs",
                                       "2", "--warmup", "1", "--requests", "8", "--output-len", "4")
    assert rc == 0, err
    level = run["loadtest"]["levels"][0]
    assert sum(bool(r.get("warmup")) for r in level["requests"]) == 1
    assert level["summary"]["completed"] == 12 and level["client"]["processes"] == 2  # 3 per stream at least


def test_a_level_cut_short_by_a_fault_says_so_and_the_exit_code_too(tmp_path, monkeypatch, capsys):
    # before: a fault that escaped one request ended the level silently short (41 of 60), exit 0, not marked
    from perfstack.cli.main import main
    from perfstack.loadtest import client

    real, calls = client.send, [0]

    async def faulty(*a, **k):
        calls[0] += 1
        if calls[0] == 5:  # the probe, then three requests, then a fault of the client's own
            raise RuntimeError("a fault of the client")
        return await real(*a, **k)
    monkeypatch.setattr(client, "send", faulty)
    with Background(hostile_app()) as srv:
        rc = main(["loadtest", srv.url, "--model", "honest", "--concurrency", "2", "--requests", "12", "--warmup", "0",
                   "--output-len", "4", "-o", str(tmp_path / "lt.json"), "--no-color"])
    err = capsys.readouterr().err
    assert rc == 4 and "level 1 did not finish" in err, err
    lt = json.loads((tmp_path / "lt.json").read_text())["loadtest"]
    level = lt["levels"][0]
    assert level["interrupted"] and "a fault of the client" in level["stopped"]
    assert any("level 1 did not finish" in n for n in lt["notes"])


def secrets_app(secrets: list[str], models: list[str]) -> web.Application:
    """A server that puts ``secrets`` in every answer it gives: the model list, its headers, /version, error
    bodies and error chunks (every other request after the probe), beside the honest model names ``models``."""
    one_line = [" ".join(s.split()) for s in secrets]

    async def listing(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": m} for m in models + one_line[:20 - len(models)]]},
                                 headers={"Server": one_line[0], "x-vllm-version": one_line[1]})

    async def version(request: web.Request) -> web.Response:
        return web.json_response({"version": " ".join(one_line[2:5])})

    async def chat(request: web.Request) -> web.StreamResponse:
        count = request.app[COUNT]
        count[0] += 1
        k = count[0] // 2 % len(one_line)
        if count[0] % 4 == 2:
            return web.Response(status=500, text=" ".join(one_line[k:k + 3]))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if count[0] % 4 == 0:
            await resp.write(b"data: " + json.dumps({"error": {"message": one_line[k]}}).encode() + b"\n\n")
        else:
            await _honest(resp, 4)
        return resp

    app = web.Application()
    app[COUNT] = [0]
    app.router.add_get("/v1/models", listing)
    app.router.add_get("/version", version)
    app.router.add_post("/v1/chat/completions", chat)
    return app


def test_an_embeddings_answer_with_invalid_utf8_is_that_requests_error(tmp_path):
    with Background(hostile_app()) as srv:
        rc, run, _, err, _ = _loadtest(srv.url, tmp_path, "--api", "embeddings", "--model", "fake", "--concurrency",
                                       "2", "--requests", "6", "--warmup", "0")
    assert rc == 0, err
    level = run["loadtest"]["levels"][0]
    assert not level.get("stopped") and _errors(run).get("bad-stream", 0) >= 2, _errors(run)
