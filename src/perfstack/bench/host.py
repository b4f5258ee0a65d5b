"""Host benchmarks: CPU memory bandwidth (STREAM-style, per NUMA node) and CPU GEMM.

numpy releases the GIL inside large copies and ufunc loops, so one thread per allowed CPU,
each working on its own slice, drives the memory system the way a data pipeline does. Each
thread first touches its own slice, so on Linux's first-touch policy the memory lands on the
node of the CPUs doing the work; pinning the threads to another node's CPUs afterwards measures
the remote penalty.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from perfstack.extras import install_hint
from perfstack.bench import BenchContext, benchmark
from perfstack.bench.timing import HostTimer, measure, spread_notes, summarize
from perfstack.bench.verdict import judge
from perfstack.model import Measurement

COPY_BYTES_QUICK = 256 << 20  # per array; far beyond any last-level cache
COPY_BYTES_FULL = 1 << 30


def triad_bytes(n_elements: int, itemsize: int) -> int:
    """Bytes moved by a = b + s*c done as two numpy passes (a = s*c; a += b):
    read c, write a, then read a, read b, write a: five array sweeps."""
    return 5 * n_elements * itemsize


def copy_bytes(n_elements: int, itemsize: int) -> int:
    """np.copyto(a, b): one read and one write sweep."""
    return 2 * n_elements * itemsize


def node_cpus(ctx: BenchContext) -> dict[int, list[int]]:
    """CPUs of each NUMA node this process may run on (nodes without CPUs left out)."""
    allowed = set(os.sched_getaffinity(0))
    out = {}
    for n in ctx.facts.value("numa.nodes") or []:
        cpus = sorted(set(n.get("cpus") or []) & allowed)
        if cpus:
            out[n["id"]] = cpus
    return out or {0: sorted(allowed)}


class _Pool:
    """Worker threads pinned to a CPU set, each owning one slice of the arrays."""

    def __init__(self, np: Any, cpus: list[int], n_elements: int) -> None:
        self.pool = ThreadPoolExecutor(len(cpus))
        per = n_elements // len(cpus)
        self.slices = [slice(i * per, (i + 1) * per) for i in range(len(cpus))]
        self.a, self.b, self.c = (np.empty(per * len(cpus)) for _ in range(3))
        self.pin(cpus)
        rng = np.random.default_rng(1)

        def first_touch(s: slice) -> None:  # from the pinned thread, so the pages land on its node
            self.a[s] = 0.0
            self.b[s] = rng.random(s.stop - s.start)
            self.c[s] = 1.5
        self.each(first_touch)

    def pin(self, cpus: list[int]) -> None:
        # The barrier makes every worker take exactly one task, so every thread gets pinned.
        gate = threading.Barrier(len(self.slices))

        def pin_this_thread(_: slice) -> None:
            gate.wait()
            os.sched_setaffinity(0, cpus)

        list(self.pool.map(pin_this_thread, self.slices))

    def each(self, fn: Callable[[slice], Any]) -> None:
        list(self.pool.map(fn, self.slices))

    def close(self) -> None:
        self.pool.shutdown()


def _bandwidth(name: str, seconds: list[float], nbytes: int, params: dict[str, Any]) -> Measurement:
    stats = summarize(seconds)
    m = Measurement(bench="host", name=name, value=nbytes / stats["median"] / 1e9, unit="GB/s", params=params,
                    samples=seconds, stats=stats, notes=spread_notes(stats))
    return judge(m, None, "", None)


@benchmark("host", needs_cuda=False, host_bound=True, doc="""CPU memory bandwidth (copy and triad over arrays far larger than
           the caches, one pinned thread per CPU, per NUMA node and local vs remote) and CPU fp32 GEMM GFLOP/s.""")
def host(ctx: BenchContext) -> list[Measurement]:
    try:
        import numpy as np
    except ImportError:
        return [Measurement(bench="host", name="host", value=None, unit="", status="skipped",
                            reason=f"numpy is not installed: {install_hint('bench')}")]

    nbytes = COPY_BYTES_FULL if ctx.full else COPY_BYTES_QUICK
    n = nbytes // 8
    nodes = node_cpus(ctx)
    timer = HostTimer()
    out: list[Measurement] = []
    for node, cpus in nodes.items():
        pool = _Pool(np, cpus, n)
        try:
            label = f".node{node}" if len(nodes) > 1 else ""
            copy = measure(lambda: pool.each(lambda s: np.copyto(pool.a[s], pool.b[s])), timer,
                           budget_s=1.0, min_reps=5, max_reps=50)
            out.append(_bandwidth(f"host.copy{label}", copy, copy_bytes(pool.a.size, 8),
                                  {"bytes_per_array": pool.a.nbytes, "threads": len(cpus), "node": node}))

            def triad(s: slice) -> None:
                np.multiply(pool.c[s], 3.0, out=pool.a[s])
                np.add(pool.a[s], pool.b[s], out=pool.a[s])
            tri = measure(lambda: pool.each(triad), timer, budget_s=1.0, min_reps=5, max_reps=50)
            out.append(_bandwidth(f"host.triad{label}", tri, triad_bytes(pool.a.size, 8),
                                  {"bytes_per_array": pool.a.nbytes, "threads": len(cpus), "node": node}))
            for other, other_cpus in nodes.items():
                if other != node and ctx.full:
                    pool.pin(other_cpus)  # threads move, memory stays on `node`
                    remote = measure(lambda: pool.each(lambda s: np.copyto(pool.a[s], pool.b[s])), timer,
                                     budget_s=1.0, min_reps=5, max_reps=50)
                    out.append(_bandwidth(f"host.copy.node{node}-from-cpus{other}", remote,
                                          copy_bytes(pool.a.size, 8), {"memory_node": node, "cpu_node": other}))
                    pool.pin(cpus)
        finally:
            pool.close()
    out.append(_cpu_gemm(np, ctx, timer))
    return out


def _cpu_gemm(np: Any, ctx: BenchContext, timer: HostTimer) -> Measurement:
    size = 4096 if ctx.full else 2048
    rng = np.random.default_rng(0)
    a = rng.random((size, size), dtype=np.float32)
    b = rng.random((size, size), dtype=np.float32)
    seconds = measure(lambda: a @ b, timer, budget_s=1.0, min_reps=3, max_reps=50)
    stats = summarize(seconds)
    m = Measurement(bench="host", name="host.gemm.fp32", value=2 * size**3 / stats["median"] / 1e9, unit="GFLOP/s",
                    params={"shape": [size, size, size], "threads": len(os.sched_getaffinity(0))},
                    samples=seconds, stats=stats, notes=spread_notes(stats))
    return judge(m, None, "", None)
