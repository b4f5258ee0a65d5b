"""Several Ray nodes on one machine: fleet bench measures each machine under the same conditions.

The benchmarks say which of them depend on the host (``host_bound``); fleet bench runs GPU-only ones on
every GPU at once, host-bound per-GPU ones one GPU of a machine at a time, and the machine's own once
per machine, however many Ray nodes share it. The Ray tests give simulated nodes a machine through
PERFSTACK_FLEET_MACHINE (all of them run on this one box) and a stand-in job that records when and
where each task ran.
"""

from __future__ import annotations

import os
import sys
import time

import pytest
from fixtures.ray_cluster import local_cluster

from perfstack import bench as benches
from perfstack.fleet import analyze
from perfstack.fleet.collect import plan
from perfstack.fleet.jobs import BenchJob, Target, part_of
from perfstack.fleet.ray_engine import MACHINE_ENV, RayNode, gpus_seen, machine_key
from perfstack.fleet.summary import summarize
from perfstack.model import Run
from perfstack.records.meta import FleetLabel, RunMeta


def _node(name: str, machine: str, gpus: int, seen: int) -> RayNode:
    return RayNode(node_id=f"id-{name}", name=name, gpus=gpus, machine=machine, gpus_seen=seen)


def test_each_benchmark_declares_whether_it_depends_on_the_host():
    parts = {name: part_of(b) for name, b in benches.load().items()}
    assert parts["gemm"] == parts["hbm"] == "gpu"  # GPU-only: every GPU at once
    assert parts["h2d"] == parts["d2h"] == parts["launch"] == "gpu-host"  # host copies, launch from Python
    assert parts["host"] == parts["p2p"] == parts["collectives"] == parts["storage"] == "node"
    quick = {p: [b.name for b in BenchJob("quick", (), p).chosen()] for p in ("gpu", "gpu-host", "node")}
    assert quick == {"gpu": ["gemm", "hbm"], "gpu-host": ["h2d", "d2h", "launch"], "node": ["p2p", "host"]}


def test_a_machine_with_several_ray_nodes_runs_its_own_benchmarks_once():
    # the 2-GPU check: a head without Ray GPUs that sees both GPUs, one node per GPU; plus a second
    # machine with one Ray node of two GPUs and a CPU-only machine of two Ray nodes
    members = [_node("head", "m1", 0, 2), _node("gpu0", "m1", 1, 1), _node("gpu1", "m1", 1, 1),
               _node("big", "m2", 2, 2), _node("cpu-a", "m3", 0, 0), _node("cpu-b", "m3", 0, 0)]
    stages = {s.part: s for s in plan(members)}
    slots = [(n.name, g) for n, g in stages["gpu"].targets]
    assert slots == [("gpu0", 0), ("gpu1", 0), ("big", 0), ("big", 1)]
    assert [(n.name, g) for n, g in stages["gpu-host"].targets] == slots
    assert stages["gpu-host"].one_per_machine and not stages["gpu"].one_per_machine
    # once per machine: on the node that sees both GPUs of m1 (so GPU-to-GPU figures cover them)
    assert [n.name for n, _ in stages["node"].targets] == ["head", "big"]
    assert [n.name for n, _ in stages["all"].targets] == ["cpu-a"]


def test_machine_key_is_the_kernels_boot_unless_the_operator_names_it(monkeypatch):
    monkeypatch.delenv(MACHINE_ENV, raising=False)
    key = machine_key()
    assert key and key == machine_key()  # one machine, one key
    monkeypatch.setenv(MACHINE_ENV, "rack3-host7")
    assert machine_key() == "rack3-host7"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert gpus_seen() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,-1,2")  # CUDA stops at the first invalid entry
    assert gpus_seen() == 1


def test_the_report_says_which_ray_nodes_shared_a_machine():
    def run(node: str, machine: str) -> tuple[str, Run]:
        return node, Run(meta=RunMeta(command="bench", tool_version="0.1.0",
                                       fleet=FleetLabel(node=node, machine=machine)))
    a = analyze(summarize(r, n) for n, r in (run("a", "m1"), run("b", "m1"), run("c", "m2")))
    shared = [n for n in a.notes if "Ray nodes on one machine" in n]
    assert len(shared) == 1 and shared[0].startswith("a, b: 2 Ray nodes on one machine (m1)")
    assert {m.name: m.machine for m in a.members} == {"a": "m1", "b": "m1", "c": "m2"}


# -- on a Ray cluster of simulated nodes --------------------------------------------------------------

class Recorder:
    """Stands in for a part of the suite: sleeps, and says where and when it ran."""

    def __init__(self, part: str, sleep_s: float = 1.5) -> None:
        self.part, self.sleep_s = part, sleep_s

    def __call__(self, target: Target) -> list[Run]:
        t0 = time.time()
        time.sleep(self.sleep_s)
        return [Run(meta=RunMeta(command="bench", tool_version="0.1.0",
                                  extra={"ran": {"part": self.part, "node": target.node, "gpu": target.gpu,
                                                 "machine": os.environ.get(MACHINE_ENV), "t0": t0, "t1": time.time()}}))]


@pytest.fixture(scope="module")
def two_machines():
    # machine A: a head without Ray GPUs and two nodes of two (simulated) GPUs; machine B: one node, one GPU
    nodes = [{"num_cpus": 1, "num_gpus": 2, "env_vars": {MACHINE_ENV: "A"}},
             {"num_cpus": 1, "num_gpus": 2, "env_vars": {MACHINE_ENV: "A"}},
             {"num_cpus": 1, "num_gpus": 1, "env_vars": {MACHINE_ENV: "B"}}]
    with local_cluster(sys.modules[__name__], {"num_cpus": 1, "num_gpus": 0, "env_vars": {MACHINE_ENV: "A"}},
                       nodes) as ray:
        yield ray


def _overlap(a: dict, b: dict) -> bool:
    return a["t0"] < b["t1"] and b["t0"] < a["t1"]


@pytest.mark.ray
@pytest.mark.ray
def test_host_benchmarks_once_per_machine_and_host_bound_ones_one_gpu_at_a_time(two_machines, tmp_path):
    from perfstack.fleet import collect
    results = collect.bench(two_machines, "quick", (), timeout_s=120, job_for=Recorder)
    assert [r.error for r in results if r.error] == []
    ran = [r.runs[0]["meta"]["ran"] for r in results]
    by_part = {p: [x for x in ran if x["part"] == p] for p in ("gpu", "gpu-host", "node", "all")}
    # machine's own benchmarks: once per machine, not once per Ray node (A has three)
    assert sorted(x["machine"] for x in by_part["node"]) == ["A", "B"] and by_part["all"] == []
    # every GPU slot Ray knows gets its GPU-only and its host-bound part
    assert len(by_part["gpu"]) == len(by_part["gpu-host"]) == 5
    on_a = [x for x in by_part["gpu-host"] if x["machine"] == "A"]
    assert len(on_a) == 4
    assert not any(_overlap(x, y) for i, x in enumerate(on_a) for y in on_a[i + 1:]), on_a
    # nothing of the fleet runs beside a host-bound task on its machine
    for x in on_a:
        assert not any(_overlap(x, y) for y in ran if y is not x and y["machine"] == "A")
    # results and saved Runs say where they ran; a GPU's two parts are two files
    assert {r.machine for r in results} == {"A", "B"}
    assert {r.runs[0]["meta"]["fleet"]["machine"] for r in results} == {"A", "B"}
    files = collect.save_runs(results, tmp_path)
    assert len(files) == len(results) == len({f.name for f in files})
    notes = analyze(collect.summaries(results)).notes
    assert any(n.endswith("one GPU at a time") and "2 Ray nodes on one machine (A)" in n for n in notes), notes


@pytest.mark.ray
@pytest.mark.ray
def test_gpu_only_parts_run_on_every_gpu_at_once(two_machines):
    from perfstack.fleet.ray_engine import fan_out, locate, nodes
    members = locate(two_machines, nodes(two_machines))
    assert sorted(n.machine for n in members) == ["A", "A", "A", "B"]
    slots = [(n, i) for n in members for i in range(n.gpus)]
    together = fan_out(two_machines, Recorder("gpu", 3.0), slots, timeout_s=120)
    ran = [r.runs[0]["meta"]["ran"] for r in together]
    # at once, not one after another: the tasks' own start and end times overlap (no wall-clock bound,
    # which a busy test machine could break)
    assert len(ran) == 5 and any(_overlap(x, y) for i, x in enumerate(ran) for y in ran[i + 1:])
