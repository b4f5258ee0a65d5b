"""Gradient accumulation under DistributedDataParallel that all-reduces after every micro-batch.

DDP all-reduces the gradients during each backward pass unless the micro-batch runs under
``model.no_sync()``; with N micro-batches per optimizer step that is N rounds of all-reduces where one
(after the last micro-batch) gives the same update.

Read from one rank's trace: DDP's forwards (its ``DistributedDataParallel.forward`` range) and the
optimizer steps (``Optimizer.step#...``; without them, the profiler steps) on the CPU, and the NCCL
all-reduce kernels on the GPU. Each all-reduce belongs to the micro-batch whose forward precedes its
launch (the reducer launches them during that micro-batch's backward); the micro-batches between two
optimizer steps whose backward all-reduced are that step's rounds. Every round but the last of each
optimizer step is extra.

Recoverable: the extra rounds' all-reduce kernels are removed and the step replayed, which recovers
their time that nothing else overlapped. What stays: a kernel's time beyond the fastest instance of
the same kernel and size in the trace is waiting for the other ranks (``comm``), which moves to the
last round rather than going away. What else goes: compute that ran under an extra round was slowed
by it (``comm.contention``, measured in the trace where it can be, else ``comm.CONTENTION`` ms of
compute per ms of NCCL time overlapped), and that slowdown is given back.
"""

from __future__ import annotations

import statistics
from bisect import bisect_right
from collections import defaultdict
from typing import TYPE_CHECKING

from perfstack.profile import comm
from perfstack.records.profile import DdpSyncPerMicrobatch
from perfstack.profile.timeline import Spans
from perfstack.profile.waste import Waste

if TYPE_CHECKING:
    from perfstack.profile.analysis import Analysis

DDP_FORWARD = "DistributedDataParallel.forward"
OPTIMIZER_STEP = "Optimizer.step#"


def uses_ddp(A: Analysis) -> bool:
    """Whether the trace runs a DistributedDataParallel model (its forward's record_function range)."""
    return any(name.startswith(DDP_FORWARD) for name in A.op_names())


def is_allreduce(name: str) -> bool:
    return "allreduce" in name.lower().replace("_", "")


def detect(A: Analysis) -> Waste | None:
    """The extra all-reduce rounds of a DDP job with gradient accumulation, or None."""
    ops, gpu, att, rts = A.trace.ops, A.gpu, A.att, A.trace.runtime
    if not uses_ddp(A):
        return None
    fwd = sorted(o.ts for o in ops if o.name.startswith(DDP_FORWARD))
    if len(fwd) < 2:
        return None
    opt = sorted(o.ts for o in ops if o.name.startswith(OPTIMIZER_STEP))
    win_starts = [a for _, a, _ in A.windows]

    def interval(t: float) -> int:
        """The optimizer step a micro-batch starting at ``t`` feeds (-1: none closes it in the trace)."""
        if opt:
            k = bisect_right(opt, t)
            return k if k < len(opt) else -1
        return bisect_right(win_starts, t) - 1

    rounds: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))  # step -> fwd -> kernels
    for i, g in enumerate(gpu):
        if att.step[i] < 0 or att.category[i] != "comm" or not is_allreduce(g.name):
            continue
        j = att.launch[i]
        t = rts[j].ts if j >= 0 else g.ts
        f = bisect_right(fwd, t) - 1
        if f < 0:
            continue
        k = interval(fwd[f])
        if k >= 0:
            rounds[k][f].append(i)
    micro = {k: sum(1 for t in fwd if interval(t) == k) for k in rounds}
    extra = [i for k, by_f in rounds.items() if len(by_f) > 1 for f in sorted(by_f)[:-1] for i in by_f[f]]
    if not extra:
        return None
    _, transfer = comm._groups(A)
    measured = comm.contention(A)
    c = measured["value"] if measured else comm.CONTENTION
    others = Spans((g.ts, g.ts + g.dur) for i, g in enumerate(gpu) if att.category[i] != "comm")
    spans = Spans((gpu[i].ts, gpu[i].ts + gpu[i].dur) for i in extra)
    w = Waste("ddp-sync-per-microbatch")
    exposed = wait = 0.0
    for i in extra:
        g = gpu[i]
        exposed += max(0.0, g.dur - others.overlap(g.ts, g.ts + g.dur))
        left = min(g.dur, max(0.0, g.dur - transfer.get(i, g.dur)))  # waiting: moves to the last round
        wait += left
        w.new_dur[i] = left
        w.merged.add(i)
    for i, g in enumerate(gpu):
        if att.category[i] == "comm" or g.kind != "kernel" or att.step[i] < 0:
            continue
        ov = spans.overlap(g.ts, g.ts + g.dur)
        if ov > 0:
            w.new_dur[i] = max(0.0, g.dur - c * ov)
    n = max(1, len(A.windows))
    all_rounds = [sum(gpu[i].dur for i in idx) for by_f in rounds.values() for idx in by_f.values()]
    n_rounds = len(all_rounds)
    w.evidence = DdpSyncPerMicrobatch(
        micro_batches=round(statistics.mean(micro.values()), 2), rounds=round(n_rounds / len(rounds), 2),
        optimizer_steps=len(rounds),
        kernels_per_round=round(sum(len(idx) for by_f in rounds.values() for idx in by_f.values()) / n_rounds, 1),
        round_ms=round(statistics.median(all_rounds) / 1e3, 4),
        extra_ms=round(sum(gpu[i].dur for i in extra) / n / 1e3, 4),
        extra_exposed_ms=round(exposed / n / 1e3, 4), extra_wait_ms=round(wait / n / 1e3, 4), contention=c)
    return w
