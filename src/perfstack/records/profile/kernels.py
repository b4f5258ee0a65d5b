"""What the kernel and efficiency passes find: the operator rows (``profile.ops``), the top kernels
(``profile.top_kernels``), the roofline's kernel classes (``profile.kernel_classes``), the MFU
(``profile.mfu``) and the compiled code (``profile.compiled``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Optional

from perfstack.records.base import Record


# What bounds an operator: its arithmetic intensity against the ridge point (efficiency.against_peaks)
OpBound = Literal["compute", "memory"]


@dataclass
class OpRow(Record):
    """One row of ``profile.ops``: an operator's kernels of one category and dtype, per step, with what
    they achieved and their share of the SKU's peaks (``efficiency.against_peaks``)."""

    WHEN_SET = frozenset({"bound"})

    op: str = ""  # the launching operator, "(no operator)" where none is known
    category: str = ""
    dtype: Optional[str] = None
    calls_per_step: float = 0.0
    kernels_per_step: float = 0.0
    time_ms_per_step: float = 0.0
    flops_per_step: float = 0.0
    bytes_per_step: float = 0.0
    tflops: Optional[float] = None
    gbps: Optional[float] = None
    pct_of_peak: Optional[float] = None
    pct_of_hbm: Optional[float] = None
    bound: Optional[OpBound] = None  # where the intensity says
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class TopKernel(Record):
    """One row of ``profile.top_kernels``: a kernel name's launches and GPU time per step."""

    name: str = ""  # shortened (classify.short_name)
    category: str = ""
    count: int = 0  # launches over the profiled steps
    time_ms_per_step: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class KernelClass(Record):
    """One row of ``profile.kernel_classes`` (the roofline's points): a GEMM class (category, dtype, Tensor
    Cores) or a category of the other kernels, with its time, FLOPs and bytes per step."""

    KEYS = {"kclass": "class"}
    WHEN_SET = frozenset({"name", "kclass", "intensity", "peak_tflops", "gbps"})

    name: Optional[str] = None
    kclass: Optional[str] = None  # what a Run may name the class by where it has no name
    time_ms: Optional[float] = None
    flops: Optional[float] = None
    bytes: Optional[float] = None
    intensity: Optional[float] = None  # FLOP per byte
    tflops: Optional[float] = None
    peak_tflops: Optional[float] = None  # GEMM classes: the SKU's peak for their dtype
    gbps: Optional[float] = None  # the other kernels
    # A GEMM class writes its peak and one of the other kernels its GB/s, null where unknown (None: the JSON
    # says neither, and each is written only where known).
    gemm: Optional[bool] = None
    extra: dict[str, Any] = field(default_factory=dict)

    UNWRITTEN = frozenset({"gemm"})

    def _writes(self, name: str) -> bool:
        if (name, self.gemm) in (("peak_tflops", True), ("gbps", False)):
            return True
        return super()._writes(name)

    @classmethod
    def _unwritten(cls, d: Mapping[str, Any]) -> dict[str, Any]:
        def said(key: str) -> bool:
            return key in d and (d[key] is None or isinstance(d[key], (int, float)) and not isinstance(d[key], bool))
        return {"gemm": True if said("peak_tflops") else False if said("gbps") else None}


@dataclass
class Mfu(Record):
    REQUIRED = ("value",)

    value: float = 0.0
    source: str = ""
    peak_tflops: Optional[float] = None
    dtype: Optional[str] = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Compiled(Record):
    """torch.compile in the trace (``efficiency.compiled``): the share of GPU busy time in Triton kernels,
    compiled regions entered per step (more than one per model call means graph breaks) and how many
    distinct ones, and compilation inside the profiled steps (recompiles)."""

    triton_pct: float = 0.0
    regions_per_step: float = 0.0
    distinct_regions: int = 0
    compile_ms_per_step: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class GemmRow(Record):
    """One row of ``profile.gemms``: a GEMM class (dtype, Tensor Cores, misaligned, GEMV, category) per step,
    with its commonest shapes, what it achieved and, once the efficiency pass has run, its share of the
    SKU's peaks (``peaks``: the JSON then holds those three keys, null where unknown)."""

    dtype: Optional[str] = None
    tensor_cores: Optional[bool] = None  # None: the kernel's name does not say
    misaligned: bool = False
    gemv: bool = False
    category: str = ""  # "gemm" or "attention"
    shapes: dict[str, int] = field(default_factory=dict)  # "MxNxK" -> launches, the commonest first
    time_ms_per_step: float = 0.0
    flops_per_step: float = 0.0
    bytes_per_step: float = 0.0
    tflops: Optional[float] = None
    gbps: Optional[float] = None
    count_per_step: float = 0.0
    peak_tflops: Optional[float] = None
    pct_of_peak: Optional[float] = None
    pct_of_hbm: Optional[float] = None
    peaks: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    UNWRITTEN = frozenset({"peaks"})

    def _writes(self, name: str) -> bool:
        return self.peaks or name not in ("peak_tflops", "pct_of_peak", "pct_of_hbm")

    @classmethod
    def _unwritten(cls, d: Mapping[str, Any]) -> dict[str, Any]:
        return {"peaks": "peak_tflops" in d}


@dataclass
class MemcpyRow(Record):
    """One row of ``profile.memcpy``: the copies of one direction and memory kind (``HtoD`` from
    ``Pageable``, ...), their count and bytes over the profiled steps, per step, and the rate reached."""

    direction: str = ""
    memory: str = ""
    count: int = 0
    bytes: int = 0
    time_ms_per_step: float = 0.0
    bytes_per_step: int = 0
    gbps: Optional[float] = None
    extra: dict[str, Any] = field(default_factory=dict)
