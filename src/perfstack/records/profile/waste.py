"""What the busy-GPU waste pass found (``profile.waste``: the evidence of each waste, by finding id) and
what each candidate fix recovers (``profile.whatif``, by finding id, or by fix id for a fix that does what
several findings name: ``compile-cudagraphs``).

The evidence records hold what ``profile/waste.py``'s detectors measure and the profile rules quote; times
are milliseconds per step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from perfstack.records.base import Record


@dataclass
class UnfusedElementwise(Record):
    """Chains of eager element-wise, reduction and copy kernels, and their time fused."""

    chains_per_step: float = 0.0
    kernels_per_step: float = 0.0
    eager_ms: float = 0.0
    fused_ms: float = 0.0
    top_ops: list[str] = field(default_factory=list)  # the operators with the most time in the chains
    # eager GEMMs with a misaligned dimension, which Inductor pads (shape_padding) when it compiles them: their
    # time, and the time the aligned GEMMs' rate gives them (fusion.compile_pads)
    padded_gemm_ms: Optional[float] = None
    padded_gemm_fixed_ms: Optional[float] = None
    # the layout transposes around eager convolutions, which Inductor's layout optimization removes
    # (fusion.compile_layout)
    layout_ms: Optional[float] = None
    extra: dict[str, Any] = field(default_factory=dict)

    WHEN_SET = frozenset({"padded_gemm_ms", "padded_gemm_fixed_ms", "layout_ms"})


@dataclass
class LargeVocabLoss(Record):
    """The loss over a large vocabulary: its kernels, and the time reading the logits once takes."""

    vocab: int = 0
    rows: int = 0
    fp32: bool = False  # the logits are upcast to fp32
    kernels_per_step: float = 0.0
    time_ms: float = 0.0
    fused_ms: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class AttentionUnfused(Record):
    """Attention computed as matmul + softmax + matmul, and the time a flash kernel would take."""

    math_path: bool = False  # SDPA's math path rather than attention by hand
    masked: bool = False  # a mask applied to the scores (taken as causal)
    kernels_per_step: float = 0.0
    time_ms: float = 0.0
    flash_ms: float = 0.0
    tflops: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Fp32Conv(Record):
    """fp32 convolutions, their time in bf16, and the fp32 work and layout transposes around them."""

    conv_ms: float = 0.0
    tflops: float = 0.0
    bf16_ms: float = 0.0
    tf32_kernels_pct: float = 0.0
    elementwise_fp32_ms: float = 0.0
    layout_ms: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Fp32Matmul(Record):
    """FP32 GEMMs without Tensor Cores, and the TF32 speedup (``source``: where it comes from)."""

    kernels_per_step: float = 0.0
    time_ms: float = 0.0
    tflops: Optional[float] = None
    speedup: float = 0.0
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class MisalignedGroup(Record):
    """The misaligned GEMMs of one dtype, against the throughput aligned ones reach (``source``)."""

    dtype: str = ""
    time_ms: float = 0.0
    tflops: float = 0.0
    expect_tflops: float = 0.0
    source: str = ""
    shapes: list[str] = field(default_factory=list)  # the most frequent
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class GemmMisaligned(Record):
    groups: list[MisalignedGroup] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class PageableMemcpy(Record):
    """Copies from pageable host memory, against the pinned rate (``source``: where it comes from)."""

    time_ms: float = 0.0
    bytes_per_step: int = 0
    gbps: float = 0.0
    pinned_gbps: float = 0.0
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class OptimizerNotFused(Record):
    """The optimizer step's kernels, and the time a fused optimizer would take over its parameters."""

    kernels_per_step: float = 0.0
    time_ms: float = 0.0
    fused_ms: float = 0.0
    params: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class CopyOp(Record):
    """One operator's device-to-device copies: what launched them (the outermost copy operator), its
    kernels, time and bytes per step, and whether the tensor it copies grows from call to call."""

    op: str = ""
    kernels: list[str] = field(default_factory=list)
    calls_per_step: float = 0.0
    time_ms: float = 0.0
    bytes_per_step: float = 0.0  # read + written
    growing: bool = False
    growth: str = ""  # how it grows, e.g. 'dim 2 grows by 1 per call (4097→4112 in the profiled steps)'
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class CopyBound(Record):
    """Device-to-device copies launched by cat/index/clone/contiguous/copy_ operators (``profile/copies.py``):
    their share of the GPU time, the bytes they move, and what preallocating the tensors that grow leaves."""

    copy_ms: float = 0.0  # all such copies, per step
    pct_of_busy: float = 0.0
    bytes_per_step: float = 0.0  # read + written
    gbps: float = 0.0  # what they reached
    hbm_gbps: float = 0.0  # the practical HBM rate the fixed copies are costed at
    growing_ms: float = 0.0  # the copies of tensors that grow from call to call
    avoidable_bytes_per_step: float = 0.0  # what those copy again of data already in place
    fixed_ms: float = 0.0  # the growing copies' time after the fix (new data written once)
    ops: list[CopyOp] = field(default_factory=list)  # the most time first
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ActivationRecompute(Record):
    """Forward operators re-run inside the backward pass (activation checkpointing; ``profile/recompute.py``),
    the memory their activations would take if kept, and the headroom the trace shows."""

    regions_per_step: float = 0.0  # checkpointed regions (layers) recomputed per step
    kernels_per_step: float = 0.0
    time_ms: float = 0.0  # GPU time of the recompute per step
    region_bytes: float = 0.0  # activations one region would keep (median over regions)
    top_ops: list[str] = field(default_factory=list)
    total_memory: Optional[int] = None  # the device's memory (deviceProperties)
    peak_reserved: Optional[int] = None  # the [memory] events' peak (profile_memory=True)
    memory_source: str = ""
    layers_off: int = 0  # regions whose checkpointing the headroom allows turning off (0: none or unknown)
    added_bytes: float = 0.0  # the memory turning them off would add
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class SlicedBackward(Record):
    """A tensor read one slice at a time in a loop, whose backward fills and adds a gradient of the whole
    tensor per slice (``profile/scatter.py``)."""

    nodes_per_step: float = 0.0  # slice backward nodes (SelectBackward0 / SliceBackward0) in such loops
    kernels_per_step: float = 0.0  # their fills, copies and adds
    time_ms: float = 0.0  # their GPU time per step
    source_shape: str = ""  # the sliced tensor's shape (the most sliced one)
    source_bytes: int = 0
    filled_bytes_per_step: float = 0.0  # zeroed full-size gradients written per step
    fixed_ms: float = 0.0  # one stack per source per step instead
    hbm_gbps: float = 0.0  # the practical HBM rate the stack is costed at (0: no spec, not replayed)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class DdpSyncPerMicrobatch(Record):
    """DistributedDataParallel all-reducing gradients after several micro-batches of one optimizer step
    (gradient accumulation without no_sync; ``profile/accumulation.py``)."""

    micro_batches: float = 0.0  # DDP forwards per optimizer step
    rounds: float = 0.0  # of them, those whose backward all-reduced
    optimizer_steps: int = 0  # with all-reduces, in the profiled steps
    kernels_per_round: float = 0.0
    round_ms: float = 0.0  # NCCL all-reduce time of one round (median)
    extra_ms: float = 0.0  # the rounds beyond the last of each optimizer step, per step
    extra_exposed_ms: float = 0.0  # ... with nothing else on the GPU
    extra_wait_ms: float = 0.0  # ... waiting for the other ranks (it moves to the last round)
    contention: float = 0.0  # compute lost per ms of overlapped NCCL time
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class WasteFound(Record):
    """``profile.waste``: the evidence of each waste the pass found, by finding id (absent: not found).
    The fields are in the order the detectors run, which is the order the JSON holds them in."""

    KEYS = {"unfused_elementwise": "unfused-elementwise", "large_vocab_loss": "large-vocab-loss",
            "attention_unfused": "attention-unfused", "fp32_conv": "fp32-conv", "fp32_matmul": "fp32-matmul",
            "gemm_misaligned": "gemm-misaligned", "pageable_memcpy": "pageable-memcpy",
            "optimizer_not_fused": "optimizer-not-fused", "copy_bound": "copy-bound",
            "activation_recompute": "activation-recompute", "sliced_backward": "sliced-backward",
            "ddp_sync_per_microbatch": "ddp-sync-per-microbatch"}
    WHEN_SET = frozenset(KEYS)

    unfused_elementwise: Optional[UnfusedElementwise] = None
    large_vocab_loss: Optional[LargeVocabLoss] = None
    attention_unfused: Optional[AttentionUnfused] = None
    fp32_conv: Optional[Fp32Conv] = None
    fp32_matmul: Optional[Fp32Matmul] = None
    gemm_misaligned: Optional[GemmMisaligned] = None
    pageable_memcpy: Optional[PageableMemcpy] = None
    optimizer_not_fused: Optional[OptimizerNotFused] = None
    copy_bound: Optional[CopyBound] = None
    activation_recompute: Optional[ActivationRecompute] = None
    sliced_backward: Optional[SlicedBackward] = None
    ddp_sync_per_microbatch: Optional[DdpSyncPerMicrobatch] = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, evidence: Mapping[str, Record]) -> WasteFound:
        """The evidence by finding id, as the detectors give it."""
        names = {key: name for name, key in cls.KEYS.items()}
        args: dict[str, Any] = {names[k]: e for k, e in evidence.items()}
        return cls(**args)


@dataclass
class WhatIf(Record):
    """A candidate fix replayed (``summary.whatifs``): the time it recovers per step and its share of the
    step, without the profiler (the corrected CPU speed) and as profiled."""

    WHEN_SET = frozenset({"ms_fast_cpu", "pct_fast_cpu", "ms_slow_cpu", "pct_slow_cpu"})

    ms: float = 0.0
    pct: float = 0.0
    ms_profiled: float = 0.0
    pct_profiled: float = 0.0
    # where the profiler's overhead is estimated: the same replayed with the CPU as fast as the costliest
    # profiler overhead per event measured on real workloads makes it (recovery.py)
    ms_fast_cpu: Optional[float] = None
    pct_fast_cpu: Optional[float] = None
    # a GPU-side fix where the profiler's overhead is estimated: the figure at the calibrated CPU speed; with
    # the fast-CPU one above it bounds the fix's gain, and ``ms``/``pct`` are the middle of the two
    ms_slow_cpu: Optional[float] = None
    pct_slow_cpu: Optional[float] = None
    extra: dict[str, Any] = field(default_factory=dict)
