"""The CPU side of a trace: what the host was doing (data loading, allocator calls, blocking syncs,
operator dispatch) and why each GPU idle gap happened. The action sequence the replay model runs is built
in ``actions``.

Why a gap happened is decided by the launch of the kernel that ends it (its correlation id): if
that launch had already returned when the GPU went idle, the kernel was queued and the GPU was
waiting on itself (a dependency between streams, an event, a bubble between dependent kernels);
otherwise the GPU waited for the CPU, and what the CPU did between the start of the gap and that
launch names the cause: the DataLoader, the allocator, a blocking sync that had drained the queue,
operator dispatch, or host code outside any recorded operator.
"""

from __future__ import annotations

from dataclasses import dataclass
from perfstack.profile.timeline import Spans
from perfstack.profile.trace import CpuEvent, Trace

SYNC_CALLS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cuStreamSynchronize",
              "cuCtxSynchronize", "cuEventSynchronize"}
BLOCKING_COPIES = {"cudaMemcpy", "cudaMemcpy2D", "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2", "cuMemcpy"}
SYNC_OPS = {"aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero"}
ALLOC_CALLS = {"cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync", "cuMemAlloc_v2", "cuMemFree_v2",
               "cudaHostAlloc", "cudaFreeHost", "cudaMallocHost", "cuMemCreate", "cuMemMap", "cuMemUnmap",
               "cuMemRelease", "cuMemAddressReserve", "cuMemSetAccess"}
ALLOC_SYNCS = {"cudaFree", "cuMemFree_v2", "cudaFreeHost"}  # these wait for the device to be idle
KERNEL_LAUNCHES = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                   "cudaLaunchCooperativeKernel", "cudaLaunchCooperativeKernelMultiDevice"}
GRAPH_LAUNCHES = {"cudaGraphLaunch", "cuGraphLaunch"}
REASONS = ("data loading", "allocator", "sync", "cpu dispatch", "cpu outside ops", "gpu queued", "unknown")


@dataclass
class CpuSpans:
    dataloader: Spans
    alloc: Spans
    sync: Spans  # blocking calls (runtime syncs, blocking copies, .item())
    ops: Spans  # inside any operator (dispatch)


def spans(trace: Trace) -> CpuSpans:
    dl: list[tuple[float, float]] = []
    alloc: list[tuple[float, float]] = []
    sync: list[tuple[float, float]] = []
    # Dispatch: operators, and the user's record_function ranges (Optimizer.step#...) that a CUDA graph
    # captures along with them; not the DataLoader nor the step markers. There is one per operator of
    # the trace: merged as they come (the trace's ops are sorted by start), not held as millions of pairs.
    starts: list[float] = []
    ends: list[float] = []
    last_s, last_e, in_order = -_INF, -_INF, True
    # per name: the list it goes to and whether it is dispatch as an annotation, or None for the names that are
    # neither in a list nor dispatch as annotations (nearly all: their case is tested first)
    roles: dict[str, tuple[list[tuple[float, float]] | None, bool] | None] = {}
    for o in trace.ops:
        name = o.name
        try:
            role = roles[name]
        except KeyError:
            role = roles[name] = _role(name, dl, alloc, sync)
        s = o.ts
        e = s + o.dur
        if role is None:
            if o.cat != "op":
                continue
        else:
            if role[0] is not None:
                role[0].append((s, e))
            if not (o.cat == "op" or (role[1] and o.cat == "annotation")):
                continue
        if not s >= last_s:
            in_order = False
        last_s = s
        if e <= s or not in_order:
            continue
        if s <= last_e:
            if e > last_e:
                last_e = ends[-1] = e
        else:
            starts.append(s)
            ends.append(e)
            last_e = e
    for r in trace.runtime:  # (the interval built only for the few calls kept: most are launches)
        name = r.name
        if name in ALLOC_CALLS:
            alloc.append((r.ts, r.ts + r.dur))
        if name in SYNC_CALLS or name in BLOCKING_COPIES:
            sync.append((r.ts, r.ts + r.dur))
    if in_order:
        dispatch = Spans.of_merged(starts, ends)
    else:  # a trace built by hand
        dispatch = Spans((o.ts, o.ts + o.dur) for o in trace.ops
                         if o.cat == "op" or (o.cat == "annotation" and (roles[o.name] or (None, False))[1]))
    return CpuSpans(Spans(dl), Spans(alloc), Spans(sync), dispatch)


_INF = float("inf")


def _role(name: str, dl: list[tuple[float, float]], alloc: list[tuple[float, float]],
          sync: list[tuple[float, float]]) -> tuple[list[tuple[float, float]] | None, bool] | None:
    """Which CPU span an op of this name makes (the DataLoader, allocator, sync, or none), and whether
    it is dispatch when it is a user annotation; None for neither."""
    of = dl if name.startswith("enumerate(DataLoader)") else alloc if "empty_cache" in name else \
        sync if name in SYNC_OPS else None
    annotation = "#" in name and not name.startswith("enumerate(")
    return None if of is None and not annotation else (of, annotation)


def gap_reason(a: float, b: float, launch: CpuEvent | None, cs: CpuSpans) -> str:
    """Why the GPU was idle over [a, b]; ``launch`` is the runtime call of the event that ends it."""
    if launch is None:
        return "unknown"
    if launch.ts + launch.dur <= a + 1.0:
        return "gpu queued"
    c0, c1 = a, max(a, launch.ts)
    n = c1 - c0
    if n <= 0:
        return "cpu dispatch"
    if cs.dataloader.overlap(c0, c1) >= 0.3 * n:
        return "data loading"
    if cs.alloc.overlap(c0, c1) >= 0.3 * n:
        return "allocator"
    if cs.sync.overlap(c0 - 5.0, c1) > 0 or cs.sync.ends_within(c0 - 20.0, c1):
        return "sync"
    if cs.ops.overlap(c0, c1) >= 0.3 * n:
        return "cpu dispatch"
    return "cpu outside ops"
