"""What runs on each node: the doctor, or the benchmarks of one GPU or of the node.

A job is a picklable callable of a ``Target`` returning the Runs it made. It runs in a Ray worker on
the node (or anywhere else a scheduler puts it) and reads the machine through the live host, exactly
as ``perfstack doctor`` and ``perfstack bench`` do there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from perfstack.model import Facts, Measurement, Run

if TYPE_CHECKING:  # perfstack.bench is imported where a job runs, as perfstack bench does
    from perfstack.bench import Benchmark


@dataclass(frozen=True)
class Target:
    node: str  # the name the fleet report uses
    gpu: int | None = None  # the GPU a per-GPU task was given (Ray sets CUDA_VISIBLE_DEVICES to it)
    machine: str = ""  # the machine the node runs on (ray_engine.machine_key); Ray nodes may share one


@dataclass(frozen=True)
class DoctorJob:
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()

    def __call__(self, target: Target) -> list[Run]:
        from perfstack.audit import audit
        from perfstack.host.live import LiveHost
        from perfstack.rules import select_checks
        return [audit(LiveHost(), select_checks(self.select, self.ignore), "live machine")]


# The parts of a suite, by what each benchmark declares (``Benchmark.host_bound``, ``min_gpus``):
#   "gpu"       single-GPU benchmarks that only use the GPU (GEMM, HBM): every GPU of a machine at once;
#   "gpu-host"  single-GPU benchmarks whose figures depend on the host too (host copies, launches from
#               Python): one GPU of a machine at a time, so that no other work shares its CPUs and memory;
#   "node"      the machine's own (CPU memory and GEMM, GPU-to-GPU copies, NCCL over its GPUs): once
#               per machine, however many Ray nodes it hosts;
#   "all"       every benchmark, once per machine, where no Ray node of the machine offers Ray a GPU.
Part = Literal["gpu", "gpu-host", "node", "all"]
PARTS: tuple[Part, ...] = ("gpu", "gpu-host", "node", "all")


def part_of(b: Benchmark) -> Part:
    if b.needs_cuda and b.min_gpus <= 1:
        return "gpu-host" if b.host_bound else "gpu"
    return "node"


@dataclass(frozen=True)
class BenchJob:
    """The benchmarks of one part of the suite (``PARTS``): of one GPU, on the one device the task sees,
    or of the machine."""

    suite: str = "quick"
    names: tuple[str, ...] = ()
    part: Part = "gpu"

    def chosen(self) -> list[Benchmark]:
        from perfstack import bench as benches
        chosen = benches.select(list(self.names), self.suite, None)
        return chosen if self.part == "all" else [b for b in chosen if part_of(b) == self.part]

    def __call__(self, target: Target) -> list[Run]:
        from perfstack import bench as benches
        from perfstack.audit import audit
        from perfstack.host.live import LiveHost
        from perfstack.rules import select_checks
        from perfstack.rules.measured import MEASURED
        chosen = self.chosen()
        if not chosen:
            return []

        def run_benches(facts: Facts) -> list[Measurement]:  # device 0: the only one a per-GPU task sees
            return benches.run(chosen, benches.BenchContext(suite=benches.suite_named(self.suite), facts=facts, device=0))
        return [audit(LiveHost(), select_checks(list(MEASURED)), "live machine", bench=run_benches, command="bench")]
