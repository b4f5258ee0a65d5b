"""Timing operations too short to time one at a time: batches of back-to-back calls.

A single NCCL call on a small message takes a few microseconds on the GPU, less than what Python
and the launch path spend issuing it. Timing each call between its own pair of CUDA events then
measures the host, not the operation. nccl-tests issues a run of calls back to back and divides
the elapsed time by their number; this module does the same with CUDA events around each batch,
so the GPU runs the calls one after another without waiting for the host. Optionally the batch is
captured once in a CUDA graph and replayed, which takes the host out of the loop entirely.

The batch length comes from a per-call estimate and a target batch duration: long enough that
the two events' own cost and the first call's launch are small against the batch, short enough
that several batches fit in the time budget. The host time spent issuing an eager batch is kept
too: when it is as long as the batch itself, the GPU was waiting for the host and the figure is
a launch-rate figure, which the measurement says.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

Fn = Callable[[], Any]

# A batch should last at least this long (CUDA event resolution is ~0.5 µs; launching the first
# call of a batch costs a few µs, under 1% of it then).
TARGET_BATCH_S = 1e-3
MAX_BATCH = 1000  # calls captured or issued per batch, whatever the estimate
# Eager batches whose host issue time reaches this share of their GPU time were paced by the host.
HOST_BOUND_SHARE = 0.9


def ops_per_batch(estimate_s: float, target_s: float = TARGET_BATCH_S, max_ops: int = MAX_BATCH) -> int:
    """Calls per batch so that a batch lasts about ``target_s``: 1 for calls already that long."""
    if estimate_s <= 0 or math.isnan(estimate_s):
        return max_ops
    return max(1, min(max_ops, math.ceil(target_s / estimate_s - 1e-9)))  # 1e-9: 10.000000000000002 is 10


def per_op(batch_samples: list[float], ops: int) -> list[float]:
    """Seconds per call from seconds per batch."""
    return [s / ops for s in batch_samples]


def host_bound(issue_s: float | None, gpu_s: float) -> bool:
    """Whether an eager batch's GPU time was set by the host issuing it (the GPU waited between calls)."""
    return issue_s is not None and gpu_s > 0 and issue_s >= HOST_BOUND_SHARE * gpu_s


class Batch:
    """``ops`` back-to-back calls of ``fn``, eager or replayed from a CUDA graph.

    ``graph=True`` tries to capture the batch; a capture that fails leaves ``mode`` "eager" and the
    reason in ``why_eager``, so callers on several ranks can agree before anyone replays.
    """

    def __init__(self, torch: Any, fn: Fn, ops: int, graph: bool) -> None:
        self.fn, self.ops, self.mode, self.why_eager = fn, ops, "eager", ""
        self._graph: Any = None
        if graph and torch is not None:
            try:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    for _ in range(ops):
                        fn()
                self._graph, self.mode = g, "graph"
            except Exception as e:  # capture is unsupported for this op or build: time it eagerly
                self.why_eager = f"CUDA graph capture failed: {type(e).__name__}: {e}"[:300]
                torch.cuda.synchronize()

    def drop_graph(self) -> None:
        """Fall back to eager (another rank could not capture)."""
        self._graph, self.mode = None, "eager"

    def __call__(self) -> None:
        if self._graph is not None:
            self._graph.replay()
            return
        for _ in range(self.ops):
            self.fn()

    def issue_seconds(self, sync: Fn, clock: Callable[[], float] = time.perf_counter) -> float:
        """Host time to issue one batch (not to run it): compared with the GPU time per batch."""
        sync()
        t0 = clock()
        self()
        t = clock() - t0
        sync()
        return t
