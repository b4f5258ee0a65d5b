"""From a Ray cluster to node summaries: which tasks to run where, and what came back.

``doctor`` runs the doctor once per Ray node: each node's environment is its own, even where several
share a machine. ``bench`` measures each machine under the same conditions, however many Ray nodes it
hosts (a node per GPU, a local test cluster), so that figures are compared like with like:

1. the GPU-only benchmarks (``jobs.part_of``: GEMM, HBM) on every GPU Ray knows, all at once: they do
   not share anything between GPUs;
2. the single-GPU benchmarks whose figures depend on the host (host copies, launch from Python) on
   the same GPUs, one GPU of a machine at a time (machines in parallel): run together, the GPUs of a
   machine would compete for its CPUs, memory and PCIe root, and each figure would depend on what the
   others did at that moment;
3. the machine's own benchmarks (CPU memory and GEMM, GPU-to-GPU copies, NCCL over its GPUs) once
   per machine, on its Ray node that sees the most GPUs; a machine whose nodes offer Ray no GPU runs
   every benchmark there instead.

The stages run one after the other, so nothing of the fleet's own runs beside a host-bound figure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from perfstack import redact
from perfstack.fleet.jobs import BenchJob, DoctorJob, Part
from perfstack.fleet.ray_engine import NodeResult, RayNode, fan_out, locate, nodes
from perfstack.fleet.summary import NodeSummary, failed, merge, summarize
from perfstack.model import Run


def doctor(ray: Any, job: DoctorJob, timeout_s: float,
           progress: Callable[[NodeResult], None] = lambda _r: None) -> list[NodeResult]:
    return fan_out(ray, job, [(n, None) for n in locate(ray, nodes(ray))], timeout_s, progress)


@dataclass(frozen=True)
class Stage:
    part: Part
    targets: list[tuple[RayNode, int | None]]
    one_per_machine: bool = False


def by_machine(members: list[RayNode]) -> dict[str, list[RayNode]]:
    out: dict[str, list[RayNode]] = {}
    for n in members:
        out.setdefault(n.machine or f"ray-node-{n.node_id}", []).append(n)
    return out


def machine_runner(group: list[RayNode]) -> RayNode:
    """The Ray node that runs a machine's own benchmarks: the one whose tasks see the most GPUs (a
    node given one GPU sees one; a node without CUDA_VISIBLE_DEVICES sees them all), then the one
    offering Ray the most, then the first by name."""
    return max(sorted(group, key=lambda n: n.name), key=lambda n: (n.gpus_seen, n.gpus))


def plan(members: list[RayNode]) -> list[Stage]:
    """The bench stages over located nodes, in the order they run."""
    gpus: list[tuple[RayNode, int | None]] = [(n, i) for n in members for i in range(n.gpus)]
    machines = by_machine(members)
    with_gpus = [machine_runner(g) for g in machines.values() if any(n.gpus for n in g)]
    without = [machine_runner(g) for g in machines.values() if not any(n.gpus for n in g)]
    return [Stage("gpu", gpus), Stage("gpu-host", gpus, one_per_machine=True),
            Stage("node", [(n, None) for n in with_gpus]), Stage("all", [(n, None) for n in without])]


def bench(ray: Any, suite: str, names: tuple[str, ...], timeout_s: float,
          progress: Callable[[NodeResult], None] = lambda _r: None,
          job_for: Callable[[Part], Callable[..., Any] | None] | None = None) -> list[NodeResult]:
    """The stages of ``plan``; ``job_for(part)`` is the job of a part, or None where the suite has
    nothing in it (default: ``BenchJob``)."""
    def bench_job(part: Part) -> BenchJob | None:
        job = BenchJob(suite, names, part)
        return job if job.chosen() else None
    job_for = job_for or bench_job
    results: list[NodeResult] = []
    for stage in plan(locate(ray, nodes(ray))):
        job = job_for(stage.part) if stage.targets else None
        if job is not None:
            results += fan_out(ray, job, stage.targets, timeout_s, progress, stage.one_per_machine)
    return results


def summaries(results: list[NodeResult]) -> list[NodeSummary]:
    """One summary per node: its Runs merged, or its failure (one failed GPU task fails the node's
    figures: a partial node would read as a healthy one with fewer GPUs)."""
    out: dict[str, NodeSummary] = {}
    for res in results:
        where = f"ray node {res.ray_node_id[:12]}" + (f" gpu{res.gpu}" if res.gpu is not None else "")
        if res.error:
            s = failed(res.node, (f"gpu{res.gpu}: " if res.gpu is not None else "") + res.error, where)
            out[res.node] = merge(out[res.node], s) if res.node in out else s
            continue
        for d in res.runs:
            s = summarize(redact.scrub_run(Run.from_dict(d)), res.node, where)  # again, as read: a node is not ours
            out[res.node] = merge(out[res.node], s) if res.node in out else s
    return [out[k] for k in sorted(out)]


SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def run_file_name(res: NodeResult, i: int, d: dict[str, Any]) -> str:
    node = SAFE.sub("_", res.node).strip("._") or "node"
    if res.gpu is not None:  # a GPU's GPU-only and host-bound figures come from two tasks: two files
        part = f".gpu{res.gpu}" + (".host" if res.part == "gpu-host" else "")
    else:
        part = "" if d.get("meta", {}).get("command") == "doctor" else ".node"
    return f"{node}{part}{f'.{i}' if i else ''}.json"


def save_runs(results: list[NodeResult], directory: str | Path) -> list[Path]:
    """Every node's Runs as ordinary Run files, ``perfstack fleet report DIR`` reads them back."""
    from perfstack import outfile
    out_dir = Path(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for res in results:
        for i, d in enumerate(res.runs):
            p = out_dir / run_file_name(res, i, d)
            outfile.write(p, redact.scrub_run(Run.from_dict(d)).to_json() + "\n")
            written.append(p)
    return written
