"""How long the fleet analysis of 1,000 nodes takes, and how much memory, on this machine.

    python benchmarks/fleet_scale.py [--nodes 1000] [--base h100-doctor-bench] [--gpus N] [--dir DIR]

Makes ``--nodes`` node Runs from a Run recorded on a real machine (tests/fixtures/runs/BASE.json: by
default the H100's doctor + quick bench Run, 435 kB with every raw sample), each figure scaled by its
own draw around 1 and its samples with it, five nodes made 15-30% slower on one benchmark and three
given another driver; writes them to a directory; then, in a fresh child process each:

1. ``perfstack fleet report DIR --json``'s work: read every Run, reduce it to its summary, analyse;
2. the analysis alone, over the summaries already in memory.

Prints wall time and peak resident memory of each (the bar: 10 s and 1 GB for 1,000 nodes) and
checks that the planted nodes, and only they, are flagged.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

SLOW = {17: ("gemm", 0.80), 301: ("hbm", 0.70), 555: ("gemm", 0.85), 702: ("h2d", 0.75), 998: ("hbm", 0.82)}
DRIFT = {42: "550.54.15", 420: "550.54.15", 777: "575.51.03"}


def generate(n: int, base: str, gpus: int | None, out: Path) -> tuple[set[str], float]:
    from fixtures.fleet_runs import fleet, set_fact, slow, write
    plant = {}
    for i, (bench, f) in SLOW.items():
        plant[i] = (lambda b, f: lambda d: slow(d, f, (b,)))(bench, f)
    for i, v in DRIFT.items():
        plant[i] = (lambda v: lambda d: set_fact(d, "driver.version", v))(v)
    planted = {f"node{i:03d}" if n <= 1000 else f"node{i}" for i in list(SLOW) + list(DRIFT) if i < n}
    t0 = time.perf_counter()
    total = 0
    for start in range(0, n, 50):  # 50 at a time: the generator holds no more than that in memory
        chunk = fleet(base, min(50, n - start), seed=start, gpus=gpus)
        for j, d in enumerate(chunk):
            i = start + (j if gpus is None else j // gpus)
            name = f"node{i:03d}"
            d["meta"]["fleet"]["node"] = name
            if i in plant:
                plant[i](d)
        total += sum(p.stat().st_size for p in write(chunk, out))
    print(f"generated {n} nodes{f' x {gpus} GPU Runs' if gpus else ''} from {base}: "
          f"{total / 2**20:.0f} MiB of Run JSON in {time.perf_counter() - t0:.1f} s")
    return planted, total


CHILD = r"""
import json, resource, sys, time
from perfstack.fleet.gather import entries, gather
from perfstack.fleet.analysis import analyze
mode, directory = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
nodes = gather(entries([directory]))
t1 = time.perf_counter()
if mode == "analysis":
    t0 = t1 = time.perf_counter()
a = analyze(nodes)
doc = json.dumps(a.to_dict())
t2 = time.perf_counter()
print(json.dumps({"read_s": t1 - t0, "analyse_s": t2 - t1,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "worker_peak_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  "flagged": [r.node for r in a.ranking], "json_mib": len(doc) / 2**20}))
"""


def child(mode: str, directory: Path) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(directory)], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        sys.exit(proc.stderr[-2000:])
    out = json.loads(proc.stdout)
    out["wall_s"] = wall
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--base", default="h100-doctor-bench", help="recorded Run in tests/fixtures/runs (no .json)")
    p.add_argument("--gpus", type=int, help="write one Run per GPU per node (e.g. --base h200x2-bench-full --gpus 2)")
    p.add_argument("--dir", help="keep the generated Runs here (default: a temporary directory)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.dir or tmp) / "runs"
        planted, _ = generate(args.nodes, args.base, args.gpus, out)
        full = child("full", out)
        alone = child("analysis", out)
    workers = os.cpu_count() or 1
    # the reader processes each hold one Run at a time: total = the analysing process + each worker's peak
    total_mib = full["peak_rss_mib"] + min(workers, 32) * full["worker_peak_rss_mib"]
    print(f"read + summarize + analyse {args.nodes} nodes: {full['wall_s']:.2f} s wall "
          f"(read {full['read_s']:.2f} s on {workers} CPUs, analyse {full['analyse_s']:.2f} s); peak RSS "
          f"{full['peak_rss_mib']:.0f} MiB + {full['worker_peak_rss_mib']:.0f} MiB per reader process "
          f"(<= {total_mib:.0f} MiB in all); the analysis JSON is {full['json_mib']:.1f} MiB")
    print(f"load average while measuring: {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
          "(other work on the machine slows the reading)")
    print(f"analysis alone over the summaries: {alone['analyse_s']:.2f} s")
    flagged = set(full["flagged"])
    print(f"planted {len(planted)} nodes; flagged {len(flagged)}: "
          f"{len(flagged & planted)} planted found, {len(planted - flagged)} missed ({sorted(planted - flagged)}), "
          f"{len(flagged - planted)} healthy flagged ({sorted(flagged - planted)[:10]})")
    ok = full["wall_s"] <= 10 and total_mib <= 1024
    print(f"bar (<= 10 s, <= 1 GB): {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
