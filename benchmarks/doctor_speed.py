"""How long `perfstack doctor --json` takes next to a bare `python -c "import torch"` on this machine.

    python benchmarks/doctor_speed.py [--rounds 5]

The doctor reads torch's facts in a child interpreter that imports torch, started before the other
probes and running beside them, so on a machine with torch installed its wall time should be close
to the import itself (the bar is 1.1x). Both are measured in one run, alternating, so disk cache
and CPU frequency treat them alike; the first round of each warms the page cache and is dropped.
Prints each time, the medians and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def timed(argv: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    took = time.perf_counter() - t0
    if proc.returncode not in (0, 1):  # 1: findings at or above --fail-on
        sys.exit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-500:]}")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    bare = [sys.executable, "-c", "import torch"]
    doctor = [sys.executable, "-m", "perfstack", "doctor", "--json", "--fail-on", "never", "-q"]
    if subprocess.run(bare, capture_output=True, check=False).returncode != 0:
        print("torch does not import in this interpreter: nothing to compare with", file=sys.stderr)
        return 3
    timed(doctor)  # warm the page cache for both (torch's files are shared)
    imports, doctors = [], []
    for i in range(args.rounds):
        imports.append(timed(bare))
        doctors.append(timed(doctor))
        print(f"round {i + 1}: import torch {imports[-1]:.2f} s, doctor {doctors[-1]:.2f} s", flush=True)
    a, b = statistics.median(imports), statistics.median(doctors)
    print(f"median: import torch {a:.2f} s, perfstack doctor --json {b:.2f} s, ratio {b / a:.2f}x (bar 1.10x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
