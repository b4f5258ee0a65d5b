"""How closely the test streaming servers keep their token schedule while holding many streams.

A streaming server runs in its own process (``fake``: tests/loadtest/fake_server.py on bare asyncio;
``aiohttp``: tests/loadtest/stream_server.py); this script holds N concurrent streams against it with a
bare asyncio client (no HTTP library, no parsing beyond finding the end of each response) for some
waves, then reads the server's own record of its emissions: how late each token left against its
schedule, and the gaps between a stream's successive tokens as sent. It also reports the server's and
the client's CPU time.

    python benchmarks/loadtest_fake_server.py [--server fake|aiohttp] [--streams 1000] [--interval-ms 20]
        [--tokens 50] [--waves 2] [--settle-s 1] [--loop uvloop|asyncio]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = {"fake": ROOT / "tests/loadtest/fake_server.py", "aiohttp": ROOT / "tests/loadtest/stream_server.py"}


class _Stream(asyncio.Protocol):
    """One keep-alive connection that sends streamed requests one after another and counts tokens."""

    def __init__(self, port: int, body: bytes, todo: list, done: asyncio.Future):
        self.req = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        self.todo = todo  # shared count of requests left to start
        self.done = done
        self.tail = b""
        self.chunks = 0
        self.transport: asyncio.Transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._next()

    def _next(self) -> None:
        if self.todo[0] <= 0:
            self.transport.close()
            return
        self.todo[0] -= 1
        self.transport.write(self.req)

    def data_received(self, data: bytes) -> None:
        self.chunks += data.count(b"data: ")
        buf = self.tail + data
        if buf.endswith(b"\r\n0\r\n\r\n"):  # the end of a chunked body
            self.tail = b""
            self._next()
        else:
            self.tail = buf[-8:]

    def connection_lost(self, exc: object) -> None:
        if not self.done.done():
            self.done.set_result(self.chunks)


async def _drive(port: int, streams: int, total: int, tokens: int, settle: float) -> int:
    loop = asyncio.get_running_loop()
    # the server's record restarts once every stream is under way (connecting 1,000 streams takes a while)
    loop.call_later(settle, lambda: loop.run_in_executor(None, _get, f"http://127.0.0.1:{port}/stats"))
    body = json.dumps({"model": "fake", "prompt": "hello", "max_tokens": tokens, "stream": True}).encode()
    todo = [total]
    futs = []
    for _ in range(streams):
        fut = loop.create_future()
        await loop.create_connection(lambda f=fut: _Stream(port, body, todo, f), "127.0.0.1", port)
        futs.append(fut)
    return sum(await asyncio.gather(*futs))


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", choices=sorted(SCRIPTS), default="fake")
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--interval-ms", type=float, default=20)
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--waves", type=int, default=2)
    ap.add_argument("--settle-s", type=float, default=1.0, help="restart the server's record after this long")
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop",
                    help="the fake server's event loop (the client uses uvloop when installed)")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # inherited by the server
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, str(SCRIPTS[a.server]), "--port", str(port), "--interval-ms", str(a.interval_ms),
           "--ttft-ms", "20"] + (["--loop", a.loop] if a.server == "fake" else [])
    srv = subprocess.Popen(cmd)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                _get(url + "/v1/models")
                break
            except OSError:
                time.sleep(0.1)
        _get(url + "/stats")  # reset
        try:
            import uvloop
            runner = uvloop.run
        except ImportError:
            runner = asyncio.run
        cpu0, own0, t0 = _cpu_s(srv.pid), time.process_time(), time.perf_counter()
        chunks = runner(_drive(port, a.streams, a.streams * a.waves, a.tokens, a.settle_s))
        wall = time.perf_counter() - t0
        cpu1, own1 = _cpu_s(srv.pid), time.process_time()
        st = _get(url + "/stats")
    finally:
        srv.terminate()
        srv.wait(10)
    lat, gaps = st["lateness_ms"], st["gaps_ms"]
    print(f"{a.server} server ({a.loop if a.server == 'fake' else 'asyncio'}), {os.cpu_count()} CPUs: {a.streams} "
          f"streams x {a.waves} waves x {a.tokens} tokens every {a.interval_ms:g} ms; {wall:.1f} s")
    print(f"  {chunks - a.streams * a.waves:,} tokens received; {st['tokens']:,} of them sent after the first "
          f"{a.settle_s:g} s are in the figures below")
    print(f"  lateness vs schedule  p50 {lat['p50']:.2f}  p90 {lat['p90']:.2f}  p99 {lat['p99']:.2f}  "
          f"max {lat.get('max', float('nan')):.2f} ms")
    print(f"  gaps as sent          p50 {gaps['p50']:.2f}  p90 {gaps['p90']:.2f}  p99 {gaps['p99']:.2f}  "
          f"max {gaps.get('max', float('nan')):.2f} ms (schedule {a.interval_ms:g} ms)")
    print(f"  CPU: server {(cpu1 - cpu0) / wall:.0%} of a core ({(cpu1 - cpu0) / (chunks - a.streams * a.waves) * 1e6:.1f} us per "
          f"token), client {(own1 - own0) / wall:.0%}")


if __name__ == "__main__":
    main()
