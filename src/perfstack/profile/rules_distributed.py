"""Profile rules of jobs on several GPUs: communication not overlapped, an all-reduce per accumulation
micro-batch, a straggler rank. Registered with ``@profile_check`` like every profile rule (``rules.py`` runs
them in its ``ORDER``).
"""

from __future__ import annotations

from perfstack.records.profile import Comm, Section
from perfstack.profile.recovery import fmt, profiled_ms, recovered, step_ms
from perfstack.profile.registry import Context, PHit, profile_check


@profile_check("comm-not-overlapped", "mathlib-nccl", "Communication is not overlapped with compute",
               doc="""Fires when overlapping the exposed NCCL time (kernels running with nothing else on the GPU)
               with the backward pass would recover ≥ 5% of the step. Recoverable (``profile/comm.py``): the exposed
               time less what overlap cannot remove — waiting for the other ranks (each collective's time beyond
               the fastest instance of the same kind and size), the last gradient bucket (reduced after the
               backward pass ends; 25 MiB buckets as DDP makes them), and transfer beyond the backward GPU time
               still free of communication after the first bucket is ready — times (1 − contention): an
               overlapped collective slows the kernels under it by 0.3-0.45 ms per ms (measured in the trace
               where compute runs under NCCL kernels, else 0.35 from the 2×H200 DDP trace).""",
               why="Gradient all-reduce after backward leaves the GPU doing nothing but communication; DDP/FSDP "
                   "bucket the gradients and overlap their all-reduce with the rest of backward.",
               fix="Wrap the model in DistributedDataParallel (bucket_cap_mb 25-100, gradient_as_bucket_view=True) "
                   "or FSDP instead of all_reduce after backward; for custom loops, launch async collectives "
                   "(async_op=True) per bucket as gradients become ready.",
               assumptions="""Bucketed overlap (DDP, FSDP) hides the exposed transfer less the last bucket, within
               the backward compute not already beside a collective, less the contention (lost time per ms of
               overlap measured in the trace where it has overlapped kernels, else 0.35 from an H200 trace).""",
               confidence="medium")
def comm_not_overlapped(p: Section, ctx: Context) -> PHit | None:
    c, step = p.comm or Comm(), step_ms(p)
    m = c.extra.get("if_overlapped")
    if not step or not m or m["recoverable_ms"] < 0.05 * step:
        return None
    fix = None
    if m.get("ddp"):  # already DistributedDataParallel: its buckets are what to tune
        fix = ("The model is already under DistributedDataParallel: check that its all-reduces start during "
               "backward (no find_unused_parameters unless needed, static_graph=True for a fixed graph), tune "
               "bucket_cap_mb (25-100) and gradient_as_bucket_view=True; with gradient accumulation, run every "
               "micro-batch but the last under model.no_sync().")
    return PHit(f"NCCL kernels {fmt(c.ms_per_step)} ms per step, {fmt(c.exposed_ms_per_step)} ms of it with nothing "
                f"else running ({c.overlap_pct:.0f}% overlapped with compute); of the exposed time "
                f"{fmt(m['wait_ms'])} ms is waiting for other ranks and {fmt(m['tail_ms'])} ms is the last of "
                f"{m['buckets']} gradient buckets (reduced after backward in any case); {fmt(m['hideable_ms'])} ms fits "
                f"under the {fmt(m['free_backward_ms'])} ms of backward GPU work not yet overlapped, less "
                f"{m['contention']:.0%} lost to contention: overlapped collectives slow the kernels beside them "
                f"({m['contention_source']})", m["recoverable_ms"], fix=fix)


@profile_check("ddp-sync-per-microbatch", "mathlib-nccl", "DDP all-reduces after every accumulation micro-batch",
               doc="""Under DistributedDataParallel with gradient accumulation (several DDP forwards per optimizer
               step): counts the micro-batches whose backward launched NCCL all-reduces between two optimizer
               steps (``profile/accumulation.py``). Every round but the last is extra: its all-reduce kernels are
               removed and the step replayed, recovering their time nothing else overlapped; their waiting for
               other ranks (time beyond the fastest instance of the same kernel and size) stays, moved to the last
               round, and the compute that ran under them gets back what the overlap cost it (contention, measured
               in the trace or 0.35 ms per ms). Fires at ≥ 2% of the step.""",
               why="Without no_sync(), DDP all-reduces every gradient after each micro-batch's backward: N micro-"
                   "batches per optimizer step move N times the gradients between the GPUs for one update.",
               fix="Run every micro-batch but the last of each optimizer step under model.no_sync() "
                   "(with model.no_sync(): loss.backward()); the last backward all-reduces the accumulated "
                   "gradients once. With Hugging Face Accelerate: accelerator.accumulate(model).",
               measure=("ddp-no-sync",),
               assumptions="""With no_sync() on every micro-batch but the last, every all-reduce round but one
               goes; the waiting for other ranks stays and the compute under the removed rounds gets back the
               contention they caused. Inputs: rounds and micro-batches per step, NCCL kernel times.""",
               confidence="medium")
def ddp_sync_per_microbatch(p: Section, ctx: Context) -> PHit | None:
    e = p.waste.ddp_sync_per_microbatch
    ms, pct = recovered(p, "ddp-sync-per-microbatch")
    if e is None or pct < 2:
        return None
    return PHit(f"DDP all-reduced the gradients after {e.rounds:g} of the {e.micro_batches:g} micro-batches of each "
                f"optimizer step ({e.kernels_per_round:g} all-reduce kernels, {fmt(e.round_ms)} ms per round); the "
                f"{e.rounds - 1:g} extra rounds take {fmt(e.extra_ms)} ms per step, {fmt(e.extra_exposed_ms)} ms of it "
                f"with nothing else on the GPU and {fmt(e.extra_wait_ms)} ms waiting for the other ranks (it moves to "
                f"the last round); compute under them lost {e.contention:g} ms per ms overlapped", ms)


@profile_check("straggler-rank", "mathlib-nccl", "One rank is slower and the others wait for it",
               doc="""With several rank traces (``profile/straggler.py``): a rank is a straggler only on what the
               profiler cannot have made, since its CPU overhead differs between ranks: more GPU work than the
               other ranks' median (kernel, copy and memset time; NCCL and idle left out), or CPU-caused idle
               beyond the others' that persists after the profiler's whole CPU time in that rank's step is taken
               out. Recoverable = the extra GPU work + the persisting wait; fires at ≥ 5% of the step. When a
               rank's profiled step is ≥ 5% longer outside communication but neither holds, it says it cannot
               tell (info, no time claimed) and asks for a timing of the ranks without the profiler.""",
               why="Collectives complete at the pace of the slowest rank; every rank pays the straggler's delay.",
               fix="Balance the work (same batch and sequence lengths per rank), check that rank's GPU for "
                   "throttling (perfstack doctor) and its data loading.",
               assumptions="""The other ranks wait for the slowest one: its extra GPU work, or a CPU wait beyond
               the profiler's whole CPU time in its step, is what balancing recovers. A longer profiled step
               without either may be the profiler's own overhead: no time claimed, low confidence.""",
               confidence="medium")
def straggler_rank(p: Section, ctx: Context) -> PHit | None:
    s = p.straggler
    step = profiled_ms(p)
    if not s or not step:
        return None
    if s.verdict in ("gpu work", "wait") and s.recoverable_ms >= 0.05 * step:
        ev = (f"rank {s.rank} does {fmt(s.gpu_work_ms)} ms of GPU work per step (NCCL and idle left out) against a "
              f"median {fmt(s.others_gpu_work_ms)} ms on the other ranks")
        if s.input_ratio is not None and abs(s.input_ratio - 1) >= 0.1:
            ev += f", and copies {s.input_ratio:.2f}× their input bytes to the GPU"
        if s.wait_ms > s.profiler_ms:
            ev += (f"; its CPU-caused idle is {fmt(s.wait_ms)} ms above theirs, {fmt(s.wait_ms - s.profiler_ms)} ms "
                   f"beyond the profiler's own CPU time in its step ({fmt(s.profiler_ms)} ms)")
        return PHit(ev + f"; the largest difference is {s.cause}", s.recoverable_ms, subject=f"rank{s.rank}")
    if s.excess_ms < 0.05 * step:
        return None
    world = len(p.ranks) if p.ranks else 2
    return PHit(f"rank {s.rank} spends {fmt(s.non_comm_ms)} ms per step outside communication against a median "
                f"{fmt(s.others_median_ms)} ms on the other ranks (profiled), but its GPU work is "
                f"{fmt(s.gpu_work_ms)} ms against {fmt(s.others_gpu_work_ms)} ms and the difference is CPU-caused idle "
                f"({fmt(s.wait_ms)} ms) no larger than the profiler's own CPU time in its step "
                f"({fmt(s.profiler_ms)} ms): the profiler's overhead differs between ranks, so perfstack cannot tell a "
                f"straggler from it; time the ranks without the profiler: perfstack try --nproc {world} -- python "
                "train.py ARGS", 0.0, severity="info", subject=f"rank{s.rank}", confidence="low",
                fix="Nothing to fix on this evidence: time the ranks' steps without the profiler first (perfstack "
                    "try, or CUDA events around each rank's step); only a rank that is slower there is a straggler.")
