"""How much delay the load client itself adds at high concurrency.

A streaming server with a fixed schedule (tests/loadtest/stream_server.py) runs in its own processes;
perfstack loadtest holds N streams against it for three waves, the first one excluded as warm-up. The
server keeps the moment each token left, per prompt (synthetic prompts are numbered); the client keeps the
gaps it received, per request in the same order. The client's added ITL is, gap by gap, the gap it saw
minus the gap the server sent. One row per case:

    python benchmarks/loadtest_client.py --cases 1000x5x4,2000x10x6 [--interval-ms 100] [--tokens 40]
        [--server-cpus 0-7 --client-cpus 8-31] [--out DIR]

A case is STREAMS[xCLIENT_PROCS[xSERVER_PROCS]]; a missing or "auto" client count is perfstack's own choice.
``--server-cpus``/``--client-cpus`` pin the two sides to separate CPUs (taskset) so that neither waits for
the other's CPU; ``--loop asyncio`` measures the standard event loop. Client CPU is the CPU time of the
whole client (every process) over the run's wall time, in cores, and the busiest process's share of a core;
"waited for a CPU" is the busiest share of the level a client process spent runnable without a CPU (Linux
schedstat): above a percent or so, the tail measures the host's contention, not the client.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _pin(cpus: str | None) -> list[str]:
    return ["taskset", "-c", cpus] if cpus and shutil.which("taskset") else []


def _q(v: list[float], p: float) -> float:
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")


def one(streams: int, client_procs: str, server_procs: int, a: argparse.Namespace, work: Path) -> dict:
    sends_file = work / f"sends-{streams}-{client_procs}-{server_procs}"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = subprocess.Popen(_pin(a.server_cpus) + [
        sys.executable, str(HERE.parent / "tests/loadtest/stream_server.py"), "--port", str(port),
        "--interval-ms", str(a.interval_ms), "--ttft-ms", "20", "--record-sends", str(sends_file),
        "--processes", str(server_procs)])
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, PERFSTACK_EVENT_LOOP=a.loop)
    out = work / f"lt-{streams}-{client_procs}-{server_procs}.json"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url + "/v1/models", timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        cmd = _pin(a.client_cpus) + [
            sys.executable, "-m", "perfstack", "-q", "loadtest", url, "--concurrency", str(streams),
            "--requests", str(2 * streams), "--warmup", str(streams), "--output-len", str(a.tokens),
            "-o", str(out), "--json"] + ([] if client_procs == "auto" else ["--client-procs", client_procs])
        rc = subprocess.call(cmd, stdout=subprocess.DEVNULL, env=env)
        wall = time.perf_counter() - t0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the client and its worker processes, all waited for
    finally:
        srv.terminate()
        srv.wait()
    client_cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    sends: dict = {}
    for f in work.glob(sends_file.name + ".*"):
        sends.update(json.loads(f.read_text()))
    row: dict = {"streams": streams, "server_procs": server_procs, "rc": rc, "wall_s": round(wall, 1),
                 "client_cpu_cores": round(client_cpu / wall, 2), "loop": a.loop}
    if rc != 0 or not out.exists():
        return row
    lv = json.loads(out.read_text())["loadtest"]["levels"][0]
    s, c = lv["summary"], lv["client"] or {}
    added, sent_gaps = [], []
    for k, r in enumerate(lv["requests"]):
        sent = sends.get(str(k))
        if r.get("warmup") or r.get("error") or not sent or len(sent) != len(r["itl_ms"]) + 1:
            continue
        gaps = [(b - a_) * 1e3 for a_, b in zip(sent, sent[1:])]
        sent_gaps += gaps
        added += [got - g for got, g in zip(r["itl_ms"], gaps)]
    added.sort()
    sent_gaps.sort()
    row.update(client_procs=c.get("processes", 1), completed=s["completed"], failed=s["failed"], gaps=len(added),
               added_ms={k: round(_q(added, p), 3) for k, p in (("p50", .5), ("p90", .9), ("p99", .99), ("p999", .999))}
               | {"max": round(added[-1], 3) if added else None},
               server_sent_gap_ms={k: round(_q(sent_gaps, p), 3) for k, p in (("p50", .5), ("p99", .99))},
               client_itl_ms={k: round(s["itl"][k], 3) for k in ("median", "p99")},
               busiest_proc_cpu=round(c.get("cpu_fraction", 0), 3), cpu_wait=round(c.get("cpu_wait_fraction", 0), 4), loop_lag_p99_ms=round(c.get("loop_lag_p99_ms", 0), 2),
               cpu_us_per_chunk=round(c.get("cpu_us_per_chunk", 0), 1),
               chunks_per_s=round(len(added) / max(wall, 1e-9) * 1.5))  # the measured waves are 2 of 3
    return row


def table(rows: list[dict]) -> str:
    head = ("streams", "client procs", "server procs", "added ITL p50", "p90", "p99", "p99.9", "max (ms)",
            "client CPU (cores)", "busiest proc", "waited for a CPU", "µs/chunk", "timer lag p99", "failed")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "added_ms" not in r:
            lines.append(f"| {r['streams']} | ? | {r['server_procs']} | run failed (rc {r['rc']}) |")
            continue
        m = r["added_ms"]
        lines.append("| " + " | ".join([
            f"{r['streams']:,}", str(r["client_procs"]), str(r["server_procs"]), f"{m['p50']:+.3f}", f"{m['p90']:+.3f}",
            f"{m['p99']:+.3f}", f"{m['p999']:+.3f}", f"{m['max']:+.1f}", f"{r['client_cpu_cores']:.2f}",
            f"{r['busiest_proc_cpu']:.0%}", f"{r.get('cpu_wait', 0):.1%}", f"{r['cpu_us_per_chunk']:.0f}", f"{r['loop_lag_p99_ms']:.2f} ms",
            str(r["failed"])]) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="1000", help="comma-separated STREAMS[xCLIENT_PROCS[xSERVER_PROCS]]")
    ap.add_argument("--streams", type=int, default=None, help="one case of this many streams (old form)")
    ap.add_argument("--client-procs", default="auto")
    ap.add_argument("--server-procs", type=int, default=1)
    ap.add_argument("--interval-ms", type=float, default=100)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--server-cpus", default=None, help="taskset CPU list for the server, e.g. 0-7")
    ap.add_argument("--client-cpus", default=None, help="taskset CPU list for the client, e.g. 8-31")
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    ap.add_argument("--out", default=None, help="write results.json and table.md here")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # inherited by the server and client processes
    cases = []
    for spec in ([str(a.streams)] if a.streams else a.cases.split(",")):
        parts = spec.strip().split("x")
        cases.append((int(parts[0]), parts[1] if len(parts) > 1 else a.client_procs,
                      int(parts[2]) if len(parts) > 2 else a.server_procs))
    work = Path(tempfile.mkdtemp())
    print(f"{os.cpu_count()} CPUs; server CPUs {a.server_cpus or 'any'}, client CPUs {a.client_cpus or 'any'}; "
          f"{a.tokens} tokens every {a.interval_ms:g} ms per stream; {a.loop}; Python {sys.version.split()[0]}",
          flush=True)
    rows: list[dict] = []
    meta = {"cpus": os.cpu_count(), "server_cpus": a.server_cpus, "client_cpus": a.client_cpus,
            "interval_ms": a.interval_ms, "tokens": a.tokens, "loop": a.loop, "python": sys.version.split()[0]}
    for streams, cp, sp in cases:
        r = one(streams, cp, sp, a, work)
        rows.append(r)
        print(json.dumps(r), flush=True)
        if a.out:  # after every case, so that a run cut short keeps what it measured
            d = Path(a.out)
            d.mkdir(parents=True, exist_ok=True)
            (d / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
            (d / "table.md").write_text(table(rows) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
