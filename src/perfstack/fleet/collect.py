"""From a Ray cluster to node summaries: which tasks to run where, and what came back.

``doctor`` runs the doctor once per node. ``bench`` runs the single-GPU benchmarks once per GPU (one
task each, so eight GPUs of a node measure at once and each figure names its GPU), then the node's
own benchmarks (host memory, GPU-to-GPU copies, collectives) once per node, holding all its GPUs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

from perfstack.fleet.jobs import BenchJob, DoctorJob
from perfstack.fleet.ray_engine import NodeResult, RayNode, fan_out, nodes
from perfstack.fleet.summary import NodeSummary, failed, merge, summarize
from perfstack.model import Run


def doctor(ray: Any, job: DoctorJob, timeout_s: float,
           progress: Callable[[NodeResult], None] = lambda _r: None) -> list[NodeResult]:
    return fan_out(ray, job, [(n, None) for n in nodes(ray)], timeout_s, progress)


def bench(ray: Any, suite: str, names: tuple[str, ...], timeout_s: float,
          progress: Callable[[NodeResult], None] = lambda _r: None) -> list[NodeResult]:
    members = nodes(ray)
    gpu_targets: list[tuple[RayNode, int | None]] = [(n, i) for n in members for i in range(n.gpus)]
    results: list[NodeResult] = []
    if gpu_targets and BenchJob(suite, names, "gpu").chosen():
        results += fan_out(ray, BenchJob(suite, names, "gpu"), gpu_targets, timeout_s, progress)
    with_gpus = [n for n in members if n.gpus]
    without = [n for n in members if not n.gpus]
    if with_gpus and BenchJob(suite, names, "node").chosen():
        results += fan_out(ray, BenchJob(suite, names, "node"), [(n, None) for n in with_gpus], timeout_s, progress)
    if without:
        results += fan_out(ray, BenchJob(suite, names, "all"), [(n, None) for n in without], timeout_s, progress)
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
            s = summarize(Run.from_dict(d), res.node, where)
            out[res.node] = merge(out[res.node], s) if res.node in out else s
    return [out[k] for k in sorted(out)]


SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def run_file_name(res: NodeResult, i: int, d: dict[str, Any]) -> str:
    node = SAFE.sub("_", res.node).strip("._") or "node"
    part = f".gpu{res.gpu}" if res.gpu is not None else ("" if d.get("meta", {}).get("command") == "doctor"
                                                          else ".node")
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
            outfile.write(p, Run.from_dict(d).to_json() + "\n")
            written.append(p)
    return written
