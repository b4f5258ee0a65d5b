"""Roofline time bounds (F7, F8, F10, F11): work against peak compute, bytes against bandwidth.

    t ≥ max(FLOPs / P_peak, bytes / BW_HBM)           regime = whichever term is larger
    ridge I* = P_peak / BW_HBM  (FLOP per byte)       a phase is compute-bound above it

With utilisation below 1 (MFU for compute, MBU for bandwidth) the same terms give "expected" times;
at MFU = MBU = 1 they are lower bounds that no implementation can beat on that hardware.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Bound:
    seconds: float
    compute_s: float
    memory_s: float
    flops: float
    bytes: float

    @property
    def regime(self) -> str:
        return "compute-bound" if self.compute_s >= self.memory_s else "memory-bound"

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP per byte moved."""
        return self.flops / self.bytes if self.bytes else float("inf")


def roofline(flops: float, nbytes: float, peak_flops: float, bw: float, mfu: float = 1.0, mbu: float = 1.0) -> Bound:
    tc = flops / (peak_flops * mfu)
    tm = nbytes / (bw * mbu)
    return Bound(max(tc, tm), tc, tm, flops, nbytes)


def ridge(peak_flops: float, bw: float) -> float:
    """FLOP/byte above which a kernel is compute-bound (H100 BF16: 989.4/3.35 ≈ 295)."""
    return peak_flops / bw


def moe_experts_touched(n_routed: int, top_k: int, batch: int) -> float:
    """Expected distinct routed experts one MoE layer reads for B tokens (X12): E·(1 − (1 − k/E)^B)."""
    return n_routed * (1 - (1 - top_k / n_routed) ** batch)


def pipeline_bubble(pp: int, micro_batches: int) -> float:
    """Idle fraction of a GPipe/1F1B step (X5): (p − 1)/(m + p − 1)."""
    return (pp - 1) / (micro_batches + pp - 1) if pp > 1 else 0.0
