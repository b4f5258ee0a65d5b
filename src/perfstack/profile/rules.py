"""Profile rules: pure functions of a profile summary (``analyze.analyze``) to findings, each with
the time per step a fix would recover, ranked by it.

These are kept in their own registry (``PROFILE_CHECKS``), not in ``perfstack.rules.CHECKS``:
``perfstack doctor`` runs every check of that registry and profile rules need a trace.

Avoiding double counting. Each finding's ``recoverable_ms`` is the gain if that fix were made
alone. GPU idle time is partitioned gap by gap by what the CPU was doing (``analyze.REASONS``):
data loading → dataloader-stall, allocator calls → allocator-churn, CPU dispatch → launch-bound;
``gpu-idle`` only claims the idle time no other fired finding explains. Busy-time findings
(fp32-matmul, gemm-misaligned, pageable-memcpy, comm-not-overlapped) shrink disjoint sets of GPU
intervals. host-sync is modelled from the time the CPU was blocked and can overlap launch-bound
(both shorten the CPU's critical path); the report says so rather than adding them up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from perfstack.model import LAYERS, Finding, Severity

GRAPH_REPLAY_US_PER_KERNEL = 1.0  # DESIGN.md: ≈1 µs per kernel replayed from a CUDA graph (H100, torch 2.11)
DEFAULT_PINNED_GBPS = 25.0  # PCIe Gen4 x16 practical pinned, when the GPU is not in the spec table
TF32_PRACTICAL, FP32_PRACTICAL, BF16_PRACTICAL = 0.72, 0.77, 0.80  # specs.practical_fraction defaults


@dataclass
class PHit:
    evidence: str
    recoverable_ms: float
    fix: str | None = None
    severity: str | None = None
    why: str | None = None
    subject: str = ""
    claims: dict[str, float] = field(default_factory=dict)  # idle reasons this finding explains (ms/step)


@dataclass(frozen=True)
class ProfileCheck:
    id: str
    layer: str
    title: str
    doc: str  # when it fires and the recoverable-time model
    why: str
    fix: str
    fn: Callable[[dict, "Context"], PHit | None]


@dataclass
class Context:
    spec: Any = None  # specs.GpuSpec of the traced GPU, or None
    model_flops_per_step: float | None = None
    claimed: dict[str, float] = field(default_factory=dict)


PROFILE_CHECKS: dict[str, ProfileCheck] = {}


def profile_check(id: str, layer: str, title: str, *, doc: str, why: str, fix: str):
    if layer not in LAYERS:
        raise ValueError(f"profile check {id}: unknown layer {layer}")

    def register(fn):
        if id in PROFILE_CHECKS:
            raise ValueError(f"profile check {id} registered twice")
        PROFILE_CHECKS[id] = ProfileCheck(id, layer, title, " ".join(doc.split()), " ".join(why.split()),
                                          fix.strip(), fn)
        return fn
    return register


def severity_for(recoverable_ms: float, step_ms: float) -> str:
    """critical ≥ 50% of the step (the step could run 2× faster), warning ≥ 5%, info below."""
    pct = 100 * recoverable_ms / step_ms if step_ms else 0
    return "critical" if pct >= 50 else "warning" if pct >= 5 else "info"


def _f(x: float, nd: int = 2) -> str:
    return f"{x:.{nd}f}"


# -- rules ---------------------------------------------------------------------------------------

@profile_check("dataloader-stall", "framework", "The GPU waits for the DataLoader",
               doc="""Fires when the GPU is idle while the DataLoader's __next__ runs on the main thread
               (enumerate(DataLoader)#...__next__) for ≥ 5% of the step. Recoverable = the idle gaps in which the
               loader ran for ≥ 30% of the gap (or the loader time overlapping GPU idle, if larger): with workers
               prefetching, the next batch is ready when the step ends.""",
               why="Input pipelines that starve the GPU are the most common cause of low utilization; fixing I/O "
                   "stalls typically takes GPUs from about 70% to above 95% busy (book, ch. 5/13).",
               fix="DataLoader(num_workers=N (start at CPU cores / GPUs), pin_memory=True, prefetch_factor=2-4, "
                   "persistent_workers=True); move decoding/augmentation to the GPU (DALI, torchvision v2 on CUDA); "
                   "then .to(device, non_blocking=True).")
def dataloader_stall(p: dict, ctx: Context) -> PHit | None:
    step = p["step_ms"]
    claimed = max(p["idle_by_reason_ms"].get("data loading", 0.0), p["data_wait_idle_ms"])
    if not step or claimed < 0.05 * step:
        return None
    return PHit(f"the DataLoader's __next__ ran {_f(p['data_wait_ms'])} ms per step on the main thread; the GPU "
                f"was idle {_f(claimed)} ms of the {_f(step)} ms step waiting for it "
                f"({p['busy_pct']:.0f}% busy)", claimed, claims={"data loading": claimed})


@profile_check("launch-bound", "framework", "CPU dispatch is the critical path (many small kernels)",
               doc="""Fires when ≥ 50 kernels run per step, most are short (median < 20 µs or ≥ 50% under
               10 µs), the GPU idles ≥ 10% of the step while the CPU is dispatching, and the launch-to-start
               delay is small (median < 50 µs: the GPU queue is empty, each kernel starts as soon as it is
               launched). Recoverable = the idle time during CPU dispatch minus the cost of replaying the same
               kernels from a CUDA graph (≈ 1 µs each).""",
               why="Eager PyTorch pays ~5-20 µs of CPU per op; when kernels are shorter than that the GPU waits "
                   "for the CPU. CUDA Graphs typically cut iteration time 20-30% and far more for tiny models.",
               fix="Capture the step in a CUDA graph (torch.cuda.CUDAGraph / torch.compile(mode='reduce-overhead')), "
                   "or torch.compile(model) to fuse the small kernels, or raise the batch size so each kernel does "
                   "more work; use fused optimizers (fused=True).")
def launch_bound(p: dict, ctx: Context) -> PHit | None:
    step, L = p["step_ms"], p["launch"]
    k = L["kernels_per_step"]
    dispatch = p["idle_by_reason_ms"].get("cpu dispatch", 0.0)
    short = (L["median_kernel_us"] or 1e9) < 20 or L["short_kernel_pct"] >= 50
    delay = (L["launch_to_start_us"] or {}).get("median")
    if not step or k < 50 or not short or dispatch < 0.10 * step or L["graph_launches_per_step"] >= 1:
        return None
    if delay is not None and delay >= 50:
        return None
    rec = max(0.0, dispatch - k * GRAPH_REPLAY_US_PER_KERNEL / 1e3)
    return PHit(f"{k:.0f} kernels per step, median {L['median_kernel_us']} µs ({L['short_kernel_pct']:.0f}% under "
                f"10 µs); the GPU was idle {_f(dispatch)} ms of the {_f(step)} ms step while the CPU dispatched ops; "
                f"median launch-to-start {delay} µs (the queue is empty); {L['launch_cpu_ms_per_step']:.2f} ms/step in "
                f"launch calls (median {L['launch_call_us']} µs each)", rec, claims={"cpu dispatch": dispatch})


@profile_check("host-sync", "framework", "Host-device synchronizations inside the step",
               doc="""Fires when there are more than 2 blocking syncs per step (cudaStreamSynchronize,
               cudaDeviceSynchronize, cudaEventSynchronize, blocking cudaMemcpy; from .item(), .cpu(), print of a
               tensor, torch.cuda.synchronize()). Model: while the CPU waits it is not launching; without the
               waits the step takes max(CPU time without waits, GPU busy time). Recoverable = step −
               max(step − wait, busy) = min(wait, step − busy). When the CPU is the bottleneck anyway, each sync
               waits only for the last few kernels and removing them recovers little: the finding says so and
               points at the real bottleneck.""",
               why="A sync drains the GPU queue, so the GPU idles until the CPU launches again; in a GPU-bound loop "
                   "that serializes CPU and GPU work.",
               fix="Keep values on the GPU (accumulate the loss as a tensor, read it once per N steps), avoid "
                   ".item()/.cpu()/print(tensor)/torch.cuda.synchronize() in the step; use non_blocking copies and "
                   "CUDA events for timing.")
def host_sync(p: dict, ctx: Context) -> PHit | None:
    s = p["sync"]
    step = p["step_ms"]
    if s["calls_per_step"] <= 2 or not step:
        return None
    wait = s["wait_ms_per_step"]
    busy = p["busy_ms"]
    rec = max(0.0, min(wait, step - busy))
    names = ", ".join(f"{n} {c:g}" for n, c in sorted(s["by_name"].items(), key=lambda kv: -kv[1]))
    ev = (f"{s['calls_per_step']:g} blocking syncs per step ({names}); the CPU waited {_f(wait)} ms per step in them; "
          f"GPU busy {_f(busy)} ms of the {_f(step)} ms step")
    why = None
    if rec < 0.05 * step:
        ev += (f". Removing them recovers at most {_f(rec)} ms: without the waits the CPU still needs "
               f"{_f(step - wait)} ms per step, more than the GPU's {_f(busy)} ms, so the step is CPU-bound and the "
               f"syncs are not its critical path")
        why = "The syncs are real but cheap here: the CPU is the bottleneck (see launch-bound / gpu-idle)."
    # The idle a fix recovers is the sync's own: the GPU waits while the host, released late, does
    # the work it could have done during the kernels. gpu-idle must not count it again.
    return PHit(ev, rec, why=why, claims={"sync": max(rec, p["idle_by_reason_ms"].get("sync", 0.0))})


@profile_check("pageable-memcpy", "framework", "Host-to-device copies from pageable memory",
               doc="""Fires when memcpys from or to pageable host memory (Memcpy HtoD (Pageable -> Device))
               take ≥ 1% of the step. Recoverable = copy time × (1 − pageable bandwidth / pinned bandwidth), where
               pageable bandwidth is measured from the trace's bytes and durations and pinned bandwidth is a
               pinned copy of the same trace when there is one, else the PCIe practical figure for the GPU from
               the spec table (85% of theoretical). Overlap gained by non_blocking copies is not counted.""",
               why="Pageable copies are staged through a bounce buffer by the driver, run at a fraction of PCIe "
                   "bandwidth and block the CPU; pinned copies run near PCIe speed and can overlap compute.",
               fix="Allocate host tensors pinned (tensor.pin_memory(), DataLoader(pin_memory=True)) and copy with "
                   ".to(device, non_blocking=True); reuse the pinned buffer.")
def pageable_memcpy(p: dict, ctx: Context) -> PHit | None:
    step = p["step_ms"]
    pageable = [m for m in p["memcpy"] if m["memory"] == "Pageable"]
    t = sum(m["time_ms_per_step"] for m in pageable)
    if not step or t < 0.01 * step:
        return None
    b = sum(m["bytes_per_step"] for m in pageable)
    bw = b / (t * 1e-3) / 1e9 if t else 0.0
    pinned = [m for m in p["memcpy"] if m["memory"] == "Pinned" and m["gbps"] and m["bytes_per_step"] >= 1 << 20]
    if pinned:
        ref, src = max(m["gbps"] for m in pinned), "a pinned copy in this trace"
    elif ctx.spec is not None and getattr(ctx.spec, "pcie_gen", None):
        from perfstack.specs import pcie_practical_gbps
        ref = pcie_practical_gbps(ctx.spec.pcie_gen, ctx.spec.pcie_lanes or 16)
        src = f"PCIe Gen{ctx.spec.pcie_gen} x{ctx.spec.pcie_lanes or 16} practical pinned"
    else:
        ref, src = DEFAULT_PINNED_GBPS, "PCIe Gen4 x16 practical pinned (GPU not in the spec table)"
    rec = t * max(0.0, 1 - bw / ref) if ref else 0.0
    dirs = ", ".join(f"{m['direction']} {m['bytes_per_step'] / 2**20:.0f} MiB in {m['time_ms_per_step']:.2f} ms"
                     for m in pageable)
    return PHit(f"pageable copies per step: {dirs} — {bw:.1f} GB/s against {ref:.1f} GB/s for {src}", rec)


@profile_check("fp32-matmul", "framework", "FP32 GEMMs without Tensor Cores (TF32 off)",
               doc="""Fires when GEMM kernels run in FP32 on the CUDA cores (kernel names sgemm / gemmSN / ffma /
               simt / f32f32_f32f32 without tf32, or FP32 inputs under float32_matmul_precision 'highest').
               Recoverable = their time × (1 − 1/speedup), speedup = (TF32 peak × 0.72) / (FP32 peak × 0.77),
               the spec table's dense peaks times the practical cuBLAS ceilings (specs.practical_fraction); no
               less than the time the same FLOPs need at the TF32 practical ceiling.""",
               why="On Ampere/Hopper TF32 Tensor Cores are ~7× (A100: 8×) the FP32 CUDA-core peak, with a 10-bit "
                   "mantissa that training tolerates.",
               fix="torch.set_float32_matmul_precision('high') (TF32) or train in bf16 autocast "
                   "(torch.autocast('cuda', torch.bfloat16)).")
def fp32_matmul(p: dict, ctx: Context) -> PHit | None:
    step = p["step_ms"]
    rows = [g for g in p["gemms"] if g["tensor_cores"] is False or
            (g["tensor_cores"] is None and g["dtype"] == "fp32" and p.get("precision") == "highest")]
    rows = [g for g in rows if g["dtype"] in ("fp32", None)]
    t = sum(g["time_ms_per_step"] for g in rows)
    if not step or t < 0.01 * step:
        return None
    tf32, fp32 = (ctx.spec.peak_tflops("tf32"), ctx.spec.peak_tflops("fp32")) if ctx.spec else (None, None)
    if tf32 and fp32:
        speedup = (tf32 * TF32_PRACTICAL) / (fp32 * FP32_PRACTICAL)
        src = f"{ctx.spec.name}: TF32 {tf32:g} vs FP32 {fp32:g} TFLOP/s dense, practical 72%/77%"
    else:
        speedup, src = 4.0, "GPU not in the spec table: a conservative 4×"
    rec = t * (1 - 1 / speedup)
    flops = sum(g["flops_per_step"] for g in rows)
    achieved = flops / (t * 1e-3) / 1e12 if flops and t else None
    ev = (f"{sum(g['count_per_step'] for g in rows):g} FP32 GEMM kernels per step without Tensor Cores take "
          f"{_f(t)} ms of the {_f(step)} ms step" + (f" at {achieved:.1f} TFLOP/s" if achieved else "") +
          f"; TF32 speedup {speedup:.1f}× ({src})")
    return PHit(ev, rec)


@profile_check("gemm-misaligned", "framework", "GEMM dimensions not aligned for Tensor Cores",
               doc="""Fires when a GEMM (aten::mm/addmm/bmm/linear, from Input Dims) has M, N or K not a
               multiple of 8 for 16-bit types, 16 for 8-bit, 4 for TF32. Recoverable = the misaligned GEMMs' time −
               their FLOPs at the throughput aligned GEMMs of the same dtype reach in this trace (or, without
               any, the spec table's dense peak × the practical ceiling, 80% for bf16/fp16), i.e. time ×
               (1 − expected-slowdown/observed-slowdown); never negative.""",
               why="cuBLAS picks slower kernels (align1/align2, no TMA) for unaligned leading dimensions; "
                   "NVIDIA's guide asks for multiples of 8 (16-bit) or 16 (8-bit) elements.",
               fix="Pad hidden sizes, vocabulary and batch×sequence to a multiple of 64 (at least 8): e.g. "
                   "nn.Linear(4096, 4096) instead of 4095/4097; pad the vocab with pad_to_multiple_of=64.")
def gemm_misaligned(p: dict, ctx: Context) -> PHit | None:
    step = p["step_ms"]
    bad = [g for g in p["gemms"] if g["misaligned"]]
    t = sum(g["time_ms_per_step"] for g in bad)
    if not step or not bad or t < 0.005 * step:
        return None
    rec = 0.0
    parts = []
    for g in bad:
        good = [x for x in p["gemms"] if not x["misaligned"] and x["dtype"] == g["dtype"] and x["tflops"]
                and x["flops_per_step"] >= 1e9]
        if good:
            expect, src = max(x["tflops"] for x in good), "aligned GEMMs in this trace"
        else:
            dt = {"fp32": "tf32"}.get(g["dtype"] or "", g["dtype"] or "bf16")
            peak = ctx.spec.peak_tflops(dt) if ctx.spec and dt in ("bf16", "fp16", "fp8", "int8", "tf32") else None
            frac = TF32_PRACTICAL if dt == "tf32" else BF16_PRACTICAL
            expect, src = (peak * frac, f"{frac:.0%} of the {dt} peak") if peak else (None, "")
        if not expect or not g["flops_per_step"]:
            continue
        ideal = g["flops_per_step"] / (expect * 1e12) * 1e3
        rec += max(0.0, g["time_ms_per_step"] - ideal)
        shapes = ", ".join(list(g["shapes"])[:3])
        parts.append(f"{g['dtype']} GEMMs {shapes} take {_f(g['time_ms_per_step'])} ms/step at {g['tflops']} TFLOP/s "
                     f"against {expect:.0f} TFLOP/s ({src})")
    if not parts:
        return None
    return PHit("; ".join(parts), rec)


@profile_check("allocator-churn", "allocator", "cudaMalloc/cudaFree in the steady state",
               doc="""Fires when cudaMalloc/cudaFree (or torch.cuda.empty_cache) run in profiled steps after
               warm-up: the caching allocator should serve every step from its cache. Recoverable = the GPU idle
               gaps in which allocator calls ran for ≥ 30% of the gap (or the allocator time overlapping GPU
               idle, if larger): cudaFree synchronizes the device and cudaMalloc blocks the CPU.""",
               why="cudaFree is device-synchronizing and cudaMalloc costs 10 µs-ms; a step that allocates afresh "
                   "serializes the CPU and GPU.",
               fix="Remove torch.cuda.empty_cache() from the loop; keep shapes stable (pad/bucket variable sizes); "
                   "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True for fragmentation.")
def allocator_churn(p: dict, ctx: Context) -> PHit | None:
    a, step = p["allocator"], p["step_ms"]
    if a["calls_per_step"] < 1 or not step:
        return None
    claimed = p["idle_by_reason_ms"].get("allocator", 0.0)
    rec = max(claimed, a["idle_ms_per_step"])
    if rec < 0.01 * step and a["ms_per_step"] < 0.01 * step:
        return None
    names = ", ".join(f"{n} {c:g}" for n, c in a["by_name"].items())
    return PHit(f"{a['calls_per_step']:g} allocator calls per step ({names}) taking {_f(a['ms_per_step'])} ms; "
                f"the GPU was idle {_f(claimed)} ms per step in gaps dominated by them", rec,
                claims={"allocator": claimed})


@profile_check("comm-not-overlapped", "mathlib-nccl", "Communication is not overlapped with compute",
               doc="""Fires when NCCL kernels run with no other GPU work for ≥ 5% of the step. Recoverable = the
               exposed NCCL time, capped by the compute time it could hide under. This is an upper bound: an
               overlapped all-reduce shares SMs and HBM with the compute it hides under (on the 2×H200 fixture
               DDP's overlap recovered the exposed 1.2 ms but slowed the GEMMs by ~0.9 ms).""",
               why="Gradient all-reduce after backward leaves the GPU doing nothing but communication; DDP/FSDP "
                   "bucket the gradients and overlap their all-reduce with the rest of backward.",
               fix="Wrap the model in DistributedDataParallel (bucket_cap_mb 25-100, gradient_as_bucket_view=True) "
                   "or FSDP instead of all_reduce after backward; for custom loops, launch async collectives "
                   "(async_op=True) per bucket as gradients become ready.")
def comm_not_overlapped(p: dict, ctx: Context) -> PHit | None:
    c, step = p["comm"], p["step_ms"]
    if not step or c["exposed_ms_per_step"] < 0.05 * step:
        return None
    rec = min(c["exposed_ms_per_step"], p["compute_ms"])
    return PHit(f"NCCL kernels {_f(c['ms_per_step'])} ms per step, {_f(c['exposed_ms_per_step'])} ms of it with nothing "
                f"else running ({c['overlap_pct']:.0f}% overlapped with compute); recoverable is an upper bound "
                f"(overlapped collectives contend with compute for SMs and memory bandwidth)", rec)


@profile_check("gpu-idle", "framework", "GPU idle inside the step",
               doc="""Fires when the GPU (union of kernels, copies and memsets over all streams) is idle for ≥ 10%
               of the step after removing the idle time other findings explain (data loading, allocator, CPU
               dispatch when launch-bound fired, syncs). Recoverable = that unexplained idle time; the evidence
               lists the largest gaps with the CPU activity in each.""",
               why="Dashboards should make you investigate below ~90% GPU busy; every idle microsecond in a step "
                   "is time the step could be shorter.",
               fix="Look at the largest gaps: move CPU work out of the step (logging, metrics, Python bookkeeping), "
                   "overlap it with GPU work (non_blocking copies, CUDA streams), or capture the step in a CUDA "
                   "graph / torch.compile.")
def gpu_idle(p: dict, ctx: Context) -> PHit | None:
    step = p["step_ms"]
    if not step or not p["busy_ms"] and not p["top_kernels"]:
        return None
    claimed = sum(ctx.claimed.values())
    rest = max(0.0, p["idle_ms"] - claimed)
    if rest < 0.10 * step:
        return None
    gaps = p["idle_gaps"][:3]
    gtxt = "; ".join(f"{g['duration_ms']:.2f} ms in step {g['step']} ({g['reason']}"
                     + (f", CPU in {g['cpu_op']}" if g.get("cpu_op") else "") + ")" for g in gaps)
    return PHit(f"GPU busy {p['busy_pct']:.0f}% of the {_f(step)} ms step; {_f(rest)} ms per step of idle time is not "
                f"explained by another finding" + (f"; largest gaps: {gtxt}" if gtxt else ""), rest)


# -- multi-rank and telemetry --------------------------------------------------------------------

@profile_check("straggler-rank", "mathlib-nccl", "One rank is slower and the others wait for it",
               doc="""With several rank traces: the straggler is the rank with the most non-communication time per
               step (step − NCCL time; the others' extra NCCL time is waiting for it). Fires when it exceeds the
               median of the other ranks by ≥ 5% of the step. Recoverable = that excess. The cause is the
               component (compute category, idle reason) that differs most.""",
               why="Collectives complete at the pace of the slowest rank; every rank pays the straggler's delay.",
               fix="Balance the work (same batch and sequence lengths per rank), check that rank's GPU for "
                   "throttling (perfstack doctor) and its data loading.")
def straggler_rank(p: dict, ctx: Context) -> PHit | None:
    s = p.get("straggler")
    if not s or s["excess_ms"] < 0.05 * p["step_ms"]:
        return None
    return PHit(f"rank {s['rank']} spends {_f(s['non_comm_ms'])} ms per step outside communication against a median "
                f"{_f(s['others_median_ms'])} ms on the other ranks; the largest difference is {s['cause']}",
                s["excess_ms"], subject=f"rank{s['rank']}")


THROTTLE_BITS = {0x4: "SW power cap", 0x8: "HW slowdown", 0x20: "SW thermal slowdown", 0x40: "HW thermal slowdown",
                 0x80: "HW power brake"}


@profile_check("throttled-during-run", "driver", "GPU clocks throttled during the run",
               doc="""From NVML samples taken while the workload ran (capture mode): fires when ≥ 5% of the
               samples with the GPU busy report a throttle reason (SW power cap, HW slowdown, SW/HW thermal,
               power brake). Recoverable = step × throttled fraction × (1 − mean throttled SM clock / max SM
               clock), assuming compute time scales with the clock.""",
               why="A throttled GPU runs every kernel slower; results measured under throttling understate what "
                   "the hardware can do.",
               fix="Check cooling and power limits (nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE); restore the "
                   "default power limit (nvidia-smi -pl); run perfstack doctor on the host.")
def throttled(p: dict, ctx: Context) -> PHit | None:
    t = p.get("telemetry")
    if not t or not t.get("busy_samples") or t["throttled_pct"] < 5:
        return None
    rec = p["step_ms"] * t["throttled_pct"] / 100 * max(0.0, 1 - t["throttled_clock_mhz"] / t["max_clock_mhz"]) \
        if t["max_clock_mhz"] else 0.0
    return PHit(f"{t['throttled_pct']:.0f}% of {t['busy_samples']} busy NVML samples throttled ({', '.join(t['reasons'])}); "
                f"SM clock {t['throttled_clock_mhz']:.0f} MHz when throttled vs {t['max_clock_mhz']:.0f} MHz max; "
                f"max temperature {t['max_temperature_c']} °C, max power {t['max_power_w']} W", rec,
                severity="warning" if rec < 0.05 * p["step_ms"] else None)


def telemetry_summary(samples: list[dict], spec: Any = None) -> dict | None:
    """Throttle statistics of NVML samples: t, sm_clock_mhz, power_w, temperature_c,
    clocks_event_reasons (bitmask or list of names), utilization_gpu."""
    rows = [s for s in samples if isinstance(s, dict)]
    if not rows:
        return None
    busy = [s for s in rows if (_num(s.get("utilization_gpu")) or 0) >= 5] or rows
    reasons: set[str] = set()
    thr = []
    for s in busy:
        r = s.get("clocks_event_reasons")
        names = []
        if isinstance(r, (int, float)) and not isinstance(r, bool):
            names = [n for b, n in THROTTLE_BITS.items() if int(r) & b]
        elif isinstance(r, (list, tuple)):
            names = [str(x) for x in r if any(k in str(x).lower() for k in ("power", "thermal", "slowdown", "brake"))]
        if names:
            reasons.update(names)
            thr.append(s)
    clocks = [c for c in (_num(s.get("sm_clock_mhz")) for s in rows) if c]
    max_clock = max([*clocks, float(getattr(spec, "boost_clock_mhz", 0) or 0)]) if clocks else 0.0
    tclk = [c for c in (_num(s.get("sm_clock_mhz")) for s in thr) if c]
    temps = [t for t in (_num(s.get("temperature_c")) for s in rows) if t is not None]
    power = [w for w in (_num(s.get("power_w")) for s in rows) if w is not None]
    return {"samples": len(rows), "busy_samples": len(busy), "throttled_pct": round(100 * len(thr) / len(busy), 1),
            "reasons": sorted(reasons), "throttled_clock_mhz": (sum(tclk) / len(tclk)) if tclk else max_clock,
            "max_clock_mhz": max_clock, "max_temperature_c": max(temps) if temps else None,
            "max_power_w": max(power) if power else None}


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


# -- evaluation ----------------------------------------------------------------------------------

ORDER = ("dataloader-stall", "allocator-churn", "launch-bound", "host-sync", "pageable-memcpy", "fp32-matmul",
         "gemm-misaligned", "comm-not-overlapped", "straggler-rank", "throttled-during-run", "gpu-idle")


def evaluate(p: dict, ctx: Context) -> list[Finding]:
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


def to_finding(c: ProfileCheck, hit: PHit, p: dict) -> Finding:
    step = p["step_ms"]
    rec = round(max(0.0, min(hit.recoverable_ms, step)), 3)
    sev = hit.severity or severity_for(rec, step)
    return Finding(id=c.id, layer=c.layer, severity=Severity(sev), title=c.title, evidence=hit.evidence,
                   fix=hit.fix or c.fix, why=hit.why or c.why, sources=[p.get("file", "")] if p.get("file") else [],
                   subject=hit.subject, recoverable_ms=rec, recoverable_pct=round(100 * rec / step, 1) if step else 0.0)


def rank(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (-(f.recoverable_ms or 0), -f.severity.rank, f.id))
