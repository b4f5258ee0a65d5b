"""The fan-out on Ray: one task per node pinned to it, or one per GPU, each with a deadline.

Ray is optional (``pip install 'perfstack[fleet]'``) and imported only here. Each task is pinned to
its node with a hard node-affinity strategy, so a node that is busy makes the fleet wait for it
rather than run its audit somewhere else. A task that fails, a node that dies, a worker without
perfstack, a task past its deadline: each becomes that node's ``NodeResult`` with the reason, and the
other nodes go on. The time from submitting a task to holding its result, less the time the job
itself took on the node, is the fan-out's own overhead, kept per node.

Several Ray nodes can run on one machine (a local test cluster, one Ray node per GPU, containers side
by side): ``locate`` asks each node which machine it is on, so that work whose figures depend on the
host can run once per machine, or one task at a time on it (``fan_out(one_per_machine=True)``).
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from perfstack import redact
from perfstack.extras import install_hint
from perfstack.errors import CannotRunHere
from perfstack.fleet.jobs import Target
from perfstack.records.meta import FleetLabel

INSTALL_HINT = f"{install_hint('fleet')} (Ray) on this machine and on every node"


@dataclass
class NodeResult:
    node: str  # the fleet's name for it
    ray_node_id: str
    gpu: int | None = None
    machine: str = ""
    part: str = ""  # the job's part (jobs.PARTS), for bench
    runs: list[dict[str, Any]] = field(default_factory=list)  # Run dicts, with meta.fleet set
    error: str = ""
    job_s: float | None = None  # the job's own time on the node
    overhead_s: float | None = None  # submit -> result, less job_s


@dataclass
class RayNode:
    node_id: str
    name: str
    gpus: int  # GPUs the node offers Ray
    machine: str = ""  # machine_key() on the node, once located
    gpus_seen: int = 0  # GPUs a task there sees when it asks Ray for none (all of the machine's, unless the
    # node's environment sets CUDA_VISIBLE_DEVICES): the node that sees most runs the machine's benchmarks


MACHINE_ENV = "PERFSTACK_FLEET_MACHINE"


def machine_key() -> str:
    """The machine this process runs on, as a short digest. Ray nodes and containers started side by
    side on one machine share its kernel, so its boot id (/proc/sys/kernel/random/boot_id, new at each
    boot); a container may have a host name and machine-id of its own, so they are only fallbacks.
    PERFSTACK_FLEET_MACHINE in a node's environment overrides: virtual machines on one physical host
    each boot their own kernel, and only their operator knows they share CPUs and memory."""
    given = os.environ.get(MACHINE_ENV, "").strip()
    if given:
        return given
    for path in ("/proc/sys/kernel/random/boot_id", "/etc/machine-id", "/proc/sys/kernel/hostname"):
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read().strip()
        except OSError:
            continue
        if text:
            return hashlib.sha256(f"{path}:{text}".encode()).hexdigest()[:12]
    return socket.gethostname()


def gpus_seen() -> int:
    """CUDA devices this process would see: CUDA_VISIBLE_DEVICES where set (CUDA stops at the first
    entry that is not a device), else every NVIDIA GPU the driver lists."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        n = 0
        for entry in visible.split(","):
            if not entry.strip() or entry.strip().startswith("-"):
                break
            n += 1
        return n
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


def _where() -> dict[str, Any]:
    return {"machine": machine_key(), "gpus_seen": gpus_seen()}


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise CannotRunHere("Ray is not installed", hint=INSTALL_HINT) from None
    return ray


CONNECT_TIMEOUT_S = 60.0  # joining a cluster that answers takes seconds; Ray alone would retry for minutes
NAME_ANOTHER = "--address HOST:PORT (or RAY_ADDRESS) names another cluster"


@dataclass(frozen=True)
class Cluster:
    address: str  # what is handed to ray.init: HOST:PORT, ray://HOST:PORT, or "auto"
    found: str  # where the address came from, for the user


def find_cluster(address: str | None, environ: Any = os.environ) -> Cluster:
    """The cluster ``--address`` names, as Ray would resolve it, without joining it: a given address as
    it is; for "auto", RAY_ADDRESS, then the address the last 'ray start' on this machine wrote in
    Ray's temporary folder (RAY_TMPDIR, default /tmp, then ray/ray_current_cluster); else "auto", for
    Ray to look for a cluster running on this machine."""
    given = (address or "auto").strip()
    if given != "auto":
        return Cluster(given, "given with --address")
    env = str(environ.get("RAY_ADDRESS", "")).strip()
    if env and env != "auto":
        return Cluster(env, "from RAY_ADDRESS")
    current = Path(environ.get("RAY_TMPDIR") or "/tmp") / "ray" / "ray_current_cluster"
    try:
        recorded = current.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        recorded = []
    if recorded and recorded[0].strip():
        return Cluster(recorded[0].strip(), f"recorded by the last 'ray start' on this machine in {current}")
    return Cluster("auto", "a Ray cluster running on this machine")


def connect(address: str | None, timeout_s: float | None = None,
            runtime_env: Callable[[], dict[str, Any] | None] = lambda: None) -> tuple[Any, Cluster]:
    """Join the Ray cluster ``address`` names ("auto": see ``find_cluster``), each step bounded: a TCP
    connection to its head within seconds, the join itself within ``timeout_s``; the job's runtime
    environment (``ship.runtime_env``: how perfstack reaches the nodes) is made once the head answers. A
    cluster this process already joined (an embedding program, a test) is used as it is."""
    ray = _ray()
    if ray.is_initialized():
        try:
            joined = str(ray.get_runtime_context().gcs_address)
        except Exception:  # an older Ray without it: the address is only for the user
            joined = "auto"
        return ray, Cluster(joined, "the cluster this process already joined")
    cluster = find_cluster(address)
    _reachable(cluster)
    _join(ray, cluster, CONNECT_TIMEOUT_S if timeout_s is None else timeout_s, runtime_env())
    return ray, cluster


def _join(ray: Any, cluster: Cluster, timeout_s: float, env: dict[str, Any] | None = None) -> None:
    """ray.init, in a daemon thread given ``timeout_s``: a head that accepts connections but never
    answers (a hung or half-started cluster) would hold Ray's own retries for minutes."""
    import threading

    done: dict[str, BaseException | None] = {}

    def init() -> None:
        # Ray lets RAY_ADDRESS override the address it is given; the one found here is the one meant.
        if os.environ.get("RAY_ADDRESS", "") not in ("", cluster.address):
            os.environ["RAY_ADDRESS"] = cluster.address
        try:
            ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False, ignore_reinit_error=True,
                     **({"runtime_env": env} if env else {}))
            done["error"] = None
        except BaseException as e:  # handed to the caller's thread below
            done["error"] = e

    t = threading.Thread(target=init, name="perfstack-ray-connect", daemon=True)
    t.start()
    t.join(timeout_s)
    where = f"{cluster.address} ({cluster.found})"
    if "error" not in done:
        raise CannotRunHere(f"the Ray cluster at {where} did not answer within {timeout_s:g} s",
                            hint=f"check it with 'ray status' on its head; {NAME_ANOTHER}")
    e = done["error"]
    if isinstance(e, (ConnectionError, RuntimeError, ValueError)):
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CannotRunHere(f"no Ray cluster at {where}: {first}",
                            hint="start one with 'ray start --head' (and 'ray start --address HEAD:6379' on the "
                                 f"other nodes); {NAME_ANOTHER}") from None
    if e is not None:
        raise e


def _reachable(cluster: Cluster, timeout_s: float = 3.0) -> None:
    """Ray retries an unreachable head for minutes before it gives up; a plain TCP connection to its
    HOST:PORT says within seconds whether anything listens there."""
    address = cluster.address.split("://", 1)[-1].rstrip("/")
    if address == "auto" or ":" not in address:
        return
    host, _, port = address.rpartition(":")
    where = f"{cluster.address} ({cluster.found})"
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except ValueError:
        raise CannotRunHere(f"Ray cluster address {where}: the port is not a number",
                            hint="give HOST:PORT, e.g. head:6379") from None
    except OSError as e:
        raise CannotRunHere(f"no Ray cluster at {where}: {e.strerror or e}",
                            hint="start one with 'ray start --head' on that host, or give the address "
                                 f"'ray status' prints there; {NAME_ANOTHER}") from None


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


def _pinned(node_id: str) -> dict[str, Any]:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    # num_cpus=0: a task never waits for CPUs that the node's other work holds
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False), "num_cpus": 0}


def locate(ray: Any, members: list[RayNode], timeout_s: float = 60.0) -> list[RayNode]:
    """Each node with its machine and the GPUs a task there sees, asked of the node itself (Ray's node
    table has its address, which several nodes of one machine may share and one machine with several
    interfaces may not). A node that does not answer is a machine of its own: its tasks will fail with
    the reason."""
    remote = ray.remote(max_retries=0)(_where)
    refs = [remote.options(**_pinned(n.node_id)).remote() for n in members]
    ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    out = []
    for n, ref in zip(members, refs):
        try:
            where = ray.get(ref, timeout=0)
        except Exception:  # no answer in time, or the node is gone
            try:
                ray.cancel(ref, force=True)
            except Exception:  # finished meanwhile, or the node is gone
                pass
            where = {"machine": f"ray-node-{n.node_id[:12]}", "gpus_seen": 0}
        out.append(replace(n, machine=str(where["machine"]), gpus_seen=int(where["gpus_seen"])))
    return out


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


def _task(job: Callable[[Target], list[Any]], target: Target, node_id: str) -> dict[str, Any]:
    """Runs on the node: the job, its Runs as dicts labelled with the fleet's names, and its time."""
    t0 = time.perf_counter()
    runs = job(target)
    out = []
    for r in runs:
        redact.scrub_run(r)  # on the node, before anything leaves it
        r.meta.fleet = FleetLabel(node=target.node, gpu=target.gpu, ray_node_id=node_id, machine=target.machine,
                                  part=getattr(job, "part", None))
        out.append(r.to_dict())
    return {"runs": out, "job_s": time.perf_counter() - t0}


def fan_out(ray: Any, job: Callable[[Target], list[Any]], targets: list[tuple[RayNode, int | None]], timeout_s: float,
            progress: Callable[[NodeResult], None] = lambda _r: None, one_per_machine: bool = False) -> list[NodeResult]:
    """Run ``job`` once per (node, GPU or None): all at once, or with ``one_per_machine`` one task at a
    time on each machine (in the order given; machines in parallel). Each task gets ``timeout_s`` from
    its submission, and a task waiting for its turn on its machine is not submitted yet."""
    lanes: dict[str, deque[tuple[RayNode, int | None]]] = {}
    for i, (node, gpu) in enumerate(targets):
        lanes.setdefault(node.machine if one_per_machine else str(i), deque()).append((node, gpu))
    remote = ray.remote(max_retries=0)(_task)
    part = str(getattr(job, "part", "") or "")
    pending: dict[Any, tuple[NodeResult, float, str]] = {}
    done: list[NodeResult] = []

    def submit(lane: str) -> None:
        if not lanes[lane]:
            return
        node, gpu = lanes[lane].popleft()
        opts = _pinned(node.node_id)
        if gpu is not None:
            opts["num_gpus"] = 1
        res = NodeResult(node=node.name, ray_node_id=node.node_id, gpu=gpu, machine=node.machine, part=part)
        ref = remote.options(**opts).remote(job, Target(node.name, gpu, node.machine), node.node_id)
        pending[ref] = (res, time.perf_counter(), lane)

    def finish(ref: Any, error: str = "") -> None:
        res, t_submit, lane = pending.pop(ref)
        if error:
            res.error = error
        else:
            try:
                out = ray.get(ref)
                res.runs, res.job_s = out["runs"], out["job_s"]
                res.overhead_s = max(0.0, time.perf_counter() - t_submit - res.job_s)
            except Exception as e:  # a RayTaskError, a dead worker or node: this node's failure only
                res.error = _reason(e)
        done.append(res)
        progress(res)
        submit(lane)

    for lane in list(lanes):
        submit(lane)
    while pending:
        first_deadline = min(t + timeout_s for _, t, _ in pending.values())
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=max(first_deadline - time.perf_counter(), 0))
        for ref in ready:
            finish(ref)
        now = time.perf_counter()
        for ref in [r for r, (_, t, _) in pending.items() if now - t >= timeout_s]:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # already finishing, or its node gone: nothing left to stop
                pass
            finish(ref, f"no result within {timeout_s:g} s (hung, or the node is saturated); the task was cancelled")
    return done
