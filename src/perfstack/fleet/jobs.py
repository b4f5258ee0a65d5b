"""What runs on each node: the doctor, or the benchmarks of one GPU or of the node.

A job is a picklable callable of a ``Target`` returning the Runs it made. It runs in a Ray worker on
the node (or anywhere else a scheduler puts it) and reads the machine through the live host, exactly
as ``perfstack doctor`` and ``perfstack bench`` do there.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfstack.model import Run


@dataclass(frozen=True)
class Target:
    node: str  # the name the fleet report uses
    gpu: int | None = None  # the GPU a per-GPU task was given (Ray sets CUDA_VISIBLE_DEVICES to it)


@dataclass(frozen=True)
class DoctorJob:
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()

    def __call__(self, target: Target) -> list[Run]:
        from perfstack.audit import audit
        from perfstack.host.live import LiveHost
        from perfstack.rules import select_checks
        return [audit(LiveHost(), select_checks(self.select, self.ignore), "live machine")]


@dataclass(frozen=True)
class BenchJob:
    """The benchmarks of one GPU (part "gpu": every single-GPU benchmark of the suite, on the one device
    the task sees), of the node ("node": the host benchmarks and those needing several GPUs), or all of
    them ("all": a node that offers Ray no GPU)."""

    suite: str = "quick"
    names: tuple[str, ...] = ()
    part: str = "gpu"

    def chosen(self) -> list:
        from perfstack import bench as benches
        chosen = benches.select(list(self.names), self.suite, None)
        single = [b for b in chosen if b.needs_cuda and b.min_gpus <= 1]
        if self.part == "gpu":
            return single
        return chosen if self.part == "all" else [b for b in chosen if b not in single]

    def __call__(self, target: Target) -> list[Run]:
        from perfstack import bench as benches
        from perfstack.audit import audit
        from perfstack.host.live import LiveHost
        from perfstack.rules import select_checks
        from perfstack.rules.measured import MEASURED
        chosen = self.chosen()
        if not chosen:
            return []

        def run_benches(facts):  # device 0: the only one a per-GPU task sees
            return benches.run(chosen, benches.BenchContext(suite=self.suite, facts=facts, device=0))
        return [audit(LiveHost(), select_checks(list(MEASURED)), "live machine", bench=run_benches, command="bench")]
