"""Profile rules of the CPU side, where the GPU waits for the host: the DataLoader on the main thread, CPU
dispatch as the critical path, blocking syncs, the caching allocator in the steady state. Each fix changes
only the CPU side and is replayed as such (``recovery.cpu_side``); registered with ``@profile_check`` like
the rest (``rules``)."""

from __future__ import annotations

from perfstack.profile.recovery import cpu_side, fmt, recovered, step_ms
from perfstack.profile.registry import Context, PHit, profile_check
from perfstack.records.profile import Allocator, Launch, Overhead, Section, Sync, Timeline
from perfstack.sources import BOOK


@profile_check("dataloader-stall", "framework", "The GPU waits for the DataLoader",
               doc="""Fires when the DataLoader's __next__ runs on the main thread
               (enumerate(DataLoader)#...__next__) and replaying the step without that time (batches ready when
               asked, as prefetching workers make them) recovers ≥ 5% of the step.""",
               why="Input pipelines that starve the GPU are the most common cause of low utilization; fixing I/O "
                   f"stalls typically takes GPUs from about 70% to above 95% busy (the book {BOOK}, chapters 5 "
                   "and 13).",
               fix="DataLoader(num_workers=N (start at CPU cores / GPUs), pin_memory=True, prefetch_factor=2-4, "
                   "persistent_workers=True); move decoding/augmentation to the GPU (DALI, torchvision v2 on CUDA); "
                   "then .to(device, non_blocking=True).",
               measure=("dataloader-workers",),
               assumptions="""Workers have every batch ready when the step asks for it (enough workers and CPU
               cores for the decoding); the rest of the main thread's work stays. Inputs: the DataLoader ranges'
               CPU time and the GPU idle beside them, in the trace; the CPU's speed without the profiler measured
               (--step-ms, capture mode) or estimated.""",
               confidence="high")
def dataloader_stall(p: Section, ctx: Context) -> PHit | None:
    if not p.data_wait_ms or recovered(p, "dataloader-stall")[1] < 5:
        return None
    ms, _, conf, note = cpu_side(p, "dataloader-stall", 5, "dataloader-workers")
    return PHit(f"the DataLoader's __next__ ran {fmt(p.data_wait_ms)} ms per step on the main thread (profiled); "
                f"the GPU was idle {fmt(p.data_wait_idle_ms)} ms per step waiting for it" + note, ms,
                claims={"data loading": p.data_wait_idle_ms}, confidence=conf)


@profile_check("launch-bound", "framework", "CPU dispatch is the critical path (many small kernels)",
               doc="""Fires when ≥ 50 kernels run per step outside CUDA graphs and replaying the step with
               CUDA-graph dispatch (the CPU time spent inside operators removed, ≈ 1 µs per kernel replayed)
               recovers ≥ 5% of the step after the profiler's CPU overhead is removed. A GPU-bound step (the CPU
               runs ahead) recovers nothing this way, and the rule stays silent.""",
               why="Eager PyTorch pays ~5-20 µs of CPU per op; when kernels are shorter than that the GPU waits "
                   "for the CPU. CUDA Graphs typically cut iteration time 20-30% and far more for tiny models.",
               fix="Capture the step in a CUDA graph (torch.compile(mode='reduce-overhead'), or torch.cuda.CUDAGraph / "
                   "make_graphed_callables); default torch.compile alone keeps a launch per kernel it does not fuse "
                   "away. Or launch fewer, larger kernels: fused optimizers (fused=True), a larger batch.",
               measure=("compile-cudagraphs",),
               assumptions="""The whole step is graphed: every kernel replayed at ≈ 1 µs, all CPU time inside
               operators gone, the CPU work outside them (Python, data preparation) kept, kernels as long as in
               the trace. Graphing part of the step (forward and backward only, the loss, syncs and optimizer
               eager) recovers less. A graph never makes the step shorter than the GPU's busy time. The fixes that
               do this are CUDA graphs and torch.compile(mode="reduce-overhead"), whose prediction also counts what
               compiling fuses (the compile-cudagraphs what-if) and keeps the optimizer step's launches eager
               (compiling the model does not capture it), at one graph per step: where Dynamo splits the model into
               many graphs, each costs CPU time the eager trace cannot show, and that figure is high; default torch.compile removes only the launches
               of the kernels it fuses away (unfused-elementwise's figure), not the launch cost of those that stay
               nor the Python between them, so this finding predicts nothing for it. Inputs: kernels and launches
               per step, CPU time inside operators, GPU busy time; the CPU's speed without the profiler measured,
               or estimated between 3 and 7 µs per recorded event.""",
               confidence="medium")
def launch_bound(p: Section, ctx: Context) -> PHit | None:
    L = p.launch or Launch()
    if L.kernels_per_step < 50 or L.graph_launches_per_step >= 1 or recovered(p, "launch-bound")[1] < 5:
        return None
    ms, _, conf, note = cpu_side(p, "launch-bound", 5, "compile-cudagraphs")
    t, o = p.timeline or Timeline(), p.overhead or Overhead()
    step = step_ms(p)
    return PHit(f"{L.kernels_per_step:.0f} kernels per step, median {L.median_kernel_us} µs; the CPU takes "
                f"{t.cpu_step_ms:.2f} ms per step profiled (≈ {t.cpu_step_ms * o.cpu_scale:.2f} ms without "
                f"the profiler) against {p.busy_ms:.2f} ms of GPU work; idle while the CPU dispatched: "
                f"{p.idle_by_reason_ms.get('cpu dispatch', 0.0):.2f} ms per step (profiled); a graph cannot make the "
                f"step shorter than the GPU's busy time, so at most the {fmt(max(0.0, step - p.busy_ms))} ms the GPU "
                f"idles in the {fmt(step)} ms step without the profiler ({o.method})" + note + _eager_optimizer(p), ms,
                claims={"cpu dispatch": p.idle_by_reason_ms.get("cpu dispatch", 0.0)}, confidence=conf)


def _eager_optimizer(p: Section) -> str:
    """What compiling the model alone leaves: the figure above graphs the whole step, the optimizer step too
    (capturable=True); torch.compile(model, mode='reduce-overhead') captures the forward and backward only."""
    L = p.launch or Launch()
    n, g = L.optimizer_launches_per_step, p.whatif.get("compile-cudagraphs")
    if not n or g is None or n < 0.25 * L.launches_per_step:  # (a fused or foreach optimizer's few: not worth a word)
        return ""
    return (f"; {n:g} of the launches per step are the optimizer step's, which compiling the model with graphs "
            f"(mode='reduce-overhead') leaves eager: compiled so, ≈ {fmt(g.ms)} ms ({g.pct:.0f}%; measure it: perfstack "
            "try --fix compile-cudagraphs); the rest needs the optimizer step captured too (capturable=True) or "
            "fused (fused=True)")


@profile_check("host-sync", "framework", "Host-device synchronizations inside the step",
               doc="""Fires when a step has more than one blocking sync (cudaStreamSynchronize,
               cudaDeviceSynchronize, cudaEventSynchronize, blocking cudaMemcpy: from .item(), .cpu(), print of
               a tensor, torch.cuda.synchronize()) and replaying the step with only its last sync recovers ≥ 1%.
               While the CPU waits it is not launching; once the queue is drained the GPU waits for the launches
               that follow. When the CPU is the bottleneck anyway, removing the syncs recovers little, and the
               finding says so.""",
               why="A sync drains the GPU queue, so the GPU idles until the CPU launches again; in a GPU-bound loop "
                   "that serializes CPU and GPU work.",
               fix="Keep values on the GPU (accumulate the loss as a tensor, read it once per N steps), avoid "
                   ".item()/.cpu()/print(tensor)/torch.cuda.synchronize() in the step; use non_blocking copies and "
                   "CUDA events for timing.",
               assumptions="""Only the last sync of each step is needed; a removed sync's wait becomes GPU work
               queued behind the CPU. Inputs: each sync's call and wait, the launches around it; the CPU's speed
               without the profiler measured or estimated.""",
               confidence="high")
def host_sync(p: Section, ctx: Context) -> PHit | None:
    s = p.sync or Sync()
    if s.calls_per_step <= 1 or recovered(p, "host-sync")[1] < 1:
        return None
    ms, _, conf, note = cpu_side(p, "host-sync", 1)
    names = ", ".join(f"{n} {c:g}" for n, c in s.by_name.items())
    return PHit(f"{s.calls_per_step:g} blocking syncs per step ({names}); the CPU waited "
                f"{fmt(s.wait_ms_per_step)} ms per step in them (profiled); with one sync per step the replayed "
                f"step is {fmt(ms)} ms shorter" + note, ms, claims={"sync": p.idle_by_reason_ms.get("sync", 0.0)},
                confidence=conf)


@profile_check("allocator-churn", "allocator", "cudaMalloc/cudaFree in the steady state",
               doc="""Fires when cudaMalloc/cudaFree (or torch.cuda.empty_cache) run in profiled steps after warm-up
               and replaying the step without them (and without the device syncs cudaFree makes) recovers ≥ 1%.""",
               why="cudaFree is device-synchronizing and cudaMalloc costs 10 µs-ms; a step that allocates afresh "
                   "serializes the CPU and GPU.",
               fix="Remove torch.cuda.empty_cache() from the loop; keep shapes stable (pad/bucket variable sizes); "
                   "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True for fragmentation.",
               measure=("expandable-segments",),
               assumptions="""The caching allocator serves every request once shapes are stable: the cudaMalloc/
               cudaFree calls and cudaFree's device syncs go, nothing else changes. Work that also follows a
               changing shape (cuBLAS picking a kernel for each new shape) is not counted, so the figure can be
               low.""",
               confidence="medium")
def allocator_churn(p: Section, ctx: Context) -> PHit | None:
    a = p.allocator or Allocator()
    if a.calls_per_step < 1 or recovered(p, "allocator-churn")[1] < 1:
        return None
    ms, _, conf, note = cpu_side(p, "allocator-churn", 1, "expandable-segments")
    names = ", ".join(f"{n} {c:g}" for n, c in a.by_name.items())
    return PHit(f"{a.calls_per_step:g} allocator calls per step ({names}) taking {fmt(a.ms_per_step)} ms "
                f"(profiled); the GPU was idle {fmt(a.idle_ms_per_step)} ms per step in gaps dominated by them" + note,
                ms, claims={"allocator": a.idle_ms_per_step}, confidence=conf)
