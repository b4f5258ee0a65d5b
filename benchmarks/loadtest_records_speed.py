"""How long a large load-test Run takes to load, to write, and to cross from a client process to the parent.

The load test's records are the largest a Run holds (one per request, one number per streamed chunk). Loading
checks every one against its annotations (records.base); a level split over client processes comes back to
the parent through msgspec (loadtest/workers.py). This writes the Runs of run_load_memory.py (requests of 500
chunks, and of 4: the most records per byte) and prints, for each: Run.load, Run.to_json, and the msgpack
hand-over of its level both ways.

    PYTHONPATH=src python benchmarks/loadtest_records_speed.py 16

Measured on a shared 2-core machine (Python 3.11; other jobs running, so each figure is the range over several
runs), 16 MiB of requests (the files are larger: indented JSON), before (msgspec Structs, which dropped unknown
keys and rewrote an integer load as a float) and after (records.base):
    500 chunks, 4,043 requests:  load 2.0-2.3 s -> 1.8-2.7 s, to_json 3.4-3.9 s -> 3.0-3.5 s,
                                 hand-over 0.24-0.30 s -> 0.24-0.33 s
    4 chunks, 92,183 requests:   load 1.6-1.9 s -> 2.7-3.0 s, to_json 2.1-2.9 s -> 2.3-4.0 s,
                                 hand-over 0.34-0.41 s -> 0.8-1.3 s
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).parent))
from run_load_memory import make  # noqa: E402

from perfstack.model import Run  # noqa: E402
from perfstack.records.loadtest import Level  # noqa: E402


def best(f, n: int = 2) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def main(sizes: list[float]) -> None:
    with tempfile.TemporaryDirectory() as d:
        for mib in sizes:
            for shape in ("many requests", "short requests"):
                p = Path(d) / "run.json"
                make(p, mib, shape)
                run = Run.load(p)
                assert run.loadtest is not None
                lv = run.loadtest.levels[0]
                packed = msgspec.msgpack.encode(lv)
                load = best(lambda: Run.load(p))
                save = best(run.to_json)
                hand = best(lambda: msgspec.msgpack.decode(msgspec.msgpack.encode(lv), type=Level))
                print(f"{shape:15s} {p.stat().st_size / 2**20:5.1f} MiB, {len(lv.requests):6d} requests: "
                      f"load {load:.2f} s, to_json {save:.2f} s, hand-over {hand:.2f} s ({len(packed) / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main([float(x) for x in sys.argv[1:]] or [16])
