"""Profile rules: pure functions of a profile summary (``summary.summarize``) to findings, each with
the time per step its fix would recover, ranked by it.

Each is registered with ``@profile_check`` in the profile checks' own registry (``registry.py``,
which says what a check, a hit and its context are); ``evaluate`` runs them in ``ORDER``.

Recoverable time. Each fix is replayed through the CPU/GPU model (``simulate``; the scenarios are
computed in ``summary.whatifs``): the step without the change minus the step with it, with
CPU-side time corrected for the profiler's overhead (``summary.overhead``). Each figure is the
gain of that fix alone; two fixes of the same time (a sync removed, a CUDA graph) overlap, and
the report says so rather than adding them up. Percentages are of the step without the profiler
(measured when given, else estimated), and a finding whose severity differs between the profiled
trace and the corrected one says so.
"""

from __future__ import annotations


from perfstack.model import Finding, Severity
from perfstack.profile.records import Allocator, Comm, Compiled, Launch, Overhead, Section, Sync, Timeline, WhatIf
from perfstack.profile.telemetry import telemetry_summary  # noqa: F401  (the summary's entry point)
from perfstack.profile.registry import PROFILE_CHECKS, Context, PHit, ProfileCheck, profile_check, severity_for
from perfstack.sources import BOOK


def _f(x: float, nd: int = 2) -> str:
    return f"{x:.{nd}f}"


# -- rules ---------------------------------------------------------------------------------------


def _w(p: Section, fid: str) -> tuple[float, float]:
    """(ms, pct) a fix would recover per step, corrected for the profiler's overhead."""
    w = p.whatif.get(fid) or WhatIf()
    return w.ms, w.pct


def _step(p: Section) -> float:
    """The step without the profiler where it was measured or estimated, else the profiled one."""
    return (p.overhead.step_ms if p.overhead else None) or _profiled(p)


def _profiled(p: Section) -> float:
    return p.step_ms or 0.0  # a summary always states its step time


def _gpu_ms(p: Section, ms: float) -> str:
    return f"{ms:.2f} ms of GPU time per step"


# -- CPU side: the GPU waits for the host ----------------------------------------------------------

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
               measure=("dataloader-workers",))
def dataloader_stall(p: Section, ctx: Context) -> PHit | None:
    ms, pct = _w(p, "dataloader-stall")
    if not p.data_wait_ms or pct < 5:
        return None
    return PHit(f"the DataLoader's __next__ ran {_f(p.data_wait_ms)} ms per step on the main thread (profiled); "
                f"the GPU was idle {_f(p.data_wait_idle_ms)} ms per step waiting for it", ms,
                claims={"data loading": p.data_wait_idle_ms})


@profile_check("launch-bound", "framework", "CPU dispatch is the critical path (many small kernels)",
               doc="""Fires when ≥ 50 kernels run per step outside CUDA graphs and replaying the step with
               CUDA-graph dispatch (the CPU time spent inside operators removed, ≈ 1 µs per kernel replayed)
               recovers ≥ 5% of the step after the profiler's CPU overhead is removed. A GPU-bound step (the CPU
               runs ahead) recovers nothing this way, and the rule stays silent.""",
               why="Eager PyTorch pays ~5-20 µs of CPU per op; when kernels are shorter than that the GPU waits "
                   "for the CPU. CUDA Graphs typically cut iteration time 20-30% and far more for tiny models.",
               fix="Capture the step in a CUDA graph (torch.cuda.CUDAGraph / torch.compile(mode='reduce-overhead')), "
                   "or torch.compile(model) to fuse the small kernels, or raise the batch size so each kernel does "
                   "more work; use fused optimizers (fused=True).",
               measure=("compile",))
def launch_bound(p: Section, ctx: Context) -> PHit | None:
    L = p.launch or Launch()
    ms, pct = _w(p, "launch-bound")
    if L.kernels_per_step < 50 or L.graph_launches_per_step >= 1 or pct < 5:
        return None
    t, o = p.timeline or Timeline(), p.overhead or Overhead()
    return PHit(f"{L.kernels_per_step:.0f} kernels per step, median {L.median_kernel_us} µs; the CPU takes "
                f"{t.cpu_step_ms:.2f} ms per step profiled (≈ {t.cpu_step_ms * o.cpu_scale:.2f} ms without "
                f"the profiler) against {p.busy_ms:.2f} ms of GPU work; idle while the CPU dispatched: "
                f"{p.idle_by_reason_ms.get('cpu dispatch', 0.0):.2f} ms per step (profiled)", ms,
                claims={"cpu dispatch": p.idle_by_reason_ms.get("cpu dispatch", 0.0)})


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
                   "CUDA events for timing.")
def host_sync(p: Section, ctx: Context) -> PHit | None:
    s = p.sync or Sync()
    ms, pct = _w(p, "host-sync")
    if s.calls_per_step <= 1 or pct < 1:
        return None
    names = ", ".join(f"{n} {c:g}" for n, c in s.by_name.items())
    return PHit(f"{s.calls_per_step:g} blocking syncs per step ({names}); the CPU waited "
                f"{_f(s.wait_ms_per_step)} ms per step in them (profiled); with one sync per step the replayed "
                f"step is {_f(ms)} ms shorter", ms, claims={"sync": p.idle_by_reason_ms.get("sync", 0.0)})


@profile_check("allocator-churn", "allocator", "cudaMalloc/cudaFree in the steady state",
               doc="""Fires when cudaMalloc/cudaFree (or torch.cuda.empty_cache) run in profiled steps after warm-up
               and replaying the step without them (and without the device syncs cudaFree makes) recovers ≥ 1%.""",
               why="cudaFree is device-synchronizing and cudaMalloc costs 10 µs-ms; a step that allocates afresh "
                   "serializes the CPU and GPU.",
               fix="Remove torch.cuda.empty_cache() from the loop; keep shapes stable (pad/bucket variable sizes); "
                   "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True for fragmentation.",
               measure=("expandable-segments",))
def allocator_churn(p: Section, ctx: Context) -> PHit | None:
    a = p.allocator or Allocator()
    ms, pct = _w(p, "allocator-churn")
    if a.calls_per_step < 1 or pct < 1:
        return None
    names = ", ".join(f"{n} {c:g}" for n, c in a.by_name.items())
    return PHit(f"{a.calls_per_step:g} allocator calls per step ({names}) taking {_f(a.ms_per_step)} ms "
                f"(profiled); the GPU was idle {_f(a.idle_ms_per_step)} ms per step in gaps dominated by them", ms,
                claims={"allocator": a.idle_ms_per_step})


# -- GPU side: what a busy GPU wastes ----------------------------------------------------------------

@profile_check("unfused-elementwise", "framework", "Chains of unfused element-wise kernels",
               doc="""Finds runs of consecutive eager element-wise, reduction and copy kernels on a stream (same
               step and phase, no GEMM between them). Kernels of a run that touch data of the same size are taken
               for one dataflow: fused, they read its largest tensor once and write it once (bytes at 90% of the
               HBM peak, at least 2.5 µs), everything in between staying in registers; kernels on data of other
               sizes keep their own traffic. The shorter kernels are replayed through the step model; on a step
               bound by its GPU the fused ops also stop dispatching, while on a CPU-bound step only GPU time
               counts (compiled code has a per-call CPU cost the eager trace cannot show). Fires at ≥ 2%.""",
               why="Each eager element-wise op streams its inputs and outputs through HBM; a transformer step runs "
                   "hundreds of them (casts, bias, GELU, dropout, residual adds, norms) between the GEMMs, often "
                   "half of the GPU time on a busy GPU.",
               fix="torch.compile(model) (Inductor fuses element-wise chains and reductions into Triton kernels); "
                   "use fused modules where available (fused LayerNorm/RMSNorm, fused AdamW, fused cross-entropy).",
               measure=("compile",))
def unfused_elementwise(p: Section, ctx: Context) -> PHit | None:
    ms, pct = _w(p, "unfused-elementwise")
    e = p.waste.unfused_elementwise
    if e is None or pct < 2:
        return None
    ev = (f"{e.chains_per_step:g} chains of {e.kernels_per_step:g} eager element-wise/copy kernels per "
          f"step take {_f(e.eager_ms)} ms of GPU time; fused, they would move their largest tensors once: "
          f"≈ {_f(e.fused_ms)} ms (most time in {', '.join(e.top_ops[:4])})")
    comp = p.compiled
    if comp is not None and comp.regions_per_step:
        # compiled code is in use: the eager chains are what runs between compiled regions
        return PHit(ev + f"; {comp.regions_per_step:g} compiled regions per step ({comp.distinct_regions} "
                         "distinct): these chains run eagerly between them", ms,
                    fix="Find the graph breaks that leave these ops eager (TORCH_LOGS=graph_breaks, "
                        "torch._dynamo.explain(model)(inputs)) and remove them (data-dependent Python control flow, "
                        ".item(), unsupported calls); compile the loss and optimizer step too.")
    return PHit(ev, ms)


@profile_check("recompiles", "framework", "torch.compile recompiles inside the steady state",
               doc="""Fires when compilation (TorchDynamo/Inductor ranges timed by dynamo) runs inside profiled steps
               after warm-up. Recoverable = that compile time per step (it blocks the CPU while the GPU drains).""",
               why="A recompile costs seconds of CPU and typically repeats whenever a shape, dtype or guarded Python "
                   "value changes; in the steady state every step should hit the compile cache.",
               fix="Find the cause with TORCH_LOGS=recompiles; mark dynamic dimensions (torch._dynamo.mark_dynamic "
                   "or dynamic=True), pad or bucket variable shapes, avoid guarding on Python scalars that change.")
def recompiles(p: Section, ctx: Context) -> PHit | None:
    c = p.compiled or Compiled()
    ms = c.compile_ms_per_step
    if ms < 0.01 * _step(p):
        return None
    return PHit(f"{_f(ms)} ms per step compiling inside the profiled steps ({c.distinct_regions} distinct "
                "compiled regions)", ms)


@profile_check("large-vocab-loss", "framework", "The loss over a large vocabulary streams fp32 logits",
               doc="""Finds the element-wise and copy kernels of cross-entropy / log-softmax / NLL (forward and
               backward, with the logits' upcast) over a last dimension ≥ 16384. A fused or chunked loss reads
               the 16-bit logits once and writes their gradient once; fires at ≥ 2% of the step.""",
               why="At a 50k vocabulary the N×V logits are the largest tensor of a language model step; upcasting "
                   "them to fp32 and running softmax, NLL and their backward separately moves them through HBM "
                   "many times.",
               fix="Use a fused cross-entropy (torch.compile of the loss, Liger's FusedLinearCrossEntropy, "
                   "Apex/xentropy) or compute the loss in chunks of rows; keep logits in bf16 into the fused loss.",
               measure=("compile",))
def large_vocab_loss(p: Section, ctx: Context) -> PHit | None:
    ms, pct = _w(p, "large-vocab-loss")
    e = p.waste.large_vocab_loss
    if e is None or pct < 2:
        return None
    return PHit(f"the loss over a {e.vocab}-wide vocabulary ({e.rows} rows{', fp32' if e.fp32 else ''}) "
                f"runs {e.kernels_per_step:g} kernels taking {_f(e.time_ms)} ms per step; reading the logits "
                f"once and writing their gradient once takes ≈ {_f(e.fused_ms)} ms", ms)


@profile_check("attention-unfused", "framework", "Attention materializes the S×S score matrix",
               doc="""Finds attention computed as matmul → mask → softmax → matmul (by hand, or SDPA's math path):
               batched GEMMs producing or consuming a square S×S matrix (S ≥ 128, head dim ≤ 256) and the
               element-wise kernels on it. A flash kernel does the same FLOPs (half, when a mask is applied to the
               scores: taken as causal) at 33% of the 16-bit peak without writing the scores; fires at ≥ 2%.""",
               why="The score matrix is S² per head: at S = 2048 it dwarfs Q, K and V, and every mask, softmax and "
                   "dropout over it is a full pass through HBM; flash attention keeps it in on-chip memory.",
               fix="Use torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) (flash / "
                   "memory-efficient / cuDNN backends) with 16-bit q, k, v; for Hugging Face models "
                   "attn_implementation='sdpa' or 'flash_attention_2'.",
               measure=("compile",))
def attention_unfused(p: Section, ctx: Context) -> PHit | None:
    ms, pct = _w(p, "attention-unfused")
    e = p.waste.attention_unfused
    if e is None or pct < 2:
        return None
    how = "SDPA's math path" if e.math_path else "matmul + softmax + matmul"
    return PHit(f"attention as {how}: {e.kernels_per_step:g} kernels per step take {_f(e.time_ms)} ms at "
                f"{e.tflops:g} TFLOP/s; a flash kernel would take ≈ {_f(e.flash_ms)} ms"
                + (" (the mask over the scores taken as causal: the kernel skips its masked half)" if e.masked
                   else ""), ms)


@profile_check("fp32-conv", "framework", "Convolutions in fp32",
               doc="""Finds convolution kernels (cuDNN fprop/dgrad/wgrad, launched by convolution ops) whose inputs
               are fp32. With bf16 autocast and channels_last they run on the Tensor Cores at the 16-bit rate
               (modelled at 33% of the dense bf16 peak, what ResNet-50's convolutions reach on an H100 in the
               validation traces), the fp32 element-wise work around them (batch norm, ReLU, adds) moves half the
               bytes, and cuDNN's layout transposes disappear; fires at ≥ 2% of the step.""",
               why="fp32 convolutions run on the CUDA cores (or TF32 at best); ResNet-style training is several "
                   "times faster in bf16 with channels_last.",
               fix="torch.autocast('cuda', torch.bfloat16); model.to(memory_format=torch.channels_last) and "
                   "channels_last inputs; torch.backends.cudnn.benchmark = True for fixed input shapes.",
               measure=("channels-last", "bf16-autocast"))
def fp32_conv(p: Section, ctx: Context) -> PHit | None:
    ms, pct = _w(p, "fp32-conv")
    e = p.waste.fp32_conv
    if e is None or pct < 2:
        return None
    tc = "TF32" if e.tf32_kernels_pct >= 50 else "no Tensor Cores"
    return PHit(f"fp32 convolutions ({tc}) take {_f(e.conv_ms)} ms per step at {e.tflops:g} TFLOP/s; in bf16 "
                f"≈ {_f(e.bf16_ms)} ms; fp32 element-wise work around them {_f(e.elementwise_fp32_ms)} ms"
                + (f"; layout transposes {_f(e.layout_ms)} ms" if e.layout_ms else ""), ms)


@profile_check("fp32-matmul", "framework", "FP32 GEMMs without Tensor Cores (TF32 off)",
               doc="""Fires when GEMM kernels run in FP32 on the CUDA cores (kernel names sgemm / gemmSN / ffma /
               simt / f32f32_f32f32 without tf32, or FP32 inputs under float32_matmul_precision 'highest').
               Their time shrinks by (TF32 peak × 0.72) / (FP32 peak × 0.77), the spec table's dense peaks times
               the practical cuBLAS ceilings; replayed through the step model, fires at ≥ 1%.""",
               why="On Ampere/Hopper TF32 Tensor Cores are ~7× (A100: 8×) the FP32 CUDA-core peak, with a 10-bit "
                   "mantissa that training tolerates.",
               fix="torch.set_float32_matmul_precision('high') (TF32) or train in bf16 autocast "
                   "(torch.autocast('cuda', torch.bfloat16)).",
               measure=("tf32",))
def fp32_matmul(p: Section, ctx: Context) -> PHit | None:
    ms, pct = _w(p, "fp32-matmul")
    e = p.waste.fp32_matmul
    if e is None or pct < 1:
        return None
    return PHit(f"{e.kernels_per_step:g} FP32 GEMM kernels per step without Tensor Cores take {_f(e.time_ms)} ms"
                + (f" at {e.tflops:g} TFLOP/s" if e.tflops else "") +
                f"; TF32 speedup {e.speedup:g}× ({e.source})", ms)


@profile_check("gemm-misaligned", "framework", "GEMM dimensions not aligned for Tensor Cores",
               doc="""Fires when a GEMM (aten::mm/addmm/bmm/linear, from Input Dims) has M, N or K not a multiple
               of 8 for 16-bit types, 16 for 8-bit, 4 for TF32 — except GEMVs (M or N ≤ 16, e.g. batch-1 decode),
               which are bound by reading the weights whatever their alignment. The misaligned GEMMs are brought
               to the throughput aligned GEMMs of the same dtype reach in this trace (or 80% of the dense peak)
               and replayed; fires at ≥ 1%.""",
               why="cuBLAS picks slower kernels (align1/align2, no TMA) for unaligned leading dimensions; "
                   "NVIDIA's guide asks for multiples of 8 (16-bit) or 16 (8-bit) elements.",
               fix="Pad hidden sizes, vocabulary and batch×sequence to a multiple of 64 (at least 8): e.g. "
                   "nn.Linear(4096, 4096) instead of 4095/4097; pad the vocab with pad_to_multiple_of=64.")
def gemm_misaligned(p: Section, ctx: Context) -> PHit | None:
    ms, pct = _w(p, "gemm-misaligned")
    e = p.waste.gemm_misaligned
    if e is None or pct < 1:
        return None
    parts = [f"{g.dtype} GEMMs {', '.join(g.shapes)} take {_f(g.time_ms)} ms/step at {g.tflops:g} TFLOP/s "
             f"against {g.expect_tflops:g} TFLOP/s ({g.source})" for g in e.groups]
    return PHit("; ".join(parts), ms)


@profile_check("pageable-memcpy", "framework", "Host-to-device copies from pageable memory",
               doc="""Fires when host↔device copies read or write pageable host memory. Pinned memory runs them at
               the rate of the fastest pinned copy in the trace (or the PCIe link's practical pinned rate from the
               spec table) and lets them overlap compute (non_blocking=True); replayed, fires at ≥ 1%.""",
               why="Pageable copies are staged through a bounce buffer by the driver: half the bandwidth or less, "
                   "and they block the host.",
               fix="DataLoader(pin_memory=True) or tensor.pin_memory() once for reused host buffers; then "
                   ".to(device, non_blocking=True).",
               measure=("pin-memory",))
def pageable_memcpy(p: Section, ctx: Context) -> PHit | None:
    ms, pct = _w(p, "pageable-memcpy")
    e = p.waste.pageable_memcpy
    if e is None or pct < 1:
        return None
    return PHit(f"pageable copies move {e.bytes_per_step / 2**20:.0f} MiB per step in {_f(e.time_ms)} ms "
                f"({e.gbps:g} GB/s) against {e.pinned_gbps:g} GB/s for {e.source}", ms)


@profile_check("optimizer-not-fused", "framework", "The optimizer step is not fused",
               doc="""Fires when the kernels Optimizer.step launches include no fused optimizer op (foreach or a
               per-parameter loop). A fused Adam(W) reads and writes parameters and moments and reads gradients
               once: 28 bytes per fp32 parameter at 90% of the HBM peak; replayed, fires at ≥ 2%.""",
               why="The foreach optimizer launches one kernel per operation per tensor group and streams the "
                   "parameters several times; a per-parameter loop launches thousands of tiny kernels.",
               fix="torch.optim.AdamW(params, fused=True) (or Adam/SGD fused=True); capturable=True inside CUDA graphs.",
               measure=("fused-optimizer",))
def optimizer_not_fused(p: Section, ctx: Context) -> PHit | None:
    ms, pct = _w(p, "optimizer-not-fused")
    e = p.waste.optimizer_not_fused
    if e is None or pct < 2:
        return None
    return PHit(f"Optimizer.step runs {e.kernels_per_step:g} kernels taking {_f(e.time_ms)} ms per step for "
                f"{e.params / 1e6:.1f} M parameters; fused: ≈ {_f(e.fused_ms)} ms", ms)


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
                   "(async_op=True) per bucket as gradients become ready.")
def comm_not_overlapped(p: Section, ctx: Context) -> PHit | None:
    c, step = p.comm or Comm(), _step(p)
    m = c.extra.get("if_overlapped")
    if not step or not m or m["recoverable_ms"] < 0.05 * step:
        return None
    fix = None
    if m.get("ddp"):  # already DistributedDataParallel: its buckets are what to tune
        fix = ("The model is already under DistributedDataParallel: check that its all-reduces start during "
               "backward (no find_unused_parameters unless needed, static_graph=True for a fixed graph), tune "
               "bucket_cap_mb (25-100) and gradient_as_bucket_view=True; with gradient accumulation, run every "
               "micro-batch but the last under model.no_sync().")
    return PHit(f"NCCL kernels {_f(c.ms_per_step)} ms per step, {_f(c.exposed_ms_per_step)} ms of it with nothing "
                f"else running ({c.overlap_pct:.0f}% overlapped with compute); of the exposed time "
                f"{_f(m['wait_ms'])} ms is waiting for other ranks and {_f(m['tail_ms'])} ms is the last of "
                f"{m['buckets']} gradient buckets (reduced after backward in any case); {_f(m['hideable_ms'])} ms fits "
                f"under the {_f(m['free_backward_ms'])} ms of backward GPU work not yet overlapped, less "
                f"{m['contention']:.0%} lost to contention: overlapped collectives slow the kernels beside them "
                f"({m['contention_source']})", m["recoverable_ms"], fix=fix)


# -- work the step repeats -----------------------------------------------------------------------

@profile_check("copy-bound", "framework", "Device-to-device copies of tensors the step grows",
               doc="""Finds the device-to-device copies launched by copy operators (cat, stack, index, index_select,
               gather, clone, contiguous, copy_; casts excluded) and the bytes they move (``profile/copies.py``).
               A cat that writes a tensor growing from call to call along the dimension it concatenates (a KV cache
               extended every token) re-copies what the tensor already holds: preallocated and written in place,
               each call writes only the new part, at 90% of the HBM peak (at least 2.5 µs a copy); the copies' new
               durations are replayed through the step model, and it fires at ≥ 2% of the step. Copies of tensors
               that do not grow are named once they take ≥ 25% of the GPU time (info: no time claimed, since
               whether a view can replace them depends on the code). Not counted: attention over a preallocated
               cache's full length (HF's static cache reads its whole length under a mask).""",
               why="Concatenating onto a tensor copies everything it already holds: a KV cache grown by torch.cat "
                   "reads and writes the whole cache of every layer for every token, so the copies grow with the "
                   "context and soon outweigh the attention that reads the cache once.",
               fix="Preallocate and write in place: a static KV cache (model.generate(..., "
                   "cache_implementation='static') for Hugging Face models; by hand, allocate the cache at its "
                   "maximum length once and write each token into it, cache[:, :, pos] = k, then attend over "
                   "cache[:, :, :pos + 1]); collect pieces in a list and concatenate once, or write them into a "
                   "preallocated buffer; use views (slicing, view, narrow, expand) instead of clone/contiguous/"
                   "index_select where the data need not move.",
               measure=("static-kv-cache",))
def copy_bound(p: Section, ctx: Context) -> PHit | None:
    e = p.waste.copy_bound
    if e is None:
        return None
    ops = "; ".join(f"{o.op} ({', '.join(o.kernels[:2])}) {_f(o.time_ms)} ms, {o.bytes_per_step / 1e9:.2f} GB, "
                    f"{o.calls_per_step:g} calls" + (f", growing: {o.growth}" if o.growing else "") for o in e.ops[:3])
    ev = (f"device-to-device copies take {_f(e.copy_ms)} ms per step ({e.pct_of_busy:.0f}% of the GPU time), moving "
          f"{e.bytes_per_step / 1e9:.2f} GB per step (read + written) at {e.gbps:g} GB/s: {ops}")
    if e.growing_ms:
        ms, pct = _w(p, "copy-bound")
        if pct < 2:
            return None
        return PHit(ev + f"; {_f(e.growing_ms)} ms of them copy tensors that grow, "
                         f"{e.avoidable_bytes_per_step / 1e9:.2f} GB per step of it data already in place; written in "
                         f"place, the new data takes ≈ {_f(e.fixed_ms)} ms at {e.hbm_gbps:g} GB/s", ms)
    return PHit(ev + "; none of them grows from call to call, so perfstack cannot tell whether views or in-place "
                     "writes can replace them", 0.0, severity="info")


@profile_check("activation-recompute", "framework", "Activation checkpointing recomputes the forward in backward",
               doc="""Finds forward operators (linear, matmul, norms, attention, activations, embeddings,
               convolutions) run inside an autograd node of the backward pass: checkpointed regions recomputed
               (``profile/recompute.py``). Their GPU time is the recompute's. The memory a region would keep is the
               inputs its forward operators save for backward; the headroom is the device's memory less the
               allocator's peak in the trace's [memory] events (profile_memory=True), 1 GiB for the CUDA context
               and 10% of the device. Where the headroom holds N regions, their recompute is removed and the step
               replayed (fires at ≥ 2%): 'turn checkpointing off for N layers', with the memory it adds. Without
               memory events it cannot tell (info, no time claimed); where the memory does not allow it, silent.""",
               why="Checkpointing trades memory for a second forward pass: about a third more compute per step. "
                   "Where the GPU has memory to spare, that compute buys nothing.",
               fix="Turn activation checkpointing off where the memory allows: drop torch.utils.checkpoint on some "
                   "blocks (checkpoint every other block, or only the first ones), model.gradient_checkpointing_"
                   "disable() for Hugging Face models; check the peak with torch.cuda.max_memory_allocated().",
               measure=("no-checkpointing",))
def activation_recompute(p: Section, ctx: Context) -> PHit | None:
    e = p.waste.activation_recompute
    step = _step(p)
    if e is None or not step:
        return None
    gib = 2.0**30
    ev = (f"the backward pass re-runs the forward of {e.regions_per_step:g} checkpointed regions per step "
          f"({e.kernels_per_step:g} kernels, {_f(e.time_ms)} ms of GPU time; most in {', '.join(e.top_ops[:3])}); "
          f"each region's activations would take ≈ {e.region_bytes / gib:.2f} GiB")
    if e.layers_off:
        ms, pct = _w(p, "activation-recompute")
        if pct < 2:
            return None
        return PHit(ev + f"; the device has {(e.total_memory or 0) / gib:.1f} GiB and the allocator's peak was "
                         f"{(e.peak_reserved or 0) / gib:.1f} GiB reserved: turn checkpointing off for "
                         f"{e.layers_off} of the {e.regions_per_step:g} layers, ≈ {e.added_bytes / gib:.1f} GiB more",
                    ms,
                    fix=f"Turn activation checkpointing off for {e.layers_off} of the {e.regions_per_step:g} "
                        f"checkpointed layers (≈ {e.added_bytes / gib:.1f} GiB more at the peak): call "
                        "torch.utils.checkpoint on the other layers only (Hugging Face: gradient_checkpointing_"
                        "disable() when it is all of them); check the peak with torch.cuda.max_memory_allocated().")
    if e.peak_reserved is not None or e.time_ms < 0.02 * step:
        return None  # the memory does not allow it, or too little to matter
    return PHit(ev + f" ({100 * e.time_ms / step:.0f}% of the step); perfstack cannot tell whether the memory allows "
                     f"keeping them: {e.memory_source}; record the trace with profile_memory=True, or measure it: "
                     "perfstack try --fix no-checkpointing", 0.0, severity="info")


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
               measure=("ddp-no-sync",))
def ddp_sync_per_microbatch(p: Section, ctx: Context) -> PHit | None:
    e = p.waste.ddp_sync_per_microbatch
    ms, pct = _w(p, "ddp-sync-per-microbatch")
    if e is None or pct < 2:
        return None
    return PHit(f"DDP all-reduced the gradients after {e.rounds:g} of the {e.micro_batches:g} micro-batches of each "
                f"optimizer step ({e.kernels_per_round:g} all-reduce kernels, {_f(e.round_ms)} ms per round); the "
                f"{e.rounds - 1:g} extra rounds take {_f(e.extra_ms)} ms per step, {_f(e.extra_exposed_ms)} ms of it "
                f"with nothing else on the GPU and {_f(e.extra_wait_ms)} ms waiting for the other ranks (it moves to "
                f"the last round); compute under them lost {e.contention:g} ms per ms overlapped", ms)


CPU_REASONS = ("data loading", "allocator", "sync", "cpu dispatch", "cpu outside ops")


@profile_check("gpu-idle", "framework", "GPU idle inside the step",
               doc="""Fires when the GPU is idle for ≥ 10% of the step after removing the idle time other findings
               explain (data loading, allocator, syncs, CPU dispatch when launch-bound fired). Idle the CPU caused
               is scaled by the profiler-overhead correction (it shrinks without the profiler); GPU-side bubbles
               between queued kernels are not. The evidence lists the largest gaps and their causes.""",
               why="Dashboards should make you investigate below ~90% GPU busy; every idle microsecond in a step "
                   "is time the step could be shorter.",
               fix="Look at the largest gaps: move CPU work out of the step (logging, metrics, Python bookkeeping), "
                   "overlap it with GPU work (non_blocking copies, CUDA streams), or capture the step in a CUDA "
                   "graph / torch.compile.")
def gpu_idle(p: Section, ctx: Context) -> PHit | None:
    step = _step(p)
    if not step or not p.busy_ms:
        return None
    scale = (p.overhead or Overhead()).cpu_scale
    rest = 0.0
    for reason, ms in p.idle_by_reason_ms.items():
        if reason in ctx.claimed:
            continue
        rest += ms * scale if reason in CPU_REASONS else ms
    # the corrected step cannot be shorter than its GPU work: idle is at most what is left
    rest = min(rest, max(0.0, step - p.busy_ms))
    if rest < 0.10 * step:
        return None
    gaps = [g for g in p.idle_gaps if g.reason not in ctx.claimed][:3]
    gtxt = "; ".join(f"{g.duration_ms:.2f} ms in step {g.step} ({g.reason}, before {g.after[:40]})"
                     for g in gaps)
    cpu_idle = sum(ms for r, ms in p.idle_by_reason_ms.items() if r in CPU_REASONS and r not in ctx.claimed)
    ev = (f"GPU busy {p.busy_pct:.0f}% of the {_f(_profiled(p))} ms profiled step; ≈ {_f(rest)} ms per step of "
          f"idle time without the profiler is not explained by another finding")
    if p.timeline and p.timeline.bound == "cpu" and cpu_idle >= 0.5 * sum(p.idle_by_reason_ms.values()):
        # The GPU waits for host code: the figure is what a step with no host time would gain, an upper bound
        ev += (f"; the step is CPU-bound: ≈ {_f(p.timeline.cpu_step_ms * scale)} ms of CPU per step without the "
               f"profiler for {_f(p.busy_ms)} ms of GPU work, so the figure is an upper bound")
        return PHit(ev + (f"; largest gaps: {gtxt}" if gtxt else ""), rest,
                    fix="Give the GPU more work per launch (a larger batch), move host work out of the step "
                        "(logging, metrics, Python bookkeeping, data preparation into DataLoader workers), or remove "
                        "the dispatch cost with a CUDA graph / torch.compile(mode='reduce-overhead').")
    return PHit(ev + (f"; largest gaps: {gtxt}" if gtxt else ""), rest)


# -- multi-rank and telemetry --------------------------------------------------------------------
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
                   "throttling (perfstack doctor) and its data loading.")
def straggler_rank(p: Section, ctx: Context) -> PHit | None:
    s = p.straggler
    step = _profiled(p)
    if not s or not step:
        return None
    if s.verdict in ("gpu work", "wait") and s.recoverable_ms >= 0.05 * step:
        ev = (f"rank {s.rank} does {_f(s.gpu_work_ms)} ms of GPU work per step (NCCL and idle left out) against a "
              f"median {_f(s.others_gpu_work_ms)} ms on the other ranks")
        if s.input_ratio is not None and abs(s.input_ratio - 1) >= 0.1:
            ev += f", and copies {s.input_ratio:.2f}× their input bytes to the GPU"
        if s.wait_ms > s.profiler_ms:
            ev += (f"; its CPU-caused idle is {_f(s.wait_ms)} ms above theirs, {_f(s.wait_ms - s.profiler_ms)} ms "
                   f"beyond the profiler's own CPU time in its step ({_f(s.profiler_ms)} ms)")
        return PHit(ev + f"; the largest difference is {s.cause}", s.recoverable_ms, subject=f"rank{s.rank}")
    if s.excess_ms < 0.05 * step:
        return None
    world = len(p.ranks) if p.ranks else 2
    return PHit(f"rank {s.rank} spends {_f(s.non_comm_ms)} ms per step outside communication against a median "
                f"{_f(s.others_median_ms)} ms on the other ranks (profiled), but its GPU work is "
                f"{_f(s.gpu_work_ms)} ms against {_f(s.others_gpu_work_ms)} ms and the difference is CPU-caused idle "
                f"({_f(s.wait_ms)} ms) no larger than the profiler's own CPU time in its step "
                f"({_f(s.profiler_ms)} ms): the profiler's overhead differs between ranks, so perfstack cannot tell a "
                f"straggler from it; time the ranks without the profiler: perfstack try --nproc {world} -- python "
                "train.py ARGS", 0.0, severity="info", subject=f"rank{s.rank}",
                fix="Nothing to fix on this evidence: time the ranks' steps without the profiler first (perfstack "
                    "try, or CUDA events around each rank's step); only a rank that is slower there is a straggler.")


@profile_check("throttled-during-run", "driver", "GPU clocks throttled during the run",
               doc="""From NVML samples taken while the workload ran (capture mode): fires when ≥ 5% of the
               samples with the GPU busy report a throttle reason (SW power cap, HW slowdown, SW/HW thermal,
               power brake). Recoverable = step × throttled fraction × (1 − mean throttled SM clock / max SM
               clock), assuming compute time scales with the clock.""",
               why="A throttled GPU runs every kernel slower; results measured under throttling understate what "
                   "the hardware can do.",
               fix="Check cooling and power limits (nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE); restore the "
                   "default power limit (nvidia-smi -pl); run perfstack doctor on the host.")
def throttled(p: Section, ctx: Context) -> PHit | None:
    t = p.telemetry
    if t is None or not t.busy_samples or t.throttled_pct < 5:
        return None
    rec = _profiled(p) * t.throttled_pct / 100 * max(0.0, 1 - t.throttled_clock_mhz / t.max_clock_mhz) \
        if t.max_clock_mhz else 0.0
    return PHit(f"{t.throttled_pct:.0f}% of {t.busy_samples} busy NVML samples throttled ({', '.join(t.reasons)}); "
                f"SM clock {t.throttled_clock_mhz:.0f} MHz when throttled vs {t.max_clock_mhz:.0f} MHz max; "
                f"max temperature {t.max_temperature_c} °C, max power {t.max_power_w} W", rec,
                severity="warning" if rec < 0.05 * _profiled(p) else None)


# -- evaluation ----------------------------------------------------------------------------------

ORDER = ("dataloader-stall", "allocator-churn", "launch-bound", "host-sync", "pageable-memcpy", "fp32-matmul",
         "fp32-conv", "gemm-misaligned", "attention-unfused", "large-vocab-loss", "unfused-elementwise",
         "optimizer-not-fused", "recompiles", "copy-bound", "activation-recompute", "ddp-sync-per-microbatch",
         "comm-not-overlapped", "straggler-rank", "throttled-during-run", "gpu-idle")


def _check_order() -> None:
    # a registered check missing from ORDER would silently never run
    if set(ORDER) != set(PROFILE_CHECKS) or len(ORDER) != len(set(ORDER)):
        raise ValueError(f"profile checks and ORDER differ: {sorted(set(ORDER) ^ set(PROFILE_CHECKS))}")


_check_order()


def evaluate(p: Section, ctx: Context) -> list[Finding]:
    """Run every profile rule over one summary; findings ranked by recoverable time."""
    out: list[Finding] = []
    for cid in ORDER:
        c = PROFILE_CHECKS[cid]
        hit = c.fn(p, ctx)
        if hit is None:
            continue
        for reason, ms in hit.claims.items():
            ctx.claimed[reason] = max(ctx.claimed.get(reason, 0.0), ms)
        out.append(to_finding(c, hit, p))
    return rank(out)


def to_finding(c: ProfileCheck, hit: PHit, p: Section) -> Finding:
    step = _step(p)
    rec = round(max(0.0, min(hit.recoverable_ms, step)), 3)
    sev = hit.severity or severity_for(rec, step)
    evidence = hit.evidence
    w = p.whatif.get(c.id)
    o = p.overhead or Overhead()
    if w and o.method in ("measured", "estimated") and not hit.severity:
        sev_prof = severity_for(w.ms_profiled, _profiled(p))
        if sev_prof != sev:
            evidence += (f" — the verdict depends on the profiler-overhead correction: {w.pct_profiled:.0f}% of the "
                         f"profiled step, {w.pct:.0f}% of the step without the profiler ({o.method})")
            if c.measure:
                evidence += f"; measure it: perfstack try --fix {','.join(c.measure)}"
    return Finding(id=c.id, layer=c.layer, severity=Severity(sev), title=c.title, evidence=evidence,
                   fix=hit.fix or c.fix, why=hit.why or c.why, sources=[p.file] if p.file else [],
                   subject=hit.subject, recoverable_ms=rec, recoverable_pct=round(100 * rec / step, 1) if step else 0.0)


def rank(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (-(f.recoverable_ms or 0), -f.severity.rank, f.id))
