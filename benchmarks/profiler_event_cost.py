"""What the profiler costs per recorded CPU event on whole workloads, from the validation library.

Each trace of tests/fixtures/traces/validation has its step time measured without the profiler
(steps.json). Where the step is bound by its CPU, ``perfstack profile --step-ms`` solves the CPU scale
at which the replayed trace takes that time; the CPU time the profiler added per step, divided by the
recorded CPU events per step, is its cost per event on that workload:

    cost per event ≈ (1 − scale) × CPU time per step (profiled) / events per step

A GPU-bound step says nothing of it (the measured time does not depend on the CPU's speed): printed as
"GPU-bound". The calibrated estimate perfstack uses without --step-ms (3 µs, one operator in a loop)
and the other end of its range (7 µs) are in profile/recovery.py; this prints what whole eager
workloads measure, to check them against.

    python benchmarks/profiler_event_cost.py [--lib tests/fixtures/traces/validation]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from perfstack.profile.recovery import PROFILER_US_PER_EVENT, PROFILER_US_PER_EVENT_HIGH
from perfstack.profile.summary import profile_run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", type=Path, default=Path(__file__).parents[1] / "tests/fixtures/traces/validation")
    args = ap.parse_args()
    print(f"{'library':8} {'workload':24} {'variant':8} {'measured ms':>11} {'profiled ms':>11} {'events':>7} "
          f"{'scale':>6} {'µs/event':>9}")
    costs = []
    for steps in sorted(args.lib.glob("*/steps.json")):
        for name, w in json.loads(steps.read_text())["workloads"].items():
            for variant in ("slow", "fixed", "control"):
                v = w.get(variant)
                trace = steps.parent / f"{name}-{variant}.pt.trace.json.gz"
                if not isinstance(v, dict) or "min_ms" not in v or not trace.exists():
                    continue
                p = profile_run([trace], unprofiled_step_ms=v["min_ms"]).profile
                o = p.overhead
                cpu = p.timeline.cpu_step_ms if p.timeline else 0.0
                gpu_bound = o is None or o.fast_cpu_scale is not None or o.cpu_scale >= 1.0
                cost = None if gpu_bound or not p.events_per_step else \
                    (1 - o.cpu_scale) * cpu * 1e3 / p.events_per_step
                if cost is not None:
                    costs.append(cost)
                print(f"{steps.parent.name:8} {name:24} {variant:8} {v['min_ms']:11.2f} {p.step_ms:11.2f} "
                      f"{p.events_per_step:7.0f} {o.cpu_scale if o else 1.0:6.3f} "
                      f"{'GPU-bound' if cost is None else f'{cost:.1f}':>9}", flush=True)
    if costs:
        costs.sort()
        print(f"\n{len(costs)} CPU-bound traces: {costs[0]:.1f} to {costs[-1]:.1f} µs per event, median "
              f"{costs[len(costs) // 2]:.1f}; perfstack's estimate {PROFILER_US_PER_EVENT:g} µs, the other end of its "
              f"range {PROFILER_US_PER_EVENT_HIGH:g} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
