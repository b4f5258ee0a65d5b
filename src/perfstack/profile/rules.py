"""Profile rules: pure functions of a profile summary (``summary.summarize``) to findings, each with
the time per step its fix would recover, ranked by it.

Each is registered with ``@profile_check`` in the profile checks' own registry (``registry.py``,
which says what a check, a hit and its context are); ``evaluate`` runs them in ``ORDER``. The GPU side's
rules are here; the CPU side's (the GPU waits for the host) are in ``rules_cpu``, the repeated-pattern
ones in ``rules_repeated`` and the multi-rank ones in ``rules_distributed``.

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
from perfstack.records.profile import Compiled, Overhead, Section
from perfstack.profile import rules_cpu, rules_distributed, rules_repeated  # noqa: F401  (they register their checks)
from perfstack.profile.recovery import correction_notes, fmt, profiled_ms, recovered, step_ms
from perfstack.profile.registry import (PROFILE_CHECKS, Context, PHit, ProfileCheck, least_confident, profile_check,
                                        severity_for)


# -- GPU side: what a busy GPU wastes ----------------------------------------------------------------

@profile_check("unfused-elementwise", "framework", "Chains of unfused element-wise kernels",
               doc="""Finds runs of consecutive eager element-wise, reduction and copy kernels on a stream (same
               step and phase, no GEMM between them). Kernels of a run that touch data of the same size are taken
               for one dataflow: fused, they write it once and read each input once (as many inputs as the member
               that reads the most of that size; in training a batch norm's statistics take one more reading
               pass), bytes at 90% of the HBM peak, at least 2.5 µs, everything in between staying in registers;
               kernels on data of other sizes keep their own traffic. Compiling also pads GEMMs with a misaligned
               dimension (Inductor's shape padding: eager GEMMs that gemm-misaligned finds faster at its aligned
               rate are replayed at that rate) and runs convolutions in channels_last (its layout optimization:
               the layout transposes around eager NCHW convolutions go). The shorter kernels are replayed through
               the step model; on a step bound by its GPU the fused ops also stop dispatching, while on a
               CPU-bound step only GPU time counts (compiled code has a per-call CPU cost the eager trace cannot
               show): that is the figure of default torch.compile. torch.compile(mode="reduce-overhead") is the
               same scenario with every launch replayed from a CUDA graph (compile-cudagraphs in the what-ifs:
               what perfstack try predicts for that fix), at most the measured step less the GPU work that
               compiling leaves. Fires at ≥ 2%.""",
               why="Each eager element-wise op streams its inputs and outputs through HBM; a transformer step runs "
                   "hundreds of them (casts, bias, GELU, dropout, residual adds, norms) between the GEMMs, often "
                   "half of the GPU time on a busy GPU.",
               fix="torch.compile(model) (Inductor fuses element-wise chains and reductions into Triton kernels), "
                   "and torch.compile of the loss function where the loss is computed outside the model (compiling "
                   "the model leaves it eager); use fused modules where available (fused LayerNorm/RMSNorm, fused "
                   "AdamW, fused cross-entropy).",
               measure=("compile",),
               assumptions="""Inductor fuses each chain of eager element-wise, reduction, norm and copy kernels
               between two GEMMs: kernels of one chain on data of the same size are one dataflow, written once and
               each input read once at 90% of the HBM peak (at least 2.5 µs a kernel); the inputs are counted as
               the most any one member reads (a trace does not name tensors: inputs shared between members count
               once, distinct ones beyond that are missed); a batch norm in training reads its inputs once more
               for its statistics (they span the batch), a layer norm's row stays on chip; data of other sizes
               keeps its traffic; the GEMMs, convolutions and attention keep their time except the misaligned
               GEMMs Inductor pads and the layout transposes its channels_last convolutions drop (what NHWC
               kernels gain beyond that is not counted). Compiled code's own CPU cost (guards, launches) is not
               in an eager trace: on a CPU-bound step only GPU time counts, and that cost can take back more (the
               CPU-bound validation step ran 9% slower compiled). With CUDA graphs (mode="reduce-overhead") every
               launch is replayed at ≈ 1 µs and the CPU time inside operators goes, as launch-bound assumes.
               What else compiling changes (Inductor's GEMM choices, random-number generation, recomputation
               in backward) is not in an eager trace: on the H200 hold-out's fp32 GPT-2 compiling gained 1.1%
               where this model gives 8.7%.""",
               confidence="medium")
def unfused_elementwise(p: Section, ctx: Context) -> PHit | None:
    ms, pct = recovered(p, "unfused-elementwise")
    e = p.waste.unfused_elementwise
    if e is None or pct < 2:
        return None
    ev = (f"{e.chains_per_step:g} chains of {e.kernels_per_step:g} eager element-wise/copy kernels per "
          f"step take {fmt(e.eager_ms)} ms of GPU time; fused, each would write its data once and read its inputs once: "
          f"≈ {fmt(e.fused_ms)} ms (most time in {', '.join(e.top_ops[:4])})")
    if e.layout_ms:
        ev += (f"; compiling also runs the convolutions in channels_last (Inductor's layout optimization): the "
               f"{fmt(e.layout_ms)} ms of layout transposes around them go")
    if e.padded_gemm_ms is not None and e.padded_gemm_fixed_ms is not None:
        ev += (f"; compiling also pads the misaligned GEMMs (Inductor's shape padding): {fmt(e.padded_gemm_ms)} ms "
               f"→ ≈ {fmt(e.padded_gemm_fixed_ms)} ms (see gemm-misaligned)")
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
                   "or dynamic=True), pad or bucket variable shapes, avoid guarding on Python scalars that change.",
               assumptions="""Every step after warm-up would hit the compile cache: the compile time inside the
               steps is all recovered. Input: the Dynamo/Inductor ranges' time in the profiled steps.""",
               confidence="high")
def recompiles(p: Section, ctx: Context) -> PHit | None:
    c = p.compiled or Compiled()
    ms = c.compile_ms_per_step
    if ms < 0.01 * step_ms(p):
        return None
    return PHit(f"{fmt(ms)} ms per step compiling inside the profiled steps ({c.distinct_regions} distinct "
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
               measure=("compile",),
               assumptions="""A fused or chunked loss reads the 16-bit logits once and writes their gradient once
               at 90% of the HBM peak; the logits' GEMM keeps its time. Inputs: the loss kernels' time and the
               logits' shape.""",
               confidence="medium")
def large_vocab_loss(p: Section, ctx: Context) -> PHit | None:
    ms, pct = recovered(p, "large-vocab-loss")
    e = p.waste.large_vocab_loss
    if e is None or pct < 2:
        return None
    return PHit(f"the loss over a {e.vocab}-wide vocabulary ({e.rows} rows{', fp32' if e.fp32 else ''}) "
                f"runs {e.kernels_per_step:g} kernels taking {fmt(e.time_ms)} ms per step; reading the logits "
                f"once and writing their gradient once takes ≈ {fmt(e.fused_ms)} ms", ms)


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
               measure=("compile",),
               assumptions="""A flash kernel does the score GEMMs' FLOPs (half under a mask, taken as causal) at
               33% of the dense 16-bit peak, what cuDNN SDPA reaches on an H100 in the validation traces, and
               writes no scores. Inputs: the score GEMMs' FLOPs and every kernel on the S×S scores.""",
               confidence="medium")
def attention_unfused(p: Section, ctx: Context) -> PHit | None:
    ms, pct = recovered(p, "attention-unfused")
    e = p.waste.attention_unfused
    if e is None or pct < 2:
        return None
    how = "SDPA's math path" if e.math_path else "matmul + softmax + matmul"
    return PHit(f"attention as {how}: {e.kernels_per_step:g} kernels per step take {fmt(e.time_ms)} ms at "
                f"{e.tflops:g} TFLOP/s; a flash kernel would take ≈ {fmt(e.flash_ms)} ms"
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
               measure=("channels-last", "bf16-autocast"),
               assumptions="""bf16 convolutions run at 33% of the dense 16-bit peak (ResNet-50 channels_last on an
               H100 in the validation traces); the fp32 element-wise work around them moves half the bytes;
               cuDNN's layout transposes go. Inputs: the convolutions' FLOPs and time, the element-wise work's
               dtype and time.""",
               confidence="medium")
def fp32_conv(p: Section, ctx: Context) -> PHit | None:
    ms, pct = recovered(p, "fp32-conv")
    e = p.waste.fp32_conv
    if e is None or pct < 2:
        return None
    tc = "TF32" if e.tf32_kernels_pct >= 50 else "no Tensor Cores"
    return PHit(f"fp32 convolutions ({tc}) take {fmt(e.conv_ms)} ms per step at {e.tflops:g} TFLOP/s; in bf16 "
                f"≈ {fmt(e.bf16_ms)} ms; fp32 element-wise work around them {fmt(e.elementwise_fp32_ms)} ms"
                + (f"; layout transposes {fmt(e.layout_ms)} ms" if e.layout_ms else ""), ms)


@profile_check("fp32-matmul", "framework", "FP32 GEMMs without Tensor Cores (TF32 off)",
               doc="""Fires when GEMM kernels run in FP32 on the CUDA cores (kernel names sgemm / gemmSN / ffma /
               simt / f32f32_f32f32 without tf32, or FP32 inputs under float32_matmul_precision 'highest').
               Their time shrinks by (TF32 peak × 0.72) / (FP32 peak × 0.77), the spec table's dense peaks times
               the practical cuBLAS ceilings; replayed through the step model, fires at ≥ 1%.""",
               why="On Ampere/Hopper TF32 Tensor Cores are ~7× (A100: 8×) the FP32 CUDA-core peak, with a 10-bit "
                   "mantissa that training tolerates.",
               fix="torch.set_float32_matmul_precision('high') (TF32) or train in bf16 autocast "
                   "(torch.autocast('cuda', torch.bfloat16)).",
               measure=("tf32",),
               assumptions="""TF32 runs the GEMMs (TF32 peak × 0.72) / (FP32 peak × 0.77) faster: the spec table's
               dense peaks at the practical cuBLAS fractions. Inputs: the FP32 GEMMs' kernels, time and FLOPs.""",
               confidence="medium")
def fp32_matmul(p: Section, ctx: Context) -> PHit | None:
    ms, pct = recovered(p, "fp32-matmul")
    e = p.waste.fp32_matmul
    if e is None or pct < 1:
        return None
    return PHit(f"{e.kernels_per_step:g} FP32 GEMM kernels per step without Tensor Cores take {fmt(e.time_ms)} ms"
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
                   "nn.Linear(4096, 4096) instead of 4095/4097; pad the vocab with pad_to_multiple_of=64.",
               assumptions="""Padded, a misaligned GEMM runs as fast as the aligned GEMMs of its dtype in this
               trace (else 80% of the dense peak); the padding's own copy is not counted. Inputs: each GEMM's M,
               N, K, dtype, time.""",
               confidence="medium")
def gemm_misaligned(p: Section, ctx: Context) -> PHit | None:
    ms, pct = recovered(p, "gemm-misaligned")
    e = p.waste.gemm_misaligned
    if e is None or pct < 1:
        return None
    parts = [f"{g.dtype} GEMMs {', '.join(g.shapes)} take {fmt(g.time_ms)} ms/step at {g.tflops:g} TFLOP/s "
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
               measure=("pin-memory",),
               assumptions="""Pinned, a copy runs at the trace's fastest pinned copy (else the PCIe link's
               practical pinned rate) and overlapping it with compute is not counted. Inputs: each copy's bytes,
               kind and time.""",
               confidence="medium")
def pageable_memcpy(p: Section, ctx: Context) -> PHit | None:
    ms, pct = recovered(p, "pageable-memcpy")
    e = p.waste.pageable_memcpy
    if e is None or pct < 1:
        return None
    return PHit(f"pageable copies move {e.bytes_per_step / 2**20:.0f} MiB per step in {fmt(e.time_ms)} ms "
                f"({e.gbps:g} GB/s) against {e.pinned_gbps:g} GB/s for {e.source}", ms)


@profile_check("optimizer-not-fused", "framework", "The optimizer step is not fused",
               doc="""Fires when the kernels Optimizer.step launches include no fused optimizer op (foreach or a
               per-parameter loop). A fused Adam(W) reads and writes parameters and moments and reads gradients
               once: 28 bytes per fp32 parameter at 90% of the HBM peak; replayed, fires at ≥ 2%.""",
               why="The foreach optimizer launches one kernel per operation per tensor group and streams the "
                   "parameters several times; a per-parameter loop launches thousands of tiny kernels.",
               fix="torch.optim.AdamW(params, fused=True) (or Adam/SGD fused=True); capturable=True inside CUDA graphs.",
               measure=("fused-optimizer",),
               assumptions="""A fused Adam(W) moves 28 bytes per fp32 parameter (parameter, two moments read and
               written, gradient read) at 90% of the HBM peak, in one kernel per step; the unfused kernels and
               their launches go. Inputs: the optimizer's kernels and time; the parameters from the foreach ops'
               tensor lists, else from a per-parameter loop's operators (each with its parameter's shape first),
               else from the backward's AccumulateGrad nodes (each one's input is a parameter's gradient).""",
               confidence="medium")
def optimizer_not_fused(p: Section, ctx: Context) -> PHit | None:
    ms, pct = recovered(p, "optimizer-not-fused")
    e = p.waste.optimizer_not_fused
    if e is None or pct < 2:
        return None
    return PHit(f"Optimizer.step runs {e.kernels_per_step:g} kernels taking {fmt(e.time_ms)} ms per step for "
                f"{e.params / 1e6:.1f} M parameters; fused: ≈ {fmt(e.fused_ms)} ms", ms)


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
                   "graph / torch.compile.",
               assumptions="""Idle that no other finding explains is recoverable by some change to the step; idle
               the CPU caused shrinks with the profiler's overhead, GPU-side bubbles do not. On a CPU-bound step
               the figure is an upper bound (a step with no host time at all).""",
               confidence="medium")
def gpu_idle(p: Section, ctx: Context) -> PHit | None:
    step = step_ms(p)
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
    ev = (f"GPU busy {p.busy_pct:.0f}% of the {fmt(profiled_ms(p))} ms profiled step; ≈ {fmt(rest)} ms per step of "
          f"idle time without the profiler is not explained by another finding")
    if p.timeline and p.timeline.bound == "cpu" and cpu_idle >= 0.5 * sum(p.idle_by_reason_ms.values()):
        # The GPU waits for host code: the figure is what a step with no host time would gain, an upper bound
        ev += (f"; the step is CPU-bound: ≈ {fmt(p.timeline.cpu_step_ms * scale)} ms of CPU per step without the "
               f"profiler for {fmt(p.busy_ms)} ms of GPU work, so the figure is an upper bound")
        return PHit(ev + (f"; largest gaps: {gtxt}" if gtxt else ""), rest,
                    fix="Give the GPU more work per launch (a larger batch), move host work out of the step "
                        "(logging, metrics, Python bookkeeping, data preparation into DataLoader workers), or remove "
                        "the dispatch cost with a CUDA graph / torch.compile(mode='reduce-overhead').")
    return PHit(ev + (f"; largest gaps: {gtxt}" if gtxt else ""), rest)


# -- multi-rank and telemetry --------------------------------------------------------------------
@profile_check("throttled-during-run", "driver", "GPU clocks throttled during the run",
               doc="""From NVML samples taken while the workload ran (capture mode): fires when ≥ 5% of the
               samples with the GPU busy report a throttle reason (SW power cap, HW slowdown, SW/HW thermal,
               power brake). Recoverable = step × throttled fraction × (1 − mean throttled SM clock / max SM
               clock), assuming compute time scales with the clock.""",
               why="A throttled GPU runs every kernel slower; results measured under throttling understate what "
                   "the hardware can do.",
               fix="Check cooling and power limits (nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE); restore the "
                   "default power limit (nvidia-smi -pl); run perfstack doctor on the host.",
               assumptions="""Compute time scales with the SM clock: the throttled share of the step runs max clock
               / throttled clock slower. Inputs: NVML samples taken while the workload ran.""",
               confidence="medium")
def throttled(p: Section, ctx: Context) -> PHit | None:
    t = p.telemetry
    if t is None or not t.busy_samples or t.throttled_pct < 5:
        return None
    rec = profiled_ms(p) * t.throttled_pct / 100 * max(0.0, 1 - t.throttled_clock_mhz / t.max_clock_mhz) \
        if t.max_clock_mhz else 0.0
    return PHit(f"{t.throttled_pct:.0f}% of {t.busy_samples} busy NVML samples throttled ({', '.join(t.reasons)}); "
                f"SM clock {t.throttled_clock_mhz:.0f} MHz when throttled vs {t.max_clock_mhz:.0f} MHz max; "
                f"max temperature {t.max_temperature_c} °C, max power {t.max_power_w} W", rec,
                severity="warning" if rec < 0.05 * profiled_ms(p) else None)


# -- evaluation ----------------------------------------------------------------------------------

ORDER = ("dataloader-stall", "allocator-churn", "launch-bound", "host-sync", "pageable-memcpy", "fp32-matmul",
         "fp32-conv", "gemm-misaligned", "attention-unfused", "large-vocab-loss", "unfused-elementwise",
         "optimizer-not-fused", "recompiles", "copy-bound", "activation-recompute", "sliced-backward",
         "ddp-sync-per-microbatch", "comm-not-overlapped", "straggler-rank", "throttled-during-run", "gpu-idle")


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
    step = step_ms(p)
    rec = round(max(0.0, min(hit.recoverable_ms, step)), 3)
    sev = hit.severity or severity_for(rec, step)
    evidence = hit.evidence
    if not hit.severity:
        evidence += correction_notes(p, c.id, sev, c.measure)
    return Finding(id=c.id, layer=c.layer, severity=Severity(sev), title=c.title, evidence=evidence,
                   fix=hit.fix or c.fix, why=hit.why or c.why, sources=[p.file] if p.file else [],
                   subject=hit.subject, recoverable_ms=rec, recoverable_pct=round(100 * rec / step, 1) if step else 0.0,
                   confidence=least_confident(c.confidence, hit.confidence))


def rank(findings: list[Finding]) -> list[Finding]:
    """By recoverable time, except that a low-confidence finding (a figure the trace cannot back: it says
    so, and claims its cautious end) comes after every finding the model is sure enough of: a guess is
    never ranked first. High and medium share one order: both are claims, and the time is what matters."""
    return sorted(findings, key=lambda f: (f.confidence == "low", -(f.recoverable_ms or 0), -f.severity.rank, f.id))
