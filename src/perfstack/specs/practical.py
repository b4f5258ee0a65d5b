"""Known practical ceilings: the fraction of a theoretical peak that well-tuned work reaches.

Verdicts compare a measurement with ``peak x fraction`` as well as with the peak itself, so that
"784 TFLOP/s on an H100" reads as "at the practical ceiling" rather than "21% short". Every entry
is a rule of thumb with its evidence, not a vendor specification.
"""

from __future__ import annotations

from typing import Any

from perfstack.sources import BOOK


class PracticalFraction(float):
    """A fraction of a theoretical peak. The value *is* the float (so ``peak * practical_fraction[k]``
    and ``isinstance(v, float)`` work); ``of``, ``applies_to`` and ``source`` say what it applies to
    and where it comes from. Immutable."""

    of: str  # the theoretical figure it applies to: a GpuSpec field, or "pcie_gbps"
    applies_to: str
    source: str

    def __new__(cls, fraction: float, of: str, applies_to: str, source: str) -> "PracticalFraction":
        self = super().__new__(cls, fraction)
        object.__setattr__(self, "of", of)
        object.__setattr__(self, "applies_to", applies_to)
        object.__setattr__(self, "source", source)
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("PracticalFraction is immutable")

    @property
    def fraction(self) -> float:
        return float(self)

    def __repr__(self) -> str:
        return f"PracticalFraction({float(self)!r}, of={self.of!r})"

    def __str__(self) -> str:
        return repr(float(self))


practical_fraction: dict[str, PracticalFraction] = {
    "gemm_bf16": PracticalFraction(
        0.80,
        "bf16",
        "large aligned BF16 GEMM through cuBLAS (torch.matmul), dense peak",
        "Project H100 SXM measurements: 770-798 TFLOP/s of 989.4 (0.78-0.81), best shape 4096x4096x8192 "
        f"at 784 (torch 2.11, driver 580). The book {BOOK} says Tensor Cores can sustain above 90% of peak with "
        "tuned kernels (ch. 9), so 0.8 is what stock cuBLAS reaches, not a hardware limit.",
    ),
    "gemm_fp16": PracticalFraction(
        0.80,
        "fp16",
        "large aligned FP16 GEMM through cuBLAS, dense peak",
        "Same Tensor Core path and rate as BF16 on Hopper; taken equal to gemm_bf16 (not separately measured).",
    ),
    "hbm_copy": PracticalFraction(
        0.90,
        "hbm_tbps",
        "device-to-device copy on a buffer much larger than L2, counting bytes read + written",
        f"The book {BOOK}: a well-coalesced copy reaches ~90% of peak DRAM throughput (ch. 7). Project machines: "
        "H100 ~3.0 of 3.35 TB/s, H200 ~4.3 of 4.8 TB/s (both ~0.90).",
    ),
    "pcie_pinned": PracticalFraction(
        0.85,
        "pcie_gbps",
        "pinned (page-locked) host<->device copies, one direction, vs pcie_gbps(gen, width)",
        "Rule of thumb for TLP/DLLP and completion overhead; project H100 on Gen5 x16 measured ~55 of "
        "63.0 GB/s (0.87). Pageable copies are far lower and are not covered.",
    ),
    # The ceilings below were measured with perfstack's own method on healthy machines: they say what
    # stock PyTorch reaches there, so "low" means "below a healthy machine", not "below the datasheet".
    "gemm_fp8": PracticalFraction(
        0.65, "fp8", "FP8 (e4m3) GEMM through torch._scaled_mm with per-tensor scales, dense peak",
        "perfstack bench --suite full on the project's healthy H100 SXM and 2xH200 (torch 2.11, driver 580, 2026-11): 62.6-69.2% of 1978.9 TFLOP/s on H100, 64.5-66.7% on H200.",
    ),
    "gemm_tf32": PracticalFraction(
        0.72, "tf32", "FP32 GEMM with TF32 Tensor Cores (float32_matmul_precision 'high'), dense peak",
        "perfstack bench --suite full on the project's healthy H100 SXM and 2xH200 (torch 2.11, driver 580, 2026-11): 70.5-75.7% of 494.7 TFLOP/s on H100, 71.2-72.1% on H200.",
    ),
    "gemm_fp32": PracticalFraction(
        0.77, "fp32", "FP32 GEMM on CUDA cores (precision 'highest'), peak",
        "perfstack bench --suite full on the project's healthy H100 SXM and 2xH200 (torch 2.11, driver 580, 2026-11): 76.7-79.1% of 66.9 TFLOP/s on H100, 76.1-78.7% on H200.",
    ),
    "p2p_nvlink": PracticalFraction(
        0.87, "nvlink_gbps_per_gpu", "GPU-to-GPU copy over NVLink, one direction, vs half the per-GPU total",
        "perfstack bench --suite full on the project's healthy H100 SXM and 2xH200 (torch 2.11, driver 580, 2026-11): 394.6 of 450 GB/s per direction between two H200 (NV18).",
    ),
    "nccl_busbw": PracticalFraction(
        0.70, "nvlink_gbps_per_gpu",
        "NCCL collective bus bandwidth (nccl-tests definition) at 1 GiB, vs the per-direction link rate",
        "perfstack bench --suite full on the project's healthy H100 SXM and 2xH200 (torch 2.11, driver 580, 2026-11): all_reduce 71%, all_gather 62%, reduce_scatter 62%, all_to_all 74%, broadcast 82% of 450 "
        "GB/s on 2xH200 (NCCL 2.28.9, NVLS off).",
    ),
    "pcie_pageable": PracticalFraction(
        0.25, "pcie_gbps", "pageable (ordinary malloc) host<->device copies, staged by the driver through a "
        "pinned bounce buffer, vs pcie_gbps(gen, width)",
        f"The book {BOOK}: pinned copies run 2-3x faster than pageable ones (ch. 3). Project H100 (Gen5 x16): "
        "pageable H2D 13.5-19 GB/s, D2H 13-14 GB/s of 63.0 (0.21-0.30), host-dependent.",
    ),
}
