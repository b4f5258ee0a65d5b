"""Kernel launch overhead: N back-to-back tiny kernels launched eagerly from Python, then the same N
captured once in a CUDA graph and replayed.

Each repetition is a batch of N kernels (``x.add_(1)`` on a one-element tensor, so the kernel
itself takes about a microsecond). The batch is timed twice: CUDA events around it (GPU time) and
host wall time with a synchronize at the end. When the host cannot launch as fast as the GPU
runs, the GPU sits idle between kernels and both clocks see the launch cost; the larger of the two
per kernel is reported as the launch-bound cost. Lower is better: the references are ~20 µs per
eager launch from Python (a figure of the book in sources.BOOK) and ~2 µs per kernel replayed from a graph.
"""

from __future__ import annotations

from typing import Any, Callable

from perfstack.bench import BenchContext, Suite, _gpu, benchmark, timing
from perfstack.bench.verdict import lower_is_better
from perfstack.model import Measurement
from perfstack.sources import BOOK

KERNELS = 1000
TIMING: dict[Suite, timing.Budget] = {"quick": {"budget_s": 0.3, "warmup_s": 0.1}, "full": {"budget_s": 1.0, "warmup_s": 0.2}}
EAGER_REF_US, EAGER_REF = 20.0, f"≈20 µs per eager launch from Python (the book {BOOK})"
GRAPH_REF_US, GRAPH_REF = 2.0, "≈2 µs per kernel replayed from a CUDA graph"


def per_kernel_us(batch_seconds: float, kernels: int) -> float:
    return batch_seconds / kernels * 1e6


def launch_bound(gpu_samples: list[float], host_samples: list[float]) -> tuple[str, list[float]]:
    """Which clock saw the larger median batch time ("gpu" or "host"), and its samples."""
    g, h = timing.summarize(gpu_samples)["median"], timing.summarize(host_samples)["median"]
    return ("host", host_samples) if h >= g else ("gpu", gpu_samples)


def _both(torch: Any, fn: Callable[[], Any], suite: Suite) -> tuple[list[float], list[float]]:
    gpu = timing.measure(fn, timing.CudaTimer(torch), min_reps=20, max_reps=1000, **TIMING[suite])

    def synced() -> None:
        fn()
        torch.cuda.synchronize()
    host = timing.measure(synced, timing.HostTimer(), min_reps=20, max_reps=1000, **TIMING[suite])
    return gpu, host


def _figure(name: str, gpu: list[float], host: list[float], how: str) -> Measurement:
    bound, samples = launch_bound(gpu, host)
    g, h = (per_kernel_us(timing.summarize(x)["median"], KERNELS) for x in (gpu, host))
    m = _gpu.measurement("launch", name, samples, lambda s: per_kernel_us(s, KERNELS), "us",
                         {"kernels_per_rep": KERNELS, "op": "x.add_(1), 1-element float32", "how": how,
                          "gpu_us_per_kernel": round(g, 3), "host_us_per_kernel": round(h, 3), "bound_by": bound,
                          "other_clock_samples": host if bound == "gpu" else gpu})
    m.notes.insert(0, f"{bound} time is the larger: {g:.2f} µs/kernel on the GPU clock, {h:.2f} µs on the host clock")
    return m


@benchmark("launch", needs_cuda=True, host_bound=True, doc="""Kernel launch overhead (µs per kernel): N tiny kernels launched
           eagerly from Python vs the same N replayed from one CUDA graph.""")
def run(ctx: BenchContext) -> list[Measurement]:
    import torch

    dev = ctx.device
    entry = _gpu.device_entry(torch, ctx.facts, dev)
    out: list[Measurement] = []
    with _gpu.on_device(torch, dev), _gpu.sampled(entry.get("index", dev)) as tel:
        x = torch.rand(1, device=f"cuda:{dev}")

        def eager() -> None:
            for _ in range(KERNELS):
                x.add_(1)
        out.append(_figure("launch.eager", *_both(torch, eager, ctx.suite), "eager"))
        try:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                eager()
            out.append(_figure("launch.graph", *_both(torch, g.replay, ctx.suite), "one CUDA graph replay"))
            del g
        except RuntimeError as e:
            out.append(_gpu.error("launch", "launch.graph", f"CUDA graph capture failed: {e}", "us"))
    _gpu.finish(out, tel)
    judge(out)
    return out


def judge(out: list[Measurement]) -> None:
    """Each figure against its reference (eager or graph), and what a graph replay saves."""
    for m in out:
        if m.status == "ok":
            if m.name == "launch.eager":
                lower_is_better(m, EAGER_REF_US, EAGER_REF)
            else:
                lower_is_better(m, GRAPH_REF_US, GRAPH_REF)
    per_kernel = [m.value for m in out if m.status == "ok" and m.value]
    if len(out) == 2 and len(per_kernel) == 2:
        eager_us, graph_us = per_kernel
        out[1].notes.insert(0, f"a graph replay costs {graph_us / eager_us:.0%} of eager per kernel "
                               "(capture steady-state loops of small kernels: torch.compile mode='reduce-overhead')")
