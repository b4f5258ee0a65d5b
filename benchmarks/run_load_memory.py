"""Peak memory of loading a saved Run, per MiB of the file: what sets jsonload.MAX_FILE_BYTES.

Writes a load-test Run of the sizes given (the kind of Run that grows largest: one record per request,
one number per streamed chunk), then loads each in a fresh process (``perfstack report FILE --format json``
to /dev/null, the whole path a user's command takes) and prints its peak RSS and the ratio to the file's size.

    PYTHONPATH=src python benchmarks/run_load_memory.py 16 64 128
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from perfstack.loadtest.metrics import summarize
from perfstack.records.loadtest import Level, LoadTest, Request
from perfstack.model import Run
from perfstack.records.meta import run_meta

MEASURE = ("import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, rc)")


SHAPES = {"many requests": 500, "short requests": 4, "one long list": 0}


def make(path: Path, mib: float, shape: str) -> int:
    """Requests of 500 chunks each, of 4 (a record per few numbers: the most objects per byte), or one
    request whose stream never ended (one long list)."""
    rng = random.Random(0)
    reqs, approx = [], 0
    per = SHAPES[shape] or int(mib * 2**20 / 8)
    while approx < mib * 2**20:
        itl = [round(rng.uniform(5, 40), 3) for _ in range(per)]
        reqs.append(Request(start_s=rng.random() * 100, ttft_ms=rng.uniform(50, 500), e2e_ms=sum(itl) + 100,
                            itl_ms=itl, output_tokens=501, input_tokens=512))
        approx += per * 8 + 150
    level = Level(mode="concurrency", load=64, requests=reqs, summary=summarize(reqs, None))
    run = Run(meta=run_meta("loadtest", source="http://127.0.0.1:8000"))
    run.loadtest = LoadTest(url="http://127.0.0.1:8000", api="chat", model="m", workload={}, levels=[level])
    run.save(path)
    return path.stat().st_size


def main(sizes: list[float]) -> None:
    env = dict(os.environ)
    env.setdefault("PYTHONPATH", str(Path(__file__).parents[1] / "src"))
    with tempfile.TemporaryDirectory() as d:
        for mib, shape in ((m, s) for m in sizes for s in SHAPES):
            p = Path(d) / f"run-{mib:g}.json"
            size = make(p, mib, shape)
            out = subprocess.run([sys.executable, "-c", MEASURE, sys.executable, "-m", "perfstack", "report", str(p),
                                  "--format", "json"], env=env, capture_output=True, text=True).stdout.split()
            rss, rc = int(out[0]), int(out[1])
            print(f"Run of {size / 2**20:6.1f} MiB ({shape}): peak RSS {rss:6d} MiB ({rss / (size / 2**20):.1f}x the file), exit {rc}")


if __name__ == "__main__":
    main([float(x) for x in sys.argv[1:]] or [16, 64])
