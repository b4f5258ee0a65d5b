"""How much delay the load client itself adds at high concurrency.

A streaming server with a fixed schedule runs in its own process; perfstack loadtest holds N streams
against it for three waves, the first one excluded as warm-up. The server keeps the moment each token
left, per prompt (synthetic prompts are numbered); the client keeps the gaps it received, per request in
the same order. The client's added ITL is, gap by gap, the gap it saw minus the gap the server sent.

    python benchmarks/loadtest_client.py [--streams 1000] [--interval-ms 100] [--tokens 40]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--interval-ms", type=float, default=100)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--client-procs", default=None, help="perfstack's --client-procs (default: its own choice)")
    ap.add_argument("--server-procs", type=int, default=1)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # inherited by the server process
    work = Path(tempfile.mkdtemp())
    sends_file = work / "sends"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = subprocess.Popen([sys.executable, str(HERE.parent / "tests/loadtest/stream_server.py"), "--port", str(port),
                            "--interval-ms", str(a.interval_ms), "--ttft-ms", "20", "--record-sends", str(sends_file),
                            "--processes", str(a.server_procs)])
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url + "/v1/models", timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        out = work / "lt.json"
        t0 = time.perf_counter()
        rc = subprocess.call([sys.executable, "-m", "perfstack", "-q", "loadtest", url, "--concurrency", str(a.streams),
                              "--requests", str(2 * a.streams), "--warmup", str(a.streams), "--output-len", str(a.tokens),
                              "-o", str(out), "--json"] + (["--client-procs", a.client_procs] if a.client_procs else []),
                             stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
    finally:
        srv.terminate()
        srv.wait()
    sends: dict = {}
    for f in work.glob("sends.*"):
        sends.update(json.loads(f.read_text()))
    gaps = sorted(b - a for t in sends.values() for a, b in zip(t, t[1:]))
    server = {"gaps_ms": {k: gaps[min(len(gaps) - 1, int(q * len(gaps)))] * 1e3
                          for k, q in (("p50", .5), ("p90", .9), ("p99", .99))}}
    lt = json.loads(out.read_text())["loadtest"]
    lv = lt["levels"][0]
    s, c = lv["summary"], lv["client"]
    print(f"{a.streams} streams x {a.tokens} tokens every {a.interval_ms:g} ms ({os.cpu_count()} CPUs); rc {rc}, "
          f"{wall:.1f} s")
    print(f"  completed {s['completed']}, failed {s['failed']}; mean in flight {s.get('concurrency_mean', 0):.0f}")
    print(f"  server sent  ITL p50 {server['gaps_ms']['p50']:.2f}  p90 {server['gaps_ms']['p90']:.2f}  "
          f"p99 {server['gaps_ms']['p99']:.2f} ms")
    itl = s["itl"]
    print(f"  client saw   ITL p50 {itl['median']:.2f}  p90 {itl['p90']:.2f}  p99 {itl['p99']:.2f} ms")
    added = []
    for k, r in enumerate(lv["requests"]):
        sent = sends.get(str(k))
        if r.get("warmup") or r.get("error") or not sent or len(sent) != len(r["itl_ms"]) + 1:
            continue
        added += [got - (b - a) * 1e3 for got, a, b in zip(r["itl_ms"], sent, sent[1:])]
    added.sort()
    q = lambda p: added[min(len(added) - 1, int(p * len(added)))]  # noqa: E731
    print(f"  added by the client, gap by gap over {len(added):,} gaps: p50 {q(.5):+.3f}  p90 {q(.9):+.3f}  "
          f"p99 {q(.99):+.3f}  max {added[-1]:+.3f} ms")
    print(f"  client: {c.get('processes', 1)} process(es), busiest {c['cpu_fraction']:.0%} of a core, timer lag p99 "
          f"{c['loop_lag_p99_ms']:.2f} ms, {c['cpu_us_per_chunk']:.1f} us CPU per chunk; server processes "
          f"{a.server_procs}")


if __name__ == "__main__":
    main()
