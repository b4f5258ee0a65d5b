"""A fast OpenAI-compatible streaming server with known timing, and every way a server can misbehave.

Tokens leave every ``interval`` seconds after a ``ttft`` delay, on a fixed schedule: the server records
how late each emission was against it, so that a client's own delay can be measured as what it saw minus
what the server sent. The model name chooses a behaviour:

    any name      a normal stream of max_tokens tokens, usage in the last chunk, then [DONE]
    fail-500      HTTP 500 before any byte       fail-429    HTTP 429
    cut           the connection closes after three tokens
    malformed     a line of non-JSON after two tokens
    error-chunk   an OpenAI error object in the stream
    stall         two tokens, then silence for 30 s
    empty         [DONE] without any text
    flaky-MODE    every other request behaves as MODE, starting with the second

``max_running`` makes requests beyond it wait (as a saturated server does) and ``/metrics`` reports
running and waiting requests under vLLM's names. Run standalone for benchmarks:

    python tests/loadtest/stream_server.py --port 8011 --interval-ms 20
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

from aiohttp import web


@dataclass
class State:
    interval: float = 0.02
    ttft: float = 0.05
    max_running: Optional[int] = None
    running: int = 0
    waiting: int = 0
    preemptions: int = 0
    flaky: int = 0
    record_sends: bool = False
    lateness: list[float] = field(default_factory=list)  # seconds each token left after its schedule
    gaps: list[float] = field(default_factory=list)  # seconds between a stream's successive tokens, as sent
    sends: dict = field(default_factory=dict)  # prompt number -> when each token left (for per-gap comparison)
    sem: Optional[asyncio.Semaphore] = None


STATE = web.AppKey("state", State)


@functools.lru_cache(maxsize=4096)
def _chunk(api: str, text: str) -> bytes:
    choice = {"index": 0, "delta": {"content": text}} if api == "chat" else {"index": 0, "text": text}
    return b"data: " + json.dumps({"object": "chunk", "choices": [choice]}).encode() + b"\n\n"


async def _models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "fake", "object": "model"}]})


async def _metrics(request: web.Request) -> web.Response:
    s: State = request.app[STATE]
    text = (f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{model_name=\"fake\"}} {s.running}\n"
            f"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{model_name=\"fake\"}} {s.waiting}\n"
            f"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{model_name=\"fake\"}} "
            f"{min(1.0, s.running / (s.max_running or 1000)):.3f}\n"
            f"# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total{{model_name=\"fake\"}} "
            f"{s.preemptions}\n")
    return web.Response(text=text, content_type="text/plain")


async def _stream(request: web.Request, api: str) -> web.StreamResponse:
    s: State = request.app[STATE]
    body = await request.json()
    mode = str(body.get("model", ""))
    if mode.startswith("flaky-"):  # every other request misbehaves, the first one (a client's probe) never
        s.flaky += 1
        mode = mode[6:] if s.flaky % 2 == 0 else ""
    if mode == "fail-500":
        return web.Response(status=500, text="internal error")
    if mode == "fail-429":
        return web.Response(status=429, text="too many requests")
    n = int(body.get("max_tokens") or 16)
    if s.sem is None and s.max_running:
        s.sem = asyncio.Semaphore(s.max_running)
    s.waiting += 1
    if s.sem is not None:
        await s.sem.acquire()
    s.waiting -= 1
    s.running += 1
    try:
        return await _emit(request, s, mode, n, body, api)
    except ConnectionResetError:  # the client went away (cut, timeout, Ctrl-C): nothing to answer
        return web.Response(status=499)
    finally:
        s.running -= 1
        if s.sem is not None:
            s.sem.release()


async def _emit(request: web.Request, s: State, mode: str, n: int, body: dict, api: str) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    t0 = time.perf_counter() + s.ttft
    if mode == "empty":
        await resp.write(b"data: [DONE]\n\n")
        return resp
    last = None
    sent = s.sends.setdefault(_prompt_number(body), []) if s.record_sends else None
    for i in range(n):
        due = t0 + i * s.interval
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if mode == "cut" and i == 3:
            request.transport.close()
            return resp
        if mode == "malformed" and i == 2:
            await resp.write(b"data: {this is not json\n\n")
        if mode == "error-chunk" and i == 2:
            await resp.write(b'data: {"error": {"message": "out of memory", "code": 500}}\n\n')
        if mode == "stall" and i == 2:
            await asyncio.sleep(30)
        await resp.write(_chunk(api, f" t{i}"))
        now = time.perf_counter()
        s.lateness.append(now - due)
        if last is not None:
            s.gaps.append(now - last)
        if sent is not None:
            sent.append(now)
        last = now
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": n + 7}
        await resp.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    return resp


def _prompt_number(body: dict) -> int:
    """perfstack's synthetic prompts start with their number ("17: ..."); -1 for any other prompt."""
    msgs = body.get("messages") or [{}]
    text = str(body.get("prompt") or (msgs[0] or {}).get("content") or "")
    head = text.split(":", 1)[0].strip()
    return int(head) if head.isdigit() else -1


async def _sends(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE].sends)


async def _stats(request: web.Request) -> web.Response:
    """How the server kept its schedule: its own inter-token gaps and lateness (ms), then reset."""
    s: State = request.app[STATE]

    def pct(v: list[float]) -> dict:
        v = sorted(v)
        return {q: v[min(len(v) - 1, int(len(v) * p))] * 1e3 for q, p in (("p50", .5), ("p90", .9), ("p99", .99))} if v else {}
    out = {"gaps_ms": pct(s.gaps), "lateness_ms": pct(s.lateness), "tokens": len(s.lateness)}
    s.gaps.clear()
    s.lateness.clear()
    return web.json_response(out)


async def _chat(request: web.Request) -> web.StreamResponse:
    return await _stream(request, "chat")


async def _completions(request: web.Request) -> web.StreamResponse:
    return await _stream(request, "completions")


def make_app(interval: float = 0.02, ttft: float = 0.05, max_running: Optional[int] = None,
             record_sends: bool = False) -> web.Application:
    app = web.Application()
    app[STATE] = State(interval=interval, ttft=ttft, max_running=max_running, record_sends=record_sends)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/stats", _stats)
    app.router.add_get("/sends", _sends)
    app.router.add_post("/v1/chat/completions", _chat)
    app.router.add_post("/v1/completions", _completions)
    return app


def html_app() -> web.Application:
    """Not an OpenAI server: every path is an HTML 404 page."""
    async def page(request: web.Request) -> web.Response:
        return web.Response(status=404, text="<html><body>Not Found</body></html>", content_type="text/html")
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", page)
    return app


class Background:
    """Serve an app on 127.0.0.1 from a thread of its own (so a client in the main thread can drive it)."""

    def __init__(self, app: web.Application):
        self.app = app
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.runner = web.AppRunner(self.app, handle_signals=False)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.runner.cleanup())
        self.loop.close()

    def __enter__(self) -> "Background":
        self._thread.start()
        self._ready.wait(10)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--interval-ms", type=float, default=20)
    ap.add_argument("--ttft-ms", type=float, default=50)
    ap.add_argument("--max-running", type=int, default=None)
    ap.add_argument("--record-sends", metavar="FILE", help="write every token's send time, per prompt, to FILE "
                                                              "(one file per process: FILE.PID) when stopped")
    ap.add_argument("--processes", type=int, default=1, help="serve from this many processes (SO_REUSEPORT)")
    a = ap.parse_args()

    def serve() -> None:
        app = make_app(a.interval_ms / 1e3, a.ttft_ms / 1e3, a.max_running, bool(a.record_sends))
        if a.record_sends:
            async def dump(app: web.Application) -> None:
                with open(f"{a.record_sends}.{os.getpid()}", "w") as f:
                    json.dump(app[STATE].sends, f)
            app.on_cleanup.append(dump)
        web.run_app(app, host="127.0.0.1", port=a.port, print=None, reuse_port=a.processes > 1)

    if a.processes > 1:
        import multiprocessing
        procs = [multiprocessing.Process(target=serve) for _ in range(a.processes)]
        for p in procs:
            p.start()
        signal.signal(signal.SIGTERM, lambda *_: [p.terminate() for p in procs])
        for p in procs:
            p.join()
    else:
        serve()
