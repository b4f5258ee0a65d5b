"""How long `perfstack doctor --json` takes on this machine, with and without torch visible.

    python benchmarks/doctor_speed.py [--runs 7]

Prints the median and spread of wall time for each case. "without torch" runs the same
interpreter with torch hidden (a sitecustomize that blocks the import), so the difference is
what the Python-stack probe's torch import costs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BLOCK_TORCH = """
import importlib.abc, sys
class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch hidden by benchmarks/doctor_speed.py")
sys.meta_path.insert(0, _Block())
"""


def time_doctor(env: dict[str, str], runs: int) -> list[float]:
    samples = []
    for _ in range(runs + 1):  # the first run warms the page cache and is dropped
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "perfstack", "doctor", "--json", "--fail-on", "never"],
                       env=env, stdout=subprocess.DEVNULL, check=True)
        samples.append(time.perf_counter() - t0)
    return samples[1:]


def report(name: str, s: list[float]) -> None:
    q = statistics.quantiles(s, n=10) if len(s) > 2 else [min(s)] * 9
    print(f"{name:<16} median {statistics.median(s):.3f} s   p10 {q[0]:.3f}   p90 {q[-1]:.3f}   (n={len(s)})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    with tempfile.TemporaryDirectory() as d:
        Path(d, "sitecustomize.py").write_text(BLOCK_TORCH)
        hidden = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [d, os.environ.get("PYTHONPATH")])))
        report("without torch", time_doctor(hidden, args.runs))
    if have_torch:
        report("with torch", time_doctor(dict(os.environ), args.runs))
    else:
        print("with torch       (torch is not installed here)")
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
