"""What the busy-GPU waste pass found (``profile.waste``: the evidence of each waste, by finding id) and
what each candidate fix recovers (``profile.whatif``, by finding id).

The evidence records hold what ``profile/waste.py``'s detectors measure and the profile rules quote; times
are milliseconds per step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from perfstack.profile.records.base import Record


@dataclass
class UnfusedElementwise(Record):
    """Chains of eager element-wise, reduction and copy kernels, and their time fused."""

    chains_per_step: float = 0.0
    kernels_per_step: float = 0.0
    eager_ms: float = 0.0
    fused_ms: float = 0.0
    top_ops: list[str] = field(default_factory=list)  # the operators with the most time in the chains
    extra: dict[str, Any] = field(default_factory=dict)


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
class WasteFound(Record):
    """``profile.waste``: the evidence of each waste the pass found, by finding id (absent: not found).
    The fields are in the order the detectors run, which is the order the JSON holds them in."""

    KEYS = {"unfused_elementwise": "unfused-elementwise", "large_vocab_loss": "large-vocab-loss",
            "attention_unfused": "attention-unfused", "fp32_conv": "fp32-conv", "fp32_matmul": "fp32-matmul",
            "gemm_misaligned": "gemm-misaligned", "pageable_memcpy": "pageable-memcpy",
            "optimizer_not_fused": "optimizer-not-fused"}
    WHEN_SET = frozenset(KEYS)

    unfused_elementwise: Optional[UnfusedElementwise] = None
    large_vocab_loss: Optional[LargeVocabLoss] = None
    attention_unfused: Optional[AttentionUnfused] = None
    fp32_conv: Optional[Fp32Conv] = None
    fp32_matmul: Optional[Fp32Matmul] = None
    gemm_misaligned: Optional[GemmMisaligned] = None
    pageable_memcpy: Optional[PageableMemcpy] = None
    optimizer_not_fused: Optional[OptimizerNotFused] = None
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

    ms: float = 0.0
    pct: float = 0.0
    ms_profiled: float = 0.0
    pct_profiled: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
