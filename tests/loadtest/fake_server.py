"""A fast OpenAI-compatible streaming server on bare asyncio, for measuring a load client's own delay.

It speaks just enough HTTP/1.1 (keep-alive, chunked transfer) to serve ``/v1/completions`` and
``/v1/chat/completions`` with ``stream: true``: after ``ttft`` seconds one token leaves every ``interval``
seconds on a fixed schedule, ``max_tokens`` of them, then the usage chunk (when
``stream_options.include_usage``) and ``data: [DONE]``. Each token is one timer callback and one socket
write, with no task, no coroutine and no HTTP framework between them, so one core holds thousands of
streams and the emissions stay on schedule. The server measures itself: ``GET /stats`` gives how late
its emissions were against their schedule and the gaps between a stream's successive tokens as sent
(milliseconds, p50/p90/p99/max), then resets; ``GET /sends`` gives every token's send time per
numbered prompt when started with ``record_sends``. The chunks carry nothing beyond what an OpenAI
server sends.

``max_running`` admits at most that many streams at once; the rest wait in arrival order and their
TTFT clock starts when admitted, as on a saturated server. Three more knobs set a TTFT by hand:
``ttft_per_running`` adds that many seconds per other stream running when one is admitted (a TTFT that
grows with load while throughput still grows); ``ttft_jitter`` adds a uniform [0, jitter) seconds drawn
from the prompt's number and ``jitter_seed`` (the same prompt, the same TTFT; a known median); and
``slow_first``/``slow_extra`` make the first N streams the server admits (the client's probe included)
that much slower to their first token, as a server that initialises lazily. ``GET /metrics`` reports the load in
Prometheus text under vLLM's names (running, waiting, KV-cache use = running / max_running,
preemptions, token counters).

A request misbehaves when its model name, or its ``X-Fake-Mode`` header, names a mode:

    fail-500 / fail-429   that HTTP status before any byte of a stream
    cut                   the connection closes after three tokens
    malformed             a line of non-JSON after two tokens
    error-chunk           an OpenAI error object in the stream after two tokens
    stall / stall-S       two tokens, then no byte for S seconds (default 30), then the rest
    empty                 [DONE] without any token
    html                  an HTML "404 Not Found" page, as from a server that is not OpenAI-compatible
    role-first            (chat) a chunk with the assistant role and no text as soon as the stream opens,
                          before the TTFT, as transformers serve sends
    no-done               the stream ends without data: [DONE], as transformers serve's do
    flaky-MODE            every other request behaves as MODE, starting with the second

Modes combine with "+": ``role-first+no-done`` streams as transformers serve does.

``POST /v1/embeddings`` answers an 8-number embedding, unstreamed, after the TTFT (with its jitter).

``--html`` makes every path an HTML 404 page. Standalone, for benchmarks:

    python tests/loadtest/fake_server.py --port 8011 --interval-ms 20 --ttft-ms 50 [--max-running N]
        [--ttft-per-running-ms MS] [--ttft-jitter-ms MS --jitter-seed S] [--slow-first N --slow-extra-ms MS]
        [--processes P] [--record-sends FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import signal
import socket
import threading
import time
from array import array
from typing import Optional

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 429: "Too Many Requests",
            500: "Internal Server Error"}
_HTML_404 = b"<html><head><title>404 Not Found</title></head><body><h1>Not Found</h1></body></html>"
_DONE = b"data: [DONE]\n\n"
_END = b"0\r\n\r\n"
_MAX_HEAD = 64 * 1024
_MAX_BODY = 8 * 1024 * 1024


def _framed(data: bytes) -> bytes:
    """One piece of a chunked HTTP body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


class Server:
    """The shared state of one server process: schedule, queue, counters and its own timing records."""

    def __init__(self, interval: float = 0.02, ttft: float = 0.05, max_running: Optional[int] = None,
                 record_sends: bool = False, html: bool = False, model: str = "fake", ttft_per_running: float = 0.0,
                 ttft_jitter: float = 0.0, jitter_seed: int = 0, slow_first: int = 0, slow_extra: float = 0.0):
        self.interval = interval
        self.ttft = ttft
        self.ttft_per_running = ttft_per_running
        self.ttft_jitter = ttft_jitter
        self.jitter_seed = jitter_seed
        self.slow_first = slow_first
        self.slow_extra = slow_extra
        self.admitted = 0
        self.max_running = max_running
        self.record_sends = record_sends
        self.html = html
        self.model = model
        self.running = 0
        self.queue: collections.deque = collections.deque()
        self.preemptions = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.requests_done = 0
        self.flaky = 0
        self.lateness = array("d")  # seconds each token left after its scheduled time
        self.gaps = array("d")  # seconds between a stream's successive tokens, as sent
        self.sends: dict[int, list[float]] = {}
        self.conns: set = set()
        self.loop: Optional[asyncio.AbstractEventLoop] = None

    # -- admission --

    def admit(self, stream: "_Stream") -> None:
        if self.max_running is None or self.running < self.max_running:
            self.running += 1
            stream.start()
        else:
            self.queue.append(stream)

    def release(self) -> None:
        self.running -= 1
        self.requests_done += 1
        while self.queue and (self.max_running is None or self.running < self.max_running):
            nxt = self.queue.popleft()
            if nxt.proto.closed:
                continue
            self.running += 1
            nxt.start()

    def withdraw(self, stream: "_Stream") -> None:
        try:
            self.queue.remove(stream)
        except ValueError:
            pass

    # -- reports --

    def metrics_text(self) -> bytes:
        lbl = f'{{model_name="{self.model}"}}'
        kv = min(1.0, self.running / self.max_running) if self.max_running else 0.0
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{lbl} {self.running}",
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{lbl} {len(self.queue)}",
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
            "# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc{lbl} {kv:.4f}",
            "# HELP vllm:num_preemptions_total Cumulative number of preemptions from the engine.",
            "# TYPE vllm:num_preemptions_total counter", f"vllm:num_preemptions_total{lbl} {self.preemptions}",
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
            "# TYPE vllm:prompt_tokens_total counter", f"vllm:prompt_tokens_total{lbl} {self.prompt_tokens}",
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{lbl} {self.generation_tokens}",
        ]
        return ("\n".join(lines) + "\n").encode()

    def stats(self, reset: bool = True) -> dict:
        def pct(v: array) -> dict:
            s = sorted(v)
            if not s:
                return {}
            out = {k: s[min(len(s) - 1, int(len(s) * q))] * 1e3 for k, q in (("p50", .5), ("p90", .9), ("p99", .99))}
            out["max"] = s[-1] * 1e3
            return out
        out = {"tokens": len(self.lateness), "lateness_ms": pct(self.lateness), "gaps_ms": pct(self.gaps),
               "interval_ms": self.interval * 1e3, "running": self.running, "waiting": len(self.queue)}
        if reset:
            self.lateness = array("d")
            self.gaps = array("d")
        return out


def _prompt_number(body: dict) -> int:
    """A numbered prompt ("17: ...", as perfstack's synthetic prompts are) gives its number; -1 otherwise."""
    msgs = body.get("messages")
    text = body.get("prompt")
    if text is None and isinstance(msgs, list) and msgs and isinstance(msgs[0], dict):
        text = msgs[0].get("content")
    head = str(text or "").split(":", 1)[0].strip()
    return int(head) if head.isdigit() else -1


class _Stream:
    """One streamed completion: a chain of timer callbacks, each writing one token."""

    def __init__(self, proto: "_Conn", srv: Server, body: dict, chat: bool, mode: str):
        self.proto = proto
        self.srv = srv
        self.chat = chat
        self.modes = set(mode.split("+"))
        stall = next((m for m in self.modes if m == "stall" or m.startswith("stall-")), None)
        self.stall_s = float(stall[6:]) if stall and stall != "stall" else 30.0 if stall else None
        try:
            self.n = max(0, int(body.get("max_completion_tokens") or body.get("max_tokens") or 16))
        except (TypeError, ValueError):
            self.n = 16
        opts = body.get("stream_options")
        self.usage = bool(isinstance(opts, dict) and opts.get("include_usage"))
        prompt = body.get("prompt") if not chat else " ".join(
            str(m.get("content", "")) for m in body.get("messages") or [] if isinstance(m, dict))
        self.prompt_tokens = max(1, len(str(prompt or "").split()))
        self.i = 0
        self.stalled = False
        self.t0 = 0.0
        self.last: Optional[float] = None
        self.handle: Optional[asyncio.TimerHandle] = None
        self.number = _prompt_number(body)
        self.sent = srv.sends.setdefault(self.number, []) if srv.record_sends else None
        rid = f"cmpl-{id(self):x}"
        created = int(time.time())
        if chat:
            self.head = (f'{{"id":"{rid}","object":"chat.completion.chunk","created":{created},'
                         f'"model":{json.dumps(srv.model)},"choices":[{{"index":0,"delta":{{"content":').encode()
            self.tail = b'},"finish_reason":null}]}'
        else:
            self.head = (f'{{"id":"{rid}","object":"text_completion","created":{created},'
                         f'"model":{json.dumps(srv.model)},"choices":[{{"index":0,"text":').encode()
            self.tail = b',"finish_reason":null}]}'
        self.rid, self.created = rid, created

    def start(self) -> None:
        """Admitted: the response head leaves now, the first token after the TTFT."""
        self.proto.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
        srv = self.srv
        srv.prompt_tokens += self.prompt_tokens
        loop = srv.loop
        self.t0 = time.monotonic() + srv.ttft + self.extra_ttft()  # the loop's clock; its cached time() may be behind
        if self.chat and "role-first" in self.modes:
            self.proto.write(_framed(b"data: " + self.head[:-len(b'"content":')] + b'"role":"assistant"'
                                     + self.tail + b"\n\n"))
        if "empty" in self.modes or self.n == 0:
            self.finish()
            return
        self.handle = loop.call_at(self.t0, self.emit)

    def extra_ttft(self) -> float:
        """The hand-set additions to this stream's TTFT (running already counts this stream)."""
        srv = self.srv
        srv.admitted += 1
        extra = srv.ttft_per_running * max(0, srv.running - 1)
        if srv.ttft_jitter:
            extra += random.Random(srv.jitter_seed * 1_000_003 + self.number).random() * srv.ttft_jitter
        if srv.admitted <= srv.slow_first:
            extra += srv.slow_extra
        return extra

    def emit(self) -> None:
        srv, proto, i = self.srv, self.proto, self.i
        if proto.closed:
            self.abort()
            return
        modes = self.modes
        if i == 3 and "cut" in modes:
            proto.transport.abort()
            return
        if i == 2 and "malformed" in modes:
            proto.write(_framed(b"data: {this is not json\n\n"))
        elif i == 2 and "error-chunk" in modes:
            proto.write(_framed(b'data: {"error": {"message": "out of memory", "type": "server_error", "code": 500}}\n\n'))
            self.finish(usage=False)
            return
        elif i == 2 and self.stall_s is not None and not self.stalled:
            self.stalled = True
            self.t0 += self.stall_s  # the rest of the schedule moves by the stall
            self.handle = srv.loop.call_at(self.t0 + i * srv.interval, self.emit)
            return
        text = (" t%d" % i).encode()
        proto.write(_framed(b"data: " + self.head + b'"' + text + b'"' + self.tail + b"\n\n"))
        now = time.perf_counter()
        due = self.t0 + i * srv.interval
        srv.lateness.append(time.monotonic() - due)
        if self.last is not None:
            srv.gaps.append(now - self.last)
        if self.sent is not None:
            self.sent.append(now)
        self.last = now
        srv.generation_tokens += 1
        self.i = i + 1
        if self.i < self.n:
            self.handle = srv.loop.call_at(self.t0 + self.i * srv.interval, self.emit)
        else:
            self.finish()

    def finish(self, usage: Optional[bool] = None) -> None:
        out = b""
        if self.usage if usage is None else usage:
            u = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.i,
                 "total_tokens": self.prompt_tokens + self.i}
            obj = {"id": self.rid, "object": "chat.completion.chunk" if self.chat else "text_completion",
                   "created": self.created, "model": self.srv.model, "choices": [], "usage": u}
            out += _framed(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")
        self.proto.write(out + (b"" if "no-done" in self.modes else _framed(_DONE)) + _END)
        self.handle = None
        self.proto.stream = None
        self.srv.release()
        self.proto.request_done()

    def abort(self) -> None:
        """The client went away: stop the schedule and free the slot (or leave the queue)."""
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
            self.srv.release()
        elif self.t0 == 0.0:
            self.srv.withdraw(self)


class _Pending:
    """An unstreamed answer on its way (an embedding): the connection waits for it."""

    aborted = False

    def abort(self) -> None:
        self.aborted = True


class _Conn(asyncio.Protocol):
    """One client connection: parse requests one after another, answer each."""

    def __init__(self, srv: Server):
        self.srv = srv
        self.buf = bytearray()
        self.transport: Optional[asyncio.Transport] = None
        self.stream: Optional[_Stream] = None
        self.closed = False
        self.keep_alive = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.srv.conns.add(self)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.closed = True
        self.srv.conns.discard(self)
        if self.stream is not None:
            self.stream.abort()
            self.stream = None

    def write(self, data: bytes) -> None:
        if not self.closed:
            self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.stream is None:
            self._parse()

    def request_done(self) -> None:
        if not self.keep_alive:
            self.transport.close()
        elif self.buf:
            self._parse()

    def _parse(self) -> None:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buf) > _MAX_HEAD:
                self._reply(400, b'{"error":"header too large"}', close=True)
            return
        head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        try:
            method, target, version = head[0].split(" ", 2)
        except ValueError:
            self._reply(400, b'{"error":"bad request line"}', close=True)
            return
        headers = {}
        for line in head[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            length = -1
        if length < 0 or length > _MAX_BODY:
            self._reply(400, b'{"error":"bad content-length"}', close=True)
            return
        if len(self.buf) < end + 4 + length:
            return  # the body is still coming
        body = bytes(self.buf[end + 4:end + 4 + length])
        del self.buf[:end + 4 + length]
        conn = headers.get("connection", "").lower()
        self.keep_alive = conn != "close" and (version != "HTTP/1.0" or conn == "keep-alive")
        self._route(method, target.split("?", 1)[0], headers, body)

    def _reply(self, status: int, body: bytes, ctype: str = "application/json", close: bool = False) -> None:
        if close:
            self.keep_alive = False
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\n" + ("" if self.keep_alive else "Connection: close\r\n") + "\r\n")
        self.write(head.encode() + body)
        self.request_done()

    def _route(self, method: str, path: str, headers: dict, raw: bytes) -> None:
        srv = self.srv
        if srv.html:
            self._reply(404, _HTML_404, "text/html")
        elif path == "/v1/embeddings" and method == "POST":
            self._embed(raw)
        elif path in ("/v1/completions", "/v1/chat/completions"):
            if method != "POST":
                self._reply(405, b'{"error":{"message":"method not allowed"}}')
                return
            try:
                body = json.loads(raw)
                if not isinstance(body, dict):
                    raise ValueError("not an object")
            except ValueError:
                self._reply(400, b'{"error":{"message":"the body is not a JSON object","type":"invalid_request_error"}}')
                return
            self._complete(body, headers, chat=path.endswith("chat/completions"))
        elif method != "GET":
            self._reply(405, b'{"error":{"message":"method not allowed"}}')
        elif path == "/v1/models":
            self._reply(200, json.dumps({"object": "list", "data": [
                {"id": srv.model, "object": "model", "created": 0, "owned_by": "fake"}]}).encode())
        elif path == "/health":
            self._reply(200, b"{}")
        elif path == "/metrics":
            self._reply(200, srv.metrics_text(), "text/plain; version=0.0.4")
        elif path == "/stats":
            self._reply(200, json.dumps(srv.stats()).encode())
        elif path == "/sends":
            self._reply(200, json.dumps(srv.sends).encode())
        else:
            self._reply(404, b'{"detail":"Not Found"}')

    def _embed(self, raw: bytes) -> None:
        """An embedding of 8 numbers after the TTFT (and its hand-set additions): one unstreamed answer."""
        srv = self.srv
        try:
            body = json.loads(raw)
            text = str(body["input"])
        except (ValueError, KeyError, TypeError):
            self._reply(400, b'{"error":{"message":"input is required"}}')
            return
        n = max(1, len(text.split()))
        answer = json.dumps({"object": "list", "model": srv.model, "usage": {"prompt_tokens": n, "total_tokens": n},
                             "data": [{"object": "embedding", "index": 0, "embedding": [0.125] * 8}]}).encode()
        pending = _Pending()
        self.stream = pending  # type: ignore[assignment]  # no other request on this connection meanwhile

        def answer_now() -> None:
            if not pending.aborted and not self.closed:
                self.stream = None
                self._reply(200, answer)
        number = _prompt_number({"prompt": text})
        delay = srv.ttft + (random.Random(srv.jitter_seed * 1_000_003 + number).random() * srv.ttft_jitter
                            if srv.ttft_jitter else 0.0)
        srv.loop.call_later(delay, answer_now)

    def _complete(self, body: dict, headers: dict, chat: bool) -> None:
        srv = self.srv
        mode = headers.get("x-fake-mode") or str(body.get("model", ""))
        if mode.startswith("flaky-"):  # every other request misbehaves; the first (a client's probe) never does
            srv.flaky += 1
            mode = mode[6:] if srv.flaky % 2 == 0 else ""
        if mode == "fail-500":
            self._reply(500, b'{"error":{"message":"internal error","type":"server_error"}}')
        elif mode == "fail-429":
            self._reply(429, b'{"error":{"message":"too many requests","type":"rate_limit_error"}}')
        elif mode == "html":
            self._reply(404, _HTML_404, "text/html")
        elif not body.get("stream"):
            self._reply(400, b'{"error":{"message":"this server only streams (stream: true)"}}')
        else:
            self.stream = _Stream(self, srv, body, chat, mode)
            srv.admit(self.stream)


async def start(srv: Server, host: str = "127.0.0.1", port: int = 0, reuse_port: bool = False,
                backlog: int = 4096) -> asyncio.AbstractServer:
    """Listen on host:port in the running loop; the bound port is server.sockets[0].getsockname()[1]."""
    srv.loop = asyncio.get_running_loop()
    return await srv.loop.create_server(lambda: _Conn(srv), host, port, reuse_port=reuse_port or None,
                                        backlog=backlog)


async def shutdown(srv: Server, listener: asyncio.AbstractServer) -> None:
    """Stop listening and drop every open connection (streams in flight are cut)."""
    listener.close()
    for c in list(srv.conns):
        c.transport.abort()
    await asyncio.sleep(0)
    await listener.wait_closed()


class InThread:
    """Serve from a thread of its own with its own event loop (so a client in the test's thread can drive it).

        with InThread(Server(interval=0.01)) as fs:
            fs.url, fs.server.stats()
    """

    def __init__(self, server: Server):
        self.server = server
        self.port = 0
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._error: Optional[BaseException] = None

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            listener = self.loop.run_until_complete(start(self.server))
            self.port = listener.sockets[0].getsockname()[1]
        except BaseException as e:  # reported by __enter__
            self._error = e
            self._ready.set()
            self.loop.close()
            return
        self._ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(shutdown(self.server, listener))
        self.loop.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "InThread":
        self._thread.start()
        if not self._ready.wait(10) or self._error is not None:
            raise RuntimeError(f"the fake server did not start: {self._error!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


def _serve_forever(a: argparse.Namespace) -> None:
    if a.loop == "uvloop":
        import uvloop
        uvloop.install()
    srv = Server(a.interval_ms / 1e3, a.ttft_ms / 1e3, a.max_running, bool(a.record_sends), a.html,
                 ttft_per_running=a.ttft_per_running_ms / 1e3, ttft_jitter=a.ttft_jitter_ms / 1e3,
                 jitter_seed=a.jitter_seed, slow_first=a.slow_first, slow_extra=a.slow_extra_ms / 1e3)

    async def main() -> None:
        listener = await start(srv, a.host, a.port, reuse_port=a.processes > 1)
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            srv.loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await shutdown(srv, listener)
        if a.record_sends:
            with open(f"{a.record_sends}.{os.getpid()}", "w") as f:
                json.dump(srv.sends, f)
    asyncio.run(main())


def _default_loop() -> str:
    try:
        import uvloop  # noqa: F401
        return "uvloop"
    except ImportError:
        return "asyncio"


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--interval-ms", type=float, default=20)
    ap.add_argument("--ttft-ms", type=float, default=50)
    ap.add_argument("--max-running", type=int, default=None)
    ap.add_argument("--ttft-per-running-ms", type=float, default=0.0, help="TTFT added per other running stream")
    ap.add_argument("--ttft-jitter-ms", type=float, default=0.0, help="TTFT added, uniform in [0, this)")
    ap.add_argument("--jitter-seed", type=int, default=0)
    ap.add_argument("--slow-first", type=int, default=0, help="the first N streams admitted are slower")
    ap.add_argument("--slow-extra-ms", type=float, default=0.0, help="how much slower to their first token")
    ap.add_argument("--html", action="store_true", help="not an OpenAI server: every path is an HTML 404 page")
    ap.add_argument("--record-sends", metavar="FILE", help="on SIGTERM write every token's send time, per numbered "
                                                              "prompt, to FILE.PID (one file per process)")
    ap.add_argument("--processes", type=int, default=1, help="serve from this many processes (SO_REUSEPORT)")
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default=_default_loop())
    args = ap.parse_args()
    if args.processes > 1:
        import multiprocessing
        procs = [multiprocessing.Process(target=_serve_forever, args=(args,)) for _ in range(args.processes)]
        for p in procs:
            p.start()
        signal.signal(signal.SIGTERM, lambda *_: [p.terminate() for p in procs])
        signal.signal(signal.SIGINT, lambda *_: [p.terminate() for p in procs])
        for p in procs:
            p.join()
    else:
        _serve_forever(args)
