"""The fan-out on Ray: one task per node pinned to it, or one per GPU, each with a deadline.

Ray is optional (``pip install 'perfstack[fleet]'``) and imported only here. Each task is pinned to
its node with a hard node-affinity strategy, so a node that is busy makes the fleet wait for it
rather than run its audit somewhere else. A task that fails, a node that dies, a worker without
perfstack, a task past its deadline: each becomes that node's ``NodeResult`` with the reason, and the
other nodes go on. The time from submitting a task to holding its result, less the time the job
itself took on the node, is the fan-out's own overhead, kept per node.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from perfstack.errors import CannotRunHere
from perfstack.fleet.jobs import Target

INSTALL_HINT = "pip install 'perfstack[fleet]' (Ray) on this machine and on every node"


@dataclass
class NodeResult:
    node: str  # the fleet's name for it
    ray_node_id: str
    gpu: int | None = None
    runs: list[dict[str, Any]] = field(default_factory=list)  # Run dicts, with meta.fleet set
    error: str = ""
    job_s: float | None = None  # the job's own time on the node
    overhead_s: float | None = None  # submit -> result, less job_s


@dataclass
class RayNode:
    node_id: str
    name: str
    gpus: int


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise CannotRunHere("Ray is not installed", hint=INSTALL_HINT) from None
    return ray


def connect(address: str | None) -> Any:
    """Join the Ray cluster at ``address`` ("auto": the one this machine belongs to). A cluster this
    process already joined (an embedding program, a test) is used as it is."""
    ray = _ray()
    if ray.is_initialized():
        return ray
    _reachable(address)
    try:
        ray.init(address=address or "auto", logging_level="ERROR", log_to_driver=False, ignore_reinit_error=True)
    except (ConnectionError, RuntimeError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CannotRunHere(f"no Ray cluster at {address or 'auto'}: {first}",
                            hint="start one with 'ray start --head' (and 'ray start --address HEAD:6379' on the "
                                 "other nodes), or give --address HOST:PORT") from None
    return ray


def _reachable(address: str | None, timeout_s: float = 3.0) -> None:
    """Ray retries an unreachable head for minutes before it gives up; a plain TCP connection to a
    HOST:PORT address says within seconds whether anything listens there."""
    if not address or address == "auto" or "://" in address or ":" not in address:
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except ValueError:
        raise CannotRunHere(f"--address {address}: the port is not a number", hint="give HOST:PORT, e.g. head:6379") from None
    except OSError as e:
        raise CannotRunHere(f"no Ray cluster at {address}: {e.strerror or e}",
                            hint="start one with 'ray start --head' on that host, or give the address "
                                 "'ray status' prints there") from None


def nodes(ray: Any) -> list[RayNode]:
    """The cluster's live nodes, named by host name (plus the node id's head where names repeat, as
    with several Ray nodes on one machine)."""
    alive = [n for n in ray.nodes() if n.get("Alive")]
    names = [str(n.get("NodeManagerHostname") or n.get("NodeManagerAddress") or "node") for n in alive]
    out = []
    for n, name in zip(alive, names):
        unique = names.count(name) == 1
        out.append(RayNode(node_id=n["NodeID"], name=name if unique else f"{name}:{n['NodeID'][:8]}",
                           gpus=int(n.get("Resources", {}).get("GPU", 0))))
    return sorted(out, key=lambda r: r.name)


def _reason(e: BaseException) -> str:
    """One line a person can act on, from whatever Ray raised."""
    text = str(e)
    if "No module named 'perfstack" in text:
        return "perfstack is not installed in this node's Python (" + INSTALL_HINT + ")"
    cause = getattr(e, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}".strip().splitlines()[0][:400]
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return (f"{type(e).__name__}: {lines[-1].strip()}" if lines else type(e).__name__)[:400]


def _task(job: Callable[[Target], list], target: Target, node_id: str) -> dict[str, Any]:
    """Runs on the node: the job, its Runs as dicts labelled with the fleet's names, and its time."""
    t0 = time.perf_counter()
    runs = job(target)
    out = []
    for r in runs:
        r.meta["fleet"] = {"node": target.node, "gpu": target.gpu, "ray_node_id": node_id}
        out.append(r.to_dict())
    return {"runs": out, "job_s": time.perf_counter() - t0}


def fan_out(ray: Any, job: Callable[[Target], list], targets: list[tuple[RayNode, int | None]], timeout_s: float,
            progress: Callable[[NodeResult], None] = lambda _r: None) -> list[NodeResult]:
    """Run ``job`` once per (node, GPU or None), all at once; wait at most ``timeout_s`` for each."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote = ray.remote(max_retries=0)(_task)
    pending: dict[Any, tuple[NodeResult, float]] = {}
    for node, gpu in targets:
        opts: dict[str, Any] = {"scheduling_strategy": NodeAffinitySchedulingStrategy(node.node_id, soft=False),
                                "num_cpus": 0}
        if gpu is not None:
            opts["num_gpus"] = 1
        res = NodeResult(node=node.name, ray_node_id=node.node_id, gpu=gpu)
        ref = remote.options(**opts).remote(job, Target(node.name, gpu), node.node_id)
        pending[ref] = (res, time.perf_counter())
    done: list[NodeResult] = []
    deadline = time.perf_counter() + timeout_s
    while pending:
        left = deadline - time.perf_counter()
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=max(left, 0))
        if not ready:
            break
        for ref in ready:
            res, t_submit = pending.pop(ref)
            try:
                out = ray.get(ref)
                res.runs, res.job_s = out["runs"], out["job_s"]
                res.overhead_s = max(0.0, time.perf_counter() - t_submit - res.job_s)
            except Exception as e:  # a RayTaskError, a dead worker or node: this node's failure only
                res.error = _reason(e)
            done.append(res)
            progress(res)
    for ref, (res, _) in pending.items():
        try:
            ray.cancel(ref, force=True)
        except Exception:  # already finishing, or its node gone: nothing left to stop
            pass
        res.error = f"no result within {timeout_s:g} s (hung, or the node is saturated); the task was cancelled"
        done.append(res)
        progress(res)
    return done
