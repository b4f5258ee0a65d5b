"""What each rank of the collectives benchmark runs, in its own process (one per GPU): the worker
entry point, the direct or torch.distributed call of each collective, and the timing of one op at one
size (``time_size``, also the fleet's all-reduce between machines). The parent side, the sizes and
the arithmetic are in ``collectives``; the module docstring there says how a size is timed."""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from datetime import timedelta
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from perfstack.bench import _gpu, batched, nccl_lib, timing
from perfstack.bench.collectives import (ELEM, buffer_elems, bytes_needed, correct, count_for,
                                         make_input)

MIN_REPS, MAX_REPS = 20, 500  # batches
WARMUP_CALLS = 5  # eager calls before the estimate (NCCL connects lazily; the first calls set up channels)
PROBE_OPS = 8  # calls in the batches that estimate one call's time


def call(dist: Any, op: str, inp: Any, out: Any) -> Any:
    """Issue one collective; returns the tensor holding this rank's result."""
    if op == "all_reduce":
        dist.all_reduce(inp)
        return inp
    if op == "all_gather":
        dist.all_gather_into_tensor(out, inp)
        return out
    if op == "reduce_scatter":
        dist.reduce_scatter_tensor(out, inp)
        return out
    if op == "all_to_all":
        dist.all_to_all_single(out, inp)
        return out
    if op == "broadcast":
        dist.broadcast(inp, src=0)
        return inp
    if op == "sendrecv":
        r, n = dist.get_rank(), dist.get_world_size()
        for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, inp, (r + 1) % n),
                                         dist.P2POp(dist.irecv, out, (r - 1) % n)]):
            w.wait()
        return out
    raise ValueError(f"unknown collective {op}")


def direct(torch: Any, comm: nccl_lib.Comm, op: str, inp: Any, out: Any) -> Callable[[], Any]:
    """The call of ``op`` made straight to NCCL on ``comm`` (see nccl_lib), on whatever stream is current
    when it is issued (a graph capture has its own); returns a function that issues one call and gives
    the tensor holding this rank's result. Pointers and counts are worked out once, not per call."""
    # Looking the current stream up costs 5-9 µs a call, as much as NCCL's own launch: eager calls use
    # the stream current now (the one the timer records on); a capture looks up its own.
    cur, capturing = torch.cuda.current_stream, torch.cuda.is_current_stream_capturing
    eager_stream = cur().cuda_stream
    src, count = inp.data_ptr(), inp.numel()
    dst = out.data_ptr() if out is not None else src
    chunk = count // comm.n
    issue: Callable[[int], None] = {
        "all_reduce": lambda s: comm.all_reduce(src, src, count, s),
        "all_gather": lambda s: comm.all_gather(src, dst, count, s),
        "reduce_scatter": lambda s: comm.reduce_scatter(src, dst, chunk, s),
        "all_to_all": lambda s: comm.all_to_all(src, dst, chunk, s),
        "broadcast": lambda s: comm.broadcast(src, src, count, 0, s),
        "sendrecv": lambda s: comm.sendrecv(src, dst, count, s),
    }[op]
    result = inp if out is None else out

    def fn() -> Any:
        issue(cur().cuda_stream if capturing() else eager_stream)
        return result
    return fn


class _Float32Array:
    """A float32 vector at a raw device address, for torch.as_tensor (zero-copy, not owned)."""

    def __init__(self, address: int, length: int) -> None:
        self.__cuda_array_interface__ = {"shape": (length,), "typestr": "<f4", "data": (address, False),
                                         "version": 2}


def nccl_memory(torch: Any, comm: nccl_lib.Comm, tensors: list[Any]) -> tuple[list[Any], list[int], str]:
    """Copies of ``tensors`` (float32 vectors, None kept) in ncclMemAlloc memory (nccl_lib.Library.alloc),
    the addresses to free once nothing uses them, and "" — or the tensors themselves, [] and why not."""
    lib = comm.lib
    held: list[int] = []
    out: list[Any] = []
    try:
        for t in tensors:
            if t is None:
                out.append(None)
                continue
            address = lib.alloc(max(t.numel(), 1) * ELEM)
            held.append(address)
            view = torch.as_tensor(_Float32Array(address, t.numel()), device=t.device)
            view.copy_(t)
            out.append(view)
    except (nccl_lib.NcclError, RuntimeError, TypeError) as e:
        free_nccl_memory(torch, comm, held)
        return tensors, [], f"{type(e).__name__}: {e}"[:200]
    return out, held, ""


def free_nccl_memory(torch: Any, comm: nccl_lib.Comm, held: list[int]) -> None:
    if held:
        torch.cuda.synchronize()
        for address in held:
            comm.lib.free(address)


def open_direct(torch: Any, dist: Any, device: Any, rank: int, n: int) -> tuple[nccl_lib.Comm | None, str]:
    """A communicator of our own on the libnccl torch loaded, opened by every rank, or (None, why not)
    on every rank when any rank cannot: the ranks must all time the same way."""
    lib, why = None, ""
    path = nccl_lib.loaded_path()
    if path is None:
        why = "no libnccl is mapped into the process (NCCL linked into torch?)"
    else:
        try:
            lib = nccl_lib.Library(path)
        except (OSError, AttributeError) as e:
            why = f"{path} could not be bound: {e}"
    able = _flags(torch, dist, lib is not None, device)
    if not all(able):
        return None, why or f"ranks {[r for r, a in enumerate(able) if not a]} could not load libnccl"
    assert lib is not None
    uid = torch.zeros(nccl_lib.ID_BYTES, dtype=torch.uint8, device=device)
    if rank == 0:
        uid.copy_(torch.tensor(list(lib.unique_id()), dtype=torch.uint8))
    dist.broadcast(uid, src=0)
    return lib.open(bytes(uid.tolist()), n, rank), ""


def slowest(per_rank: list[list[float]]) -> list[float]:
    """Per repetition, the slowest rank's time."""
    return [max(x) for x in zip(*per_rank)]


# -- the worker (one process per GPU) -------------------------------------------------------
def worker() -> None:
    """Child entry point: config from PERFSTACK_COLL_CFG, rank from RANK; writes rank<r>.json."""
    cfg = json.loads(Path(os.environ["PERFSTACK_COLL_CFG"]).read_text())
    rank = int(os.environ["RANK"])
    status = Path(cfg["dir"]) / f"rank{rank}.json"
    try:
        results = _work(cfg, rank)
        status.write_text(json.dumps({"ok": True, "results": results}))
    except BaseException as e:  # the parent reports it; never leave the other ranks guessing
        status.write_text(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"[:600],
                                      "traceback": traceback.format_exc()[-2000:]}))
        sys.stderr.flush()
        os._exit(1)  # skip NCCL teardown, which can block on peers that are stuck


def _work(cfg: dict[str, Any], rank: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    n, backend = cfg["world_size"], cfg["backend"]
    gpu = backend == "nccl"
    device = torch.device(f"cuda:{rank}") if gpu else torch.device("cpu")
    kw: dict[str, Any] = {}
    if gpu:
        torch.cuda.set_device(rank)
        kw["device_id"] = device
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{cfg['port']}", rank=rank, world_size=n,
                            timeout=timedelta(seconds=cfg["timeout_s"]), **kw)
    timer: Any = timing.CudaTimer(torch) if gpu else timing.HostTimer()
    v = torch.cuda.nccl.version() if gpu else None
    meta = {"nccl_version": ".".join(map(str, v)) if isinstance(v, tuple) else v, "torch": torch.__version__}
    if cfg.get("fail_rank") == rank:  # the tests' way to check that a failing rank never hangs the run
        raise RuntimeError("injected failure")
    warm = torch.ones(1024, device=device)
    for _ in range(5):
        dist.all_reduce(warm)
    dist.barrier()
    comm = None
    if gpu and cfg.get("via", "nccl") == "nccl":
        comm, why = open_direct(torch, dist, device, rank, n)
        meta["via_why_not_nccl"] = why or None
    meta["via"] = "nccl" if comm else "torch"
    here = Rank(torch=torch, dist=dist, timer=timer, cfg=cfg, rank=rank, n=n, device=device, comm=comm)
    rows = []
    for op in cfg["ops"]:
        for nbytes in cfg["sizes"]:
            rows.append(time_size(here, op, nbytes))
    if comm:
        torch.cuda.synchronize()
        comm.close()
    dist.destroy_process_group()
    return {"meta": meta, "rows": rows}


def gpu_graph(cfg: dict[str, Any], device: Any) -> bool:
    """Whether batches are captured in a CUDA graph: asked for, and on a GPU."""
    return bool(cfg.get("graph", True)) and getattr(device, "type", "cpu") == "cuda"


def _flags(torch: Any, dist: Any, value: bool, device: Any) -> list[bool]:
    """Every rank's boolean, on every rank."""
    t = torch.tensor([1.0 if value else 0.0], device=device)
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t)
    return [bool(x.item()) for x in out]


@dataclass(frozen=True)
class Rank:
    """This rank of a collective run, as every size it times sees it: torch and its process group, the
    timer, the run's settings, where it stands (``rank`` of ``n``, on ``device``) and, when the calls go
    straight to NCCL, its communicator."""

    torch: Any
    dist: Any
    timer: Any
    cfg: dict[str, Any]
    rank: int
    n: int
    device: Any
    comm: Optional[nccl_lib.Comm] = None


def time_size(r: Rank, op: str, nbytes: int) -> dict[str, Any]:
    """One op at one size on this rank, as the module's docstring says: the check, the batch plan from
    rank 0, the timed batches; the row rank 0 reports (its ``samples`` the slowest rank's per batch).
    The calls go straight to NCCL on ``r.comm`` when given, else through ``r.dist``.
    Also the fleet's all-reduce between machines (``fleet.allreduce_ray``), with one rank per machine."""
    torch, dist, rank, n, device, comm = r.torch, r.dist, r.rank, r.n, r.device, r.comm
    count = count_for(nbytes, n)
    row: dict[str, Any] = {"op": op, "requested_bytes": nbytes, "bytes": count * ELEM}
    need = bytes_needed(op, count, n)
    free = int(torch.cuda.mem_get_info(device)[0]) if device.type == "cuda" else None
    fit = _flags(torch, dist, _gpu.fits(need, free), device)
    if not all(fit):
        row["skipped"] = f"ranks {[r for r, f in enumerate(fit) if not f]}: {_gpu.no_room(need, free)}"
        return row
    i_elems, o_elems = buffer_elems(op, count, n)
    inp = make_input(torch, op, rank, n, count, device)
    out = torch.empty(o_elems, device=device) if o_elems else None
    held: list[int] = []
    if comm:
        (inp, out), held, why_not = nccl_memory(torch, comm, [inp, out])
        row["nccl_memory"] = bool(held)
        if why_not:
            row["why_not_nccl_memory"] = why_not
    try:
        return _timed(r, op, count, inp, out, row)
    finally:
        if comm:
            free_nccl_memory(torch, comm, held)


def _timed(r: Rank, op: str, count: int, inp: Any, out: Any, row: dict[str, Any]) -> dict[str, Any]:
    """time_size's check and timed batches on buffers already in place."""
    torch, dist, timer, cfg, rank, n, device, comm = r.torch, r.dist, r.timer, r.cfg, r.rank, r.n, r.device, r.comm
    fn = direct(torch, comm, op, inp, out) if comm else (lambda: call(dist, op, inp, out))
    got = fn()
    good = _flags(torch, dist, correct(torch, op, rank, n, count, got, device), device)
    row["wrong_ranks"] = [r for r, g in enumerate(good) if not g]
    for _ in range(WARMUP_CALLS):
        timer.call(fn)
    probe = batched.Batch(None, fn, PROBE_OPS, graph=False)
    estimate = timing.summarize(batched.per_op(timer.samples(probe, 3, None), PROBE_OPS))["median"]
    ops = batched.ops_per_batch(estimate, cfg.get("batch_s", batched.TARGET_BATCH_S))
    plan = torch.tensor([ops, timing.plan_reps(estimate * ops, cfg["budget_s"], MIN_REPS, MAX_REPS)],
                        dtype=torch.int64, device=device)
    dist.broadcast(plan, src=0)
    ops, reps = (int(x) for x in plan.tolist())
    batch = batched.Batch(torch if gpu_graph(cfg, device) else None, fn, ops, graph=gpu_graph(cfg, device))
    captured = _flags(torch, dist, batch.mode == "graph", device)
    if batch.mode == "graph" and not all(captured):
        batch.drop_graph()
    row.update(ops_per_batch=ops, mode=batch.mode)
    if batch.why_eager or (gpu_graph(cfg, device) and not all(captured)):
        row["why_eager"] = batch.why_eager or f"ranks {[r for r, c in enumerate(captured) if not c]} could not capture"
    timer.call(batch)  # a replay (or batch) before the timed ones
    if batch.mode == "eager":
        issue = batch.issue_seconds(lambda: timer.call(lambda: None))
        row["issue_s_per_op"] = issue / ops
    dist.barrier()
    mine = batched.per_op(timer.samples(batch, reps, None), ops)
    if batch.mode == "graph":  # NCCL deregisters a graph's buffers when the graph goes, before they are freed
        batch.drop_graph()
        torch.cuda.synchronize()
    t = torch.tensor(mine, dtype=torch.float64, device=device)
    every = [torch.empty_like(t) for _ in range(n)]
    dist.all_gather(every, t)
    row["samples"] = slowest([x.tolist() for x in every])
    row["rank0_samples_median"] = timing.summarize(mine)["median"]
    return row
