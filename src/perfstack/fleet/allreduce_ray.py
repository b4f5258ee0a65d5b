"""The inter-node all-reduce on Ray: one rank per machine, one Ray task each, pinned to the machine's
Ray node; the analysis (which groups to measure, what is slow) is ``allreduce``.

A group is measured by asking its first machine's node for its IP and a free port, then starting one
task per machine that joins ``torch.distributed`` there (TCP store at that address) and times the
sweep with the collectives benchmark's own per-size routine (``collective_rank.time_size``: result checked,
calls in batches between CUDA events or host clock, the slowest rank's time per sample). With GPUs
on every machine the backend is NCCL on one GPU of each; otherwise gloo on the CPU, which measures
the TCP path between the machines and lets the tests run without GPUs.

A rank that never joins makes the others fail at the rendezvous timeout; a task still running at
the group's deadline is cancelled and its machine named as the one that did not join.
"""

from __future__ import annotations

import os
import socket
import time
from datetime import timedelta
from typing import Any

from perfstack.fleet.allreduce import OP, localize, point
from perfstack.records.fleet import Comms, Group, GroupWhy
from perfstack.fleet.collect import by_machine, machine_runner
from perfstack.fleet.ray_engine import RayNode, _pinned, _reason, locate, nodes

MIB = 1 << 20
SIZES = {"nccl": (MIB, 16 * MIB, 256 * MIB), "gloo": (64 * 1024, MIB)}
BUDGET_S = {"nccl": 0.1, "gloo": 0.2}  # timed seconds per size (collectives' quick budget)
JOIN_TIMEOUT_S = 60.0  # the rendezvous (init_process_group) timeout
FAIL_GRACE_S = 10.0  # after one rank fails, how long the others get before they are cancelled
# Test-only hooks, read from a Ray node's environment; never set in normal use:
DELAY_ENV = "PERFSTACK_TEST_ALLREDUCE_DELAY_S"  # this rank sleeps before each all_reduce (a slow node)
NO_JOIN_ENV = "PERFSTACK_TEST_ALLREDUCE_NO_JOIN"  # this rank never joins the rendezvous


def _address() -> tuple[str, int]:
    """This node's IP as Ray knows it, and a port free on it now (the store binds it moments later)."""
    import ray
    ip = ray.util.get_node_ip_address()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return ip, int(s.getsockname()[1])


class _Delayed:
    """torch.distributed with a sleep before each all_reduce: the tests' slow node (DELAY_ENV)."""

    def __init__(self, dist: Any, delay_s: float) -> None:
        self._dist, self._delay_s = dist, delay_s

    def all_reduce(self, *a: Any, **k: Any) -> Any:
        time.sleep(self._delay_s)
        return self._dist.all_reduce(*a, **k)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dist, name)


def rank_task(rank: int, n: int, addr: str, port: int, backend: str, sizes: list[int], budget_s: float,
              join_timeout_s: float) -> dict[str, Any]:
    """One machine's rank: join, sweep, leave. Rank 0's rows carry the slowest rank's samples."""
    if os.environ.get(NO_JOIN_ENV):
        time.sleep(10 * join_timeout_s + 600)
    import torch
    import torch.distributed as dist

    from perfstack.bench import collective_rank, collectives, timing
    gpu = backend == "nccl"
    if gpu:  # replayed from a graph, as the collectives benchmark's ranks are, with NCCL's setting for it
        # (collectives.GRAPH_ENV says why: 6-16 µs a call otherwise). NCCL reads it when the communicator
        # is made, below; this process is a Ray worker of perfstack's own job. A value the node set is kept.
        for k, v in collectives.GRAPH_ENV.items():
            os.environ.setdefault(k, v)
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    kw: dict[str, Any] = {}
    if gpu:
        torch.cuda.set_device(0)
        kw["device_id"] = device
    dist.init_process_group(backend, init_method=f"tcp://{addr}:{port}", rank=rank, world_size=n,
                            timeout=timedelta(seconds=join_timeout_s), **kw)
    try:
        timer: Any = timing.CudaTimer(torch) if gpu else timing.HostTimer()
        delay = float(os.environ.get(DELAY_ENV) or 0)
        d: Any = _Delayed(dist, delay) if delay > 0 else dist
        cfg = {"budget_s": budget_s, "graph": gpu}
        here = collective_rank.Rank(torch=torch, dist=d, timer=timer, cfg=cfg, rank=rank, n=n, device=device)
        rows = [collective_rank.time_size(here, OP, nbytes) for nbytes in sizes]
        return {"rows": rows, "host": socket.gethostname()}
    finally:
        dist.destroy_process_group()


class RayMeasure:
    """``allreduce.Measure`` on a Ray cluster: machines by key, each run on its runner node."""

    def __init__(self, ray: Any, runners: dict[str, RayNode], backend: str, sizes: tuple[int, ...] | None = None,
                 join_timeout_s: float = JOIN_TIMEOUT_S, budget_s: float | None = None) -> None:
        self.ray, self.runners, self.backend = ray, runners, backend
        self.sizes = list(sizes or SIZES[backend])
        self.join_timeout_s, self.budget_s = join_timeout_s, budget_s or BUDGET_S[backend]

    def deadline_s(self, n: int) -> float:
        # the rendezvous, then per size the warm-up, estimate and budget (a few seconds on gloo)
        return self.join_timeout_s + len(self.sizes) * (self.budget_s * 4 + 10) + 30

    def __call__(self, machines: list[str], why: GroupWhy) -> Group:
        ray, n = self.ray, len(machines)
        g = Group(machines=list(machines), why=why)
        remote_addr = ray.remote(max_retries=0)(_address)
        try:
            addr, port = ray.get(remote_addr.options(**_pinned(self.runners[machines[0]].node_id)).remote(),
                                 timeout=self.join_timeout_s)
        except Exception as e:  # the first machine's node is gone or stuck
            g.error, g.missing = f"no address from its first machine: {_reason(e)}", [machines[0]]
            return g
        task = ray.remote(max_retries=0)(rank_task)
        refs = []
        for r, m in enumerate(machines):
            opts = _pinned(self.runners[m].node_id)
            if self.backend == "nccl" and self.runners[m].gpus:
                opts["num_gpus"] = 1
            refs.append(task.options(**opts).remote(r, n, addr, port, self.backend, self.sizes, self.budget_s,
                                                    self.join_timeout_s))
        results, late = self._collect(refs, n)
        errors = {m: r for m, r in zip(machines, results) if isinstance(r, str)}
        late_m = [machines[i] for i in late]
        if late_m or errors:
            g.missing = late_m
            late_names = ", ".join(self.runners[m].name for m in late_m)
            parts = [f"{late_names} did not join or finish (still running when the others had failed or the "
                     f"deadline of {self.deadline_s(n):g} s passed; cancelled)"] if late_m else []
            parts += [f"{self.runners[m].name}: {e}" for m, e in list(errors.items())[:2]]
            g.error = "; ".join(parts)[:600]
            return g
        first = results[0]
        rows = first["rows"] if isinstance(first, dict) else []
        for row in rows or []:
            if row.get("skipped"):
                continue
            if row.get("wrong_ranks"):
                g.error = f"wrong all-reduce result on ranks {row['wrong_ranks']}"
                return g
            g.points.append(point(row["bytes"], n, row["samples"]))
        if not g.points:
            g.error = "no size was measured"
        return g


    def _collect(self, refs: list[Any], n: int) -> tuple[list[Any], list[int]]:
        """Each rank's answer (its dict, or the reason it failed) and the ranks still running when the
        deadline passed or FAIL_GRACE_S after the first failure (a rank that never joined keeps its
        peers waiting only until their rendezvous timeout); those are cancelled."""
        ray = self.ray
        results: list[Any] = [None] * n
        index = {ref: i for i, ref in enumerate(refs)}
        pending, end = list(refs), time.monotonic() + self.deadline_s(n)
        while pending and time.monotonic() < end:
            ready, pending = ray.wait(pending, num_returns=1, timeout=max(end - time.monotonic(), 0))
            for ref in ready:
                try:
                    results[index[ref]] = ray.get(ref)
                except Exception as e:  # this rank failed; its peers follow, the rest get a grace period
                    results[index[ref]] = _reason(e)
                    end = min(end, time.monotonic() + FAIL_GRACE_S)
        for ref in pending:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # finished meanwhile, or its node gone
                pass
        return results, sorted(index[r] for r in pending)


def backend_for(runners: dict[str, RayNode]) -> str:
    """NCCL where every machine's runner has a GPU (one rank each), else gloo on the CPU."""
    return "nccl" if runners and all(r.gpus or r.gpus_seen for r in runners.values()) else "gloo"


def run(ray: Any, backend: str | None = None, members: list[RayNode] | None = None,
        **measure_kw: Any) -> Comms | None:
    """The fleet's all-reduce, pairs or bisection; None with fewer than two machines."""
    members = members if members is not None else locate(ray, nodes(ray))
    runners = {m: machine_runner(g) for m, g in by_machine(members).items()}
    if len(runners) < 2:
        return None
    backend = backend or backend_for(runners)
    measure = RayMeasure(ray, runners, backend, **measure_kw)
    names = {m: r.name for m, r in runners.items()}
    out = localize(sorted(runners, key=lambda m: names[m]), measure, names, backend)
    if backend == "gloo":
        out.notes.append("gloo on the CPU: the TCP path between the machines, not the GPUs' network (NCCL, "
                         "RDMA)")
    out.notes.append("one rank per machine: the network between machines, not NVLink or PCIe inside one")
    return out
