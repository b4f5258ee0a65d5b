"""NCCL collectives over every GPU of this host: all_reduce, all_gather, reduce_scatter, all_to_all,
broadcast and sendrecv, swept over message sizes, reported as time per call and bus bandwidth
(nccl-tests definitions).

perfstack starts one worker process per GPU itself (``python -c`` children on localhost with a free
TCP port); ``init_process_group`` gets a timeout, and the parent kills the remaining workers
shortly after any one fails, so a broken rank yields an error figure, never a hang. The children
run with ``NCCL_NVLS_ENABLE=0`` and ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1`` (NVLink multicast off).

Per op and size S, every rank: checks one result against its analytic value, warms up, and
estimates the time of one call from a short batch. As nccl-tests does, calls are then timed in
batches issued back to back between two CUDA events (``batched``), so that a small message measures
NCCL rather than Python and the launch path; by default each batch is captured once in a CUDA graph
and replayed. The calls go straight to the NCCL library torch loaded, on a communicator the workers
open for the purpose (``nccl_lib``), so that a small message measures what nccl-tests measures and
not torch.distributed's own per-call work; ``via="torch"`` (``--via torch``) times the
torch.distributed calls a training loop makes instead. Rank 0 decides the batch length and the number of batches and broadcasts them (every
rank must issue the same collectives); if any rank cannot capture the graph, all time eagerly. The
time of a batch is the slowest rank's (all ranks' samples are gathered to rank 0), divided by the
calls in it. algbw = S / t; busbw = algbw × factor, where the factor is 2(n−1)/n for all_reduce,
(n−1)/n for all_gather, reduce_scatter and all_to_all, and 1 for broadcast and sendrecv, and S is
the whole array for all_gather / reduce_scatter (per-rank size × n). sendrecv sends each rank's
buffer to the next rank in a ring (to itself with one rank), as nccl-tests' sendrecv_perf.

Sweep figures "collective.<op>.<size>" carry the busbw in GB/s and the time per call in µs; small
sizes are judged by their latency and large ones by bandwidth (``regime``). "collective.<op>.best"
is the best busbw of the sweep and "collective.<op>.latency" the time per call at the smallest size.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from functools import partial
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

from perfstack.bench import BenchContext, Suite, _gpu, batched, benchmark, regime, timing
from perfstack.bench.p2p import peer_peak
from perfstack.model import Measurement

KIB, MIB, GIB = _gpu.KIB, _gpu.MIB, _gpu.GIB
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "sendrecv")
SIZES_QUICK = (4 * KIB, MIB, 64 * MIB, GIB)
# 1 KiB, 4 KiB, ... 1 GiB as nccl-tests -b 1K -e 1G -f 4, then 8 GiB (skipped where it does not fit)
SIZES_FULL = tuple(KIB * 4**i for i in range(11)) + (8 * GIB,)
ELEM = 4  # float32, as nccl-tests' default
TIMING: dict[Suite, timing.Budget] = {"quick": {"budget_s": 0.1, "warmup_s": 0.02}, "full": {"budget_s": 0.15, "warmup_s": 0.03}}
INIT_TIMEOUT_S = 60
FAIL_GRACE_S = 10.0  # after one rank fails, how long the others get to exit before they are killed
CHILD_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
# With NCCL's support for mixing graph and eager launches on one communicator on (its default), each
# captured call is ordered behind a serialization event shared with eager launches: on two H100s a
# 1 KiB all_reduce took 11.3 µs per call in a graph of 20 calls and 17-21 µs in one of 200, against
# 4.9 µs with it off (benchmarks/nccl_call_cost.py). The workers never mix the two at once (every
# eager call and every replay is on one stream, with a synchronize between the two kinds), which is
# the condition NCCL documents for turning it off. A value the user set is kept.
GRAPH_ENV = {"NCCL_GRAPH_MIXING_SUPPORT": "0"}
PATTERN = 7  # values are (small int) + i % PATTERN: sums stay exact in float32


# -- arithmetic (nccl-tests doc/PERFORMANCE.md) ---------------------------------------------
def busbw_factor(op: str, n: int) -> float:
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op in ("broadcast", "sendrecv"):
        return 1.0
    raise ValueError(f"unknown collective {op}")


def algbw_gbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9


def busbw_gbps(op: str, n: int, nbytes: int, seconds: float) -> float:
    return algbw_gbps(nbytes, seconds) * busbw_factor(op, n)


def sizes(suite: Suite) -> tuple[int, ...]:
    return SIZES_FULL if suite == "full" else SIZES_QUICK


def parse_sizes(text: str) -> tuple[int, ...]:
    """'1K,64M,1G' (binary units, as nccl-tests' -b/-e) -> bytes, ascending, without repeats."""
    out = set()
    for part in (p.strip() for p in text.split(",")):
        m = re.fullmatch(r"(\d+)\s*([KMG]?)(?:i?B)?", part, re.IGNORECASE)
        if not m or int(m.group(1)) == 0:
            raise ValueError(f"not a message size: {part!r} (expected e.g. 4K, 64M, 1G)")
        out.add(int(m.group(1)) * {"": 1, "K": KIB, "M": MIB, "G": GIB}[m.group(2).upper()])
    if not out:
        raise ValueError("no message size given")
    return tuple(sorted(out))


def count_for(nbytes: int, n: int) -> int:
    """Elements of the whole array: S / 4 rounded down to a multiple of n (each rank's chunk is whole)."""
    return max(n, nbytes // ELEM // n * n)


def buffer_elems(op: str, count: int, n: int) -> tuple[int, int]:
    """(input, output) elements per rank for an op over an array of ``count`` elements (0 = in place)."""
    chunk = count // n
    return {"all_reduce": (count, 0), "all_gather": (chunk, count), "reduce_scatter": (count, chunk),
            "all_to_all": (count, count), "broadcast": (count, 0), "sendrecv": (count, count)}[op]


def in_place(op: str) -> bool:
    """Whether the op writes its result over its input (torch's all_reduce and broadcast)."""
    return buffer_elems(op, 2, 2)[1] == 0


def moves_data(op: str, n: int) -> bool:
    """Whether a call has any data to move or reduce. With one rank an in-place op has none: NCCL
    returns without touching memory, so its time is the call's overhead and a bus bandwidth computed
    from it is meaningless."""
    return n > 1 or not in_place(op)


def bytes_needed(op: str, count: int, n: int) -> int:
    """Device memory per rank: input, output, the expected result used by the check, and the int32
    index pattern both are built from (twice: the range and its remainder)."""
    i, o = buffer_elems(op, count, n)
    return (i + o + (o or i) + 2 * max(i, o)) * ELEM


# -- inputs and analytic results (torch passed in; CPU tensors in the tests) ----------------
def _pattern(torch: Any, length: int, device: Any, start: int = 0) -> Any:
    return (torch.arange(start, start + length, dtype=torch.int32, device=device) % PATTERN).to(torch.float32)


def make_input(torch: Any, op: str, rank: int, n: int, count: int, device: Any = "cpu") -> Any:
    i, _ = buffer_elems(op, count, n)
    chunk = count // n
    if op == "all_to_all":  # chunk k goes to rank k and carries both ends' numbers
        return torch.cat([_pattern(torch, chunk, device) + (rank * n + k + 1) for k in range(n)])
    if op == "broadcast" and rank != 0:
        return torch.full((i,), -float(rank + 1), device=device)
    return _pattern(torch, i, device) + float(rank + 1)


def expected(torch: Any, op: str, rank: int, n: int, count: int, device: Any = "cpu") -> Any:
    chunk = count // n
    tri = n * (n + 1) / 2
    if op == "all_reduce":
        return _pattern(torch, count, device) * n + tri
    if op == "all_gather":
        return torch.cat([_pattern(torch, chunk, device) + (k + 1) for k in range(n)])
    if op == "reduce_scatter":
        return _pattern(torch, chunk, device, start=rank * chunk) * n + tri
    if op == "all_to_all":
        return torch.cat([_pattern(torch, chunk, device) + (k * n + rank + 1) for k in range(n)])
    if op == "broadcast":
        return _pattern(torch, count, device) + 1.0
    if op == "sendrecv":  # what the previous rank in the ring sent
        return _pattern(torch, count, device) + float((rank - 1) % n + 1)
    raise ValueError(f"unknown collective {op}")


def correct(torch: Any, op: str, rank: int, n: int, count: int, got: Any, device: Any = "cpu") -> bool:
    """The check each rank makes of its result before any timing: exactly what ``expected`` says
    (the inputs are small integers in float32, so every sum is exact and any difference is a fault)."""
    return bool(torch.equal(got, expected(torch, op, rank, n, count, device)))


def simulate(torch: Any, op: str, inputs: list[Any]) -> list[Any]:
    """What each rank holds after ``op`` on ``inputs`` (one per rank), computed without any backend:
    the reference the analytic results are tested against."""
    n = len(inputs)
    if op == "all_reduce":
        return [sum(inputs) for _ in inputs]
    if op == "all_gather":
        return [torch.cat(inputs) for _ in inputs]
    if op == "reduce_scatter":
        return list(sum(inputs).chunk(n))
    if op == "all_to_all":
        return [torch.cat([x.chunk(n)[r] for x in inputs]) for r in range(n)]
    if op == "broadcast":
        return [inputs[0].clone() for _ in inputs]
    if op == "sendrecv":
        return [inputs[(r - 1) % n].clone() for r in range(n)]
    raise ValueError(f"unknown collective {op}")


# -- the parent -----------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env(base: dict[str, str], rank: int, n: int, cfg_path: str, graph: bool = False) -> dict[str, str]:
    env = dict(base)
    src_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src_root, env.get("PYTHONPATH", "")) if p)
    env.update(CHILD_ENV)
    if graph:
        env.update({k: v for k, v in GRAPH_ENV.items() if k not in base})
    env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(n), PERFSTACK_COLL_CFG=cfg_path)
    return env


Backend = Literal["nccl", "gloo"]  # gloo: the CPU stand-in the tests run
Via = Literal["nccl", "torch"]  # NCCL called directly where it can be (as nccl-tests), or through torch.distributed


@dataclass(frozen=True)
class Job:
    """One run of the collectives: what every worker is told (the config file each one reads)."""

    world: int  # ranks, one process (and one GPU) each
    ops: tuple[str, ...]
    sizes: tuple[int, ...]  # bytes
    budget_s: float  # timing budget per op and size
    backend: Backend = "nccl"
    timeout_s: int = INIT_TIMEOUT_S  # for the process group to form
    fail_rank: Optional[int] = None  # the tests' way to make one rank fail
    graph: bool = True  # capture each batch in a CUDA graph (GPU only)
    batch_s: float = batched.TARGET_BATCH_S  # target duration of a batch
    via: Via = "nccl"


def launch(job: Job, deadline_s: float = 600.0) -> tuple[dict[str, Any] | None, str]:
    """Run the workers; (rank 0's results, "") or (None, what went wrong, naming the rank)."""
    world, graph, backend = job.world, job.graph, job.backend
    tmp = tempfile.mkdtemp(prefix="perfstack-coll-")
    try:
        cfg = {"world_size": world, "backend": backend, "port": free_port(), "ops": list(job.ops),
               "sizes": list(job.sizes), "budget_s": job.budget_s, "timeout_s": job.timeout_s, "dir": tmp,
               "fail_rank": job.fail_rank, "graph": graph, "batch_s": job.batch_s, "via": job.via}
        cfg_path = os.path.join(tmp, "cfg.json")
        Path(cfg_path).write_text(json.dumps(cfg))
        procs = []
        for r in range(world):
            log = open(os.path.join(tmp, f"rank{r}.log"), "wb")
            procs.append(subprocess.Popen(
                [sys.executable, "-c", "from perfstack.bench.collective_rank import worker; worker()"],
                env=child_env(dict(os.environ), r, world, cfg_path, graph and backend == "nccl"), stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL))
            log.close()
        failed = _wait(procs, time.monotonic() + deadline_s)
        if failed is not None:
            return None, _why(tmp, _first_failure(tmp, procs, failed), procs)
        r0 = _status(tmp, 0)
        if not r0 or not r0.get("ok"):
            return None, _why(tmp, 0, procs)
        return r0["results"], ""
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _wait(procs: list[subprocess.Popen[bytes]], deadline: float) -> int | None:
    """Wait for every worker; the rank that failed (or timed out) first, else None. Stragglers of a
    failed run get FAIL_GRACE_S to exit and are then killed (only our own children, by handle)."""
    failed: int | None = None
    grace_end = None
    while True:
        codes = [p.poll() for p in procs]
        if failed is None:
            bad = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                failed, grace_end = bad[0], time.monotonic() + FAIL_GRACE_S
        if all(c is not None for c in codes):
            return failed
        now = time.monotonic()
        if now > deadline and failed is None:
            failed = next(r for r, c in enumerate(codes) if c is None)
            grace_end = now
        if grace_end is not None and now >= grace_end:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            for p in procs:
                p.wait()
            return failed
        time.sleep(0.05)


def _status(tmp: str, rank: int) -> dict[str, Any] | None:
    try:
        status = json.loads(Path(tmp, f"rank{rank}.json").read_text())
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) else None


def _first_failure(tmp: str, procs: list[subprocess.Popen[bytes]], fallback: int) -> int:
    """The rank whose error was written first: once one rank dies, its peers fail too (connection
    reset, NCCL abort), and the first error is the cause."""
    written = []
    for r in range(len(procs)):
        try:
            written.append((Path(tmp, f"rank{r}.json").stat().st_mtime_ns, r))
        except OSError:
            continue
    failed = [(t, r) for t, r in written if not (_status(tmp, r) or {}).get("ok", False)]
    return min(failed)[1] if failed else fallback


def _why(tmp: str, rank: int, procs: list[subprocess.Popen[bytes]]) -> str:
    st = _status(tmp, rank)
    others = [r for r, p in enumerate(procs) if r != rank and p.returncode not in (0, None)]
    then = f" (ranks {others} stopped after it)" if others else ""
    if st and st.get("error"):
        return f"rank {rank} failed: {st['error']}{then}"
    code = procs[rank].returncode
    try:
        lines = Path(tmp, f"rank{rank}.log").read_text(errors="replace").strip().splitlines()
    except OSError:
        lines = []
    tail = next((ln for ln in reversed(lines) if ln.strip()), "no output")
    if code is not None and code < 0:
        return f"rank {rank} did not finish in time and was stopped; last output: {tail}"[:600]
    return f"rank {rank} exited with {code}: {tail}"[:600]


def to_measurements(results: dict[str, Any], n: int) -> list[Measurement]:
    """Rank 0's rows -> sweep figures and two headlines per op (best busbw, smallest-size latency)."""
    out: list[Measurement] = []
    meta = results.get("meta", {})
    nccl, via = meta.get("nccl_version"), meta.get("via", "torch")
    for row in results["rows"]:
        op, nbytes = row["op"], row["bytes"]
        name = f"collective.{op}.{_gpu.size_label(row['requested_bytes'])}"
        params: dict[str, Any] = {"op": op, "bytes": nbytes, "world_size": n, "sweep": True, "dtype": "float32",
                                  "busbw_factor": round(busbw_factor(op, n), 4), "nccl_version": nccl, "via": via}
        if row.get("skipped"):
            out.append(_gpu.skip("collective", name, row["skipped"], "GB/s", params))
            continue
        med = timing.summarize(row["samples"])["median"]
        params.update(algbw_gbps=round(algbw_gbps(nbytes, med), 3), busbw_gbps=round(busbw_gbps(op, n, nbytes, med), 3),
                      time_us=round(med * 1e6, 2), ops_per_batch=row.get("ops_per_batch", 1),
                      timing=row.get("mode", "eager"))
        m = _gpu.measurement("collective", name, row["samples"], partial(busbw_gbps, op, n, nbytes),
                             "GB/s", params, notes=[batch_note(row, via, meta.get("via_why_not_nccl"))])
        if row.get("why_eager"):
            m.notes.append(f"timed eagerly: {row['why_eager']}")
        issue = row.get("issue_s_per_op")
        if batched.host_bound(issue, med):
            m.notes.append(f"host-bound: issuing a call from Python took {issue * 1e6:.1f} µs of the {med * 1e6:.1f} µs "
                           "per call, so this time is the launch rate, not NCCL's")
        if row.get("wrong_ranks"):
            m.status, m.reason = "error", f"wrong result on ranks {row['wrong_ranks']}"
        out.append(m)
    for op in dict.fromkeys(r["op"] for r in results["rows"]):
        pts = [m for m in out if m.params.get("op") == op and m.status == "ok" and m.value is not None]
        if not pts:
            out.append(_gpu.skip("collective", f"collective.{op}.best", "no size was measured", "GB/s"))
            continue
        best = max(pts, key=lambda m: (m.value, -m.params["bytes"]))
        h = _gpu.measurement("collective", f"collective.{op}.best", best.samples,
                             partial(busbw_gbps, op, n, best.params["bytes"]), "GB/s",
                             {**best.params, "sweep": False})
        h.notes.insert(0, f"best bus bandwidth of the sweep, at {_gpu.size_label(best.params['bytes'])}; "
                          f"algbw {best.params['algbw_gbps']:.1f} GB/s")
        out.append(h)
        small = min(pts, key=lambda m: m.params["bytes"])
        lat = _gpu.measurement("collective", f"collective.{op}.latency", small.samples, lambda s: s * 1e6, "µs",
                               {**small.params, "sweep": False, "headline": "latency"})
        lat.notes.insert(0, f"time per call at the smallest size measured, {_gpu.size_label(small.params['bytes'])}")
        out.append(lat)
    return out


def batch_note(row: dict[str, Any], via: str = "torch", why_not: str | None = None) -> str:
    how = "replayed from a CUDA graph" if row.get("mode") == "graph" else "issued eagerly"
    k = row.get("ops_per_batch", 1)
    mem = ", buffers from ncclMemAlloc" if row.get("nccl_memory") else ""
    path = (f"straight to NCCL on a communicator of the benchmark's own{mem}, as nccl-tests" if via == "nccl" else
            "through torch.distributed" + (f" (NCCL could not be called directly: {why_not})" if why_not else ""))
    return (f"{k} calls back to back between two CUDA events per sample ({how}, {path}); time per call is the "
            "slowest rank's batch time divided by the calls in it")


def judge_sweep(m: Measurement, peak: float | None, source: str, practical: float | None, link: str) -> Measurement:
    """Small sizes by latency, large ones by bandwidth, the ones in between not at all (``regime``)."""
    if m.status != "ok" or m.value is None:
        return m
    n, op, nbytes = m.params.get("world_size", 0), m.params.get("op", ""), m.params.get("bytes", 0)
    time_s = m.params["time_us"] / 1e6
    if m.params.get("headline") == "latency":
        lat_ref = regime.REFERENCE_LATENCY_S.get(link)
        bus_s = regime.bus_seconds(nbytes * busbw_factor(op, n), peak, practical)
        if n < 2 or lat_ref is None or bus_s is None:
            m.verdict = "no reference"
            return m
        regime.judge_latency(m, time_s, lat_ref, bus_s, link)
        m.peak, m.peak_source = (lat_ref + bus_s) * 1e6, "reference latency + bus time"
        return m
    if n < 2:  # one rank: nothing crosses a link
        m.verdict = "no reference"
        m.notes.append("one rank: no bus traffic between GPUs; compare the time per call")
        return m
    lat_ref = regime.REFERENCE_LATENCY_S.get(link)
    bus_s = regime.bus_seconds(nbytes * busbw_factor(op, n), peak, practical)
    where = regime.regime(bus_s, lat_ref) if m.params.get("sweep") else "bandwidth"
    m.params["judged_by"] = where
    if where == "latency" and lat_ref is not None and bus_s is not None:
        m.peak, m.peak_source = peak, source
        return regime.judge_latency(m, time_s, lat_ref, bus_s, link)
    if where == "transition":
        m.peak, m.peak_source = peak, source
        m.fraction = m.value / peak if peak else None
        m.verdict = "no reference"
        m.notes.insert(0, "between the latency- and bandwidth-bound sizes: reported, not judged")
        return m
    return _gpu.judged(m, peak, source, practical)


@benchmark("collectives", needs_cuda=True, host_bound=True, in_quick=False, min_gpus=2, doc="""NCCL all_reduce, all_gather,
           reduce_scatter, all_to_all, broadcast and sendrecv across all GPUs of this host (one process per GPU),
           swept over message sizes (--sizes to choose them), timed in batches of back-to-back calls as nccl-tests
           does; time per call and bus bandwidth (nccl-tests definitions), small sizes judged by latency and large
           ones against the NVLink or PCIe peak.""")
def run(ctx: BenchContext) -> list[Measurement]:
    import torch

    n = torch.cuda.device_count()
    entries = [_gpu.device_entry(torch, ctx.facts, d) for d in range(n)]
    spec = _gpu.spec_for(entries[0])
    todo = tuple(ctx.options.get("sizes") or sizes(ctx.suite))
    budget = TIMING[ctx.suite]["budget_s"]
    deadline = INIT_TIMEOUT_S + len(OPS) * len(todo) * (budget + 3.0) + 60
    torch.cuda.empty_cache()  # leave the workers the memory this process cached
    tels = [(d, _gpu.telemetry(e.get("index", d))) for d, e in enumerate(entries)]
    via: Via = "nccl" if ctx.options.get("via", "nccl") == "nccl" else "torch"  # as the workers read it
    results, why = launch(Job(world=n, ops=OPS, sizes=todo, budget_s=budget, graph=bool(ctx.options.get("graph", True)),
                              via=via), deadline)
    after = [(d, _gpu.telemetry(e.get("index", d))) for d, e in enumerate(entries)]
    if results is None:
        return [_gpu.error("collective", "collective", why, "GB/s", {"world_size": n})]
    out = to_measurements(results, n)
    # Sampled before the workers start and after they exit: only this process may hold a context then.
    tel = {"before": tels[0][1], "after": after[0][1],
           "notes": sorted({note for (_, b), (_, a) in zip(tels, after) for note in _gpu.telemetry_notes(b, a)})}
    _gpu.finish(out, tel)
    pairs = [peer_peak(ctx.facts, spec, entries[i], entries[j]) for i in range(n) for j in range(n) if i != j]
    known = [(bw, source, link) for bw, source, link in pairs if bw]
    peak, source, link = min(known, key=lambda p: p[0]) if known else (None, "", "unknown")
    for m in out:
        judge_sweep(m, peak, source, _gpu.practical("nccl_busbw"), link)
        if not m.params.get("sweep") and m.status == "ok":
            m.notes.append("NVLink multicast (NVLS) off in the workers: NCCL_NVLS_ENABLE=0")
    return out
