"""How fast perfstack analyses a large trace: concatenate copies of a real trace (shifted in time,
with fresh ids) to about 100 MB of JSON, then time load + analyze + rules in a child process and
report wall time and peak RSS (resource.getrusage of the child).

    python benchmarks/profile_speed.py [--mb 100] [--source tests/fixtures/traces/h100/host-sync.pt.trace.json.gz]
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def synthesize(source: Path, target_mb: float, out: Path) -> tuple[int, int]:
    doc = json.loads(gzip.decompress(source.read_bytes()))
    events = doc["traceEvents"]
    xs = [e for e in events if e.get("ph") == "X"]
    t0 = min(e["ts"] for e in xs)
    span = max(e["ts"] + e["dur"] for e in xs) - t0 + 1000.0
    one = len(json.dumps(events))
    copies = max(1, int(target_mb * 1e6 / one))
    with open(out, "w") as f:
        head = {k: v for k, v in doc.items() if k != "traceEvents"}
        f.write(json.dumps(head)[:-1] + ', "traceEvents": [')
        first = True
        for c in range(copies):
            shift, off = c * span, c * 10_000_000
            for e in events:
                e2 = dict(e)
                if "ts" in e2 and isinstance(e2["ts"], (int, float)):
                    e2["ts"] = e2["ts"] + shift
                if isinstance(e2.get("name"), str) and e2["name"].startswith("ProfilerStep#"):
                    e2["name"] = f"ProfilerStep#{int(e2['name'][13:]) + 3 * c}"
                if "id" in e2 and isinstance(e2["id"], int):
                    e2["id"] += off
                a = e2.get("args")
                if isinstance(a, dict) and ("correlation" in a or "External id" in a):
                    a = dict(a)
                    for k in ("correlation", "External id"):
                        if isinstance(a.get(k), int):
                            a[k] += off
                    e2["args"] = a
                f.write(("" if first else ",") + json.dumps(e2))
                first = False
        f.write("]}")
    return copies, copies * len(events)


CHILD = """
import sys, time, resource
t0 = time.perf_counter()
from perfstack.profile.summary import profile_run
run = profile_run([sys.argv[1]])
dt = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{dt:.2f} {rss:.0f} {run.profile['n_steps']} {len(run.findings)}")
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=100)
    ap.add_argument("--source", default=str(ROOT / "tests/fixtures/traces/h100/host-sync.pt.trace.json.gz"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "big.pt.trace.json"
        copies, n = synthesize(Path(args.source), args.mb, out)
        size = out.stat().st_size / 1e6
        r = subprocess.run([sys.executable, "-c", CHILD, str(out)], capture_output=True, text=True,
                           cwd=ROOT, env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
        if r.returncode:
            sys.exit(r.stderr)
        dt, rss, steps, nf = r.stdout.split()
        print(f"trace {size:.0f} MB ({copies} copies of {Path(args.source).name}, {n} events, {steps} steps): "
              f"analysed in {dt} s, peak RSS {rss} MB, {nf} findings")


if __name__ == "__main__":
    main()
