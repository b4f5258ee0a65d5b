"""What overlapping the exposed communication with the backward pass would recover.

The exposed NCCL time of a trace (kernels running with nothing else on the GPU) is not what a
bucketed, overlapped all-reduce (DistributedDataParallel, FSDP) gives back. Four things stand
between the two, and this module estimates each from the trace:

1. **Waiting is not transfer.** An NCCL kernel starts when its rank arrives and ends when every
   rank has; the time it spends waiting for a later rank is skew, which overlap cannot hide (the
   ranks still meet at the end of the backward pass). A collective of the same kind and size runs
   many times in a trace; the fastest instance is taken as its transfer time and the rest of each
   instance as waiting.
2. **The last bucket stays exposed.** Buckets are all-reduced as their gradients become ready;
   the bucket holding the gradients computed last (the first layers') is reduced after the
   backward pass ends. The exposed collectives are grouped the way DDP groups gradients (25 MiB
   buckets; a tensor larger than that is a bucket of its own; a single collective per step is
   taken as a flattened buffer of many gradients and split into such buckets) and the largest
   bucket's share of the exposed transfer stays exposed.
3. **Only free backward compute can hide it.** Gradients become ready during the backward pass,
   the first bucket after about its share of it: the transfer can hide under at most the backward
   GPU time not already overlapped with communication, less that first share of the backward pass.
4. **Overlap is not free.** An overlapped collective takes SMs and memory bandwidth from the
   kernels it hides under, which slow down: each ms of communication moved under compute costs
   ``contention`` ms of compute. Where the trace itself has compute overlapped with NCCL
   kernels, the contention is measured there (the same kernel, overlapped or not); otherwise
   ``CONTENTION`` is used.

recoverable = min(transfer - last bucket, free backward - bucket share x backward) x (1 - contention)
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from perfstack.profile.timeline import Spans

if TYPE_CHECKING:
    from perfstack.profile.analysis import Analysis
    from perfstack.records.profile import Section

BUCKET_BYTES = 25 * 2**20  # DDP's bucket_cap_mb default (FSDP's default unit is a module, often larger)
# Compute time lost per unit of overlapped NCCL time, when the trace cannot show it: the 2xH200 DDP
# trace (tests/fixtures/traces/h200x2, ncclDevKernel_AllReduce RING_LL on 24 CTAs of 132 SMs), where
# bf16 GEMMs ran 0.30-0.44 ms slower per ms of all-reduce under them (a share of SMs alone would
# give 0.18: the collective also competes for HBM and L2). contention() measures it per trace.
CONTENTION = 0.35
MIN_PAIRS = 3  # overlapped/free pairs of the same kernel needed to measure the contention


def _groups(A: Analysis) -> tuple[list[int], dict[int, float]]:
    """The analysed device's NCCL events in steps, and each one's transfer time (µs): the fastest
    instance of the same kernel moving the same bytes."""
    gpu, att = A.gpu, A.att
    comm = [i for i in range(len(gpu)) if att.category[i] == "comm" and att.step[i] >= 0]
    by_key: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    for i in comm:
        by_key[(gpu[i].name, _bytes(A, i))].append(i)
    transfer: dict[int, float] = {}
    for idx in by_key.values():
        fastest = min(gpu[i].dur for i in idx)
        for i in idx:
            transfer[i] = fastest
    return comm, transfer


def _bytes(A: Analysis, i: int) -> float:
    """Bytes of the collective that launched NCCL event i (its largest tensor), 0 when unknown."""
    c = A.cost(A.att.op[i])
    return float(c.big or c.bytes or 0.0) if c else 0.0


def buckets(sizes: list[float], cap: float = BUCKET_BYTES, flat: bool | None = None) -> list[float]:
    """Bucket sizes DDP would make of gradient tensors of ``sizes`` bytes (greedy, in order, a bucket
    closing once it holds ``cap``). ``flat``: the one tensor is a flattened buffer of many gradients,
    split into ``cap`` pieces (by default: when there is one tensor)."""
    sizes = [s for s in sizes if s > 0]
    if len(sizes) == 1 and (flat is None or flat):
        n, rest = divmod(sizes[0], cap)
        return [cap] * int(n) + ([rest] if rest else [])
    out: list[float] = []
    cur = 0.0
    for s in sizes:
        cur += s
        if cur >= cap:
            out.append(cur)
            cur = 0.0
    if cur:
        out.append(cur)
    return out


def contention(A: Analysis) -> dict[str, Any] | None:
    """Compute time lost per unit of overlapped NCCL time, measured in this trace: backward kernels
    (same name) that ran both with no NCCL kernel beside them (< 5% overlapped) and mostly overlapped
    (> 50%); the slowdown of the overlapped ones over the overlapped time. None without enough pairs."""
    gpu, att = A.gpu, A.att
    comm = Spans((gpu[i].ts, gpu[i].ts + gpu[i].dur) for i in range(len(gpu)) if att.category[i] == "comm")
    if not len(comm):
        return None
    free: dict[str, list[float]] = defaultdict(list)
    under: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for i, g in enumerate(gpu):
        # the backward pass's kernels: what a bucketed all-reduce hides under (element-wise work
        # after an all-reduce, such as dividing the gradients, contends differently)
        if att.phase[i] != "backward" or att.category[i] == "comm" or g.kind != "kernel" or g.dur <= 0:
            continue
        ov = comm.overlap(g.ts, g.ts + g.dur)
        if ov < 0.05 * g.dur:
            free[g.name].append(g.dur)
        elif ov > 0.5 * g.dur:
            under[g.name].append((g.dur, ov))
    lost = overlapped = 0.0
    pairs = 0
    for name, xs in under.items():
        if name not in free:
            continue
        base = statistics.median(free[name])
        for dur, ov in xs:
            lost += dur - base
            overlapped += ov
            pairs += 1
    if pairs < MIN_PAIRS or overlapped <= 0:
        return None
    return {"value": round(min(0.9, max(0.0, lost / overlapped)), 3), "kernels": pairs,
            "overlapped_ms": round(overlapped / 1e3, 4)}


def overlap_model(A: Analysis, p: Section) -> dict[str, Any]:
    """Per step (means over the steps): NCCL time exposed, of which waiting for other ranks; the
    transfer that overlap could move under the backward pass; and what that recovers."""
    gpu, att = A.gpu, A.att
    n = max(1, len(A.windows))
    comm, transfer = _groups(A)
    other = Spans((g.ts, g.ts + g.dur) for i, g in enumerate(gpu) if att.category[i] != "comm")
    comm_spans = Spans((gpu[i].ts, gpu[i].ts + gpu[i].dur) for i in comm)
    per_step: dict[int, dict[str, Any]] = defaultdict(lambda: {"exposed": 0.0, "wait": 0.0, "sizes": [], "n": 0})
    for i in comm:
        g = gpu[i]
        exposed = max(0.0, g.dur - other.overlap(g.ts, g.ts + g.dur))
        wait = g.dur - transfer[i]
        s = per_step[att.step[i]]
        s["n"] += 1
        s["exposed"] += exposed
        s["wait"] += min(wait, exposed)  # a rank waits at the kernel's start, before any data moves
        if exposed > 0.5 * g.dur:
            s["sizes"].append(_bytes(A, i))
    bwd: dict[int, float] = defaultdict(float)
    free_bwd: dict[int, float] = defaultdict(float)
    for i, g in enumerate(gpu):
        if att.step[i] >= 0 and att.phase[i] == "backward" and att.category[i] != "comm":
            bwd[att.step[i]] += g.dur
            free_bwd[att.step[i]] += max(0.0, g.dur - comm_spans.overlap(g.ts, g.ts + g.dur))
    measured = contention(A)
    c = measured["value"] if measured else CONTENTION
    tot: dict[str, float] = defaultdict(float)
    n_buckets = []
    for k in range(len(A.windows)):
        s = per_step.get(k, {"exposed": 0.0, "wait": 0.0, "sizes": [], "n": 0})
        x = max(0.0, s["exposed"] - s["wait"])  # exposed transfer
        # a step's only collective is a flattened buffer; the last of several is one bucket among them
        bk = buckets(s["sizes"], flat=s["n"] == 1)
        share = max(bk) / sum(bk) if bk else 1.0
        tail = x * share
        # the first bucket is ready after about its share of the backward pass: the compute before it
        # cannot hide anything (in an already overlapped trace, that is most of what runs free)
        window = max(0.0, free_bwd.get(k, 0.0) - share * bwd.get(k, 0.0))
        hide = max(0.0, min(x - tail, window))
        for key, v in (("exposed", s["exposed"]), ("wait", s["wait"]), ("transfer", x), ("tail", tail),
                       ("free_backward", free_bwd.get(k, 0.0)), ("hideable", hide), ("recoverable", hide * (1 - c))):
            tot[key] += v
        n_buckets.append(len(bk))
    out: dict[str, Any] = {f"{k}_ms": round(v / n / 1e3, 4) for k, v in tot.items()}
    out["buckets"] = max(n_buckets) if n_buckets else 0
    out["contention"] = c
    out["contention_source"] = (f"measured in this trace: {measured['kernels']} backward kernels beside NCCL kernels "
                                "against the same kernels alone" if measured else
                                "the 2×H200 DDP trace's figure: this trace has no compute beside NCCL kernels")
    return out
