"""The fixed cost of a forward pass: how many kernels it launches, and what each costs beyond its bytes.

A small model's decode step is not its bytes over the bandwidth alone: each kernel also pays a floor
(its launch, the memory latency before its first bytes arrive, its waves' ramp and tail) that no
bandwidth hides. Replayed from a CUDA graph that floor is a few microseconds per kernel; launched from
Python the host's own per-kernel cost comes on top, and where it exceeds the GPU's work the step waits
on the host.

The count is read from the architecture, as a compiled decoder runs it (norms and residual adds,
rotary, SiLU·mul as one kernel each; fused QKV and gate/up projections; the new K and V written into
the cache in place): per layer

    norm, QKV projection, [q/k norm], rotary, K write, V write, attention (2), output projection,
    residual, norm, gate/up projection (or up), activation, down projection, residual     ≈ 15

with a MoE layer's MLP replaced by its router (GEMM, top-k) and, per expert a step touches, the
expert's projections and activation (3 kernels); outside the layers the embedding lookup, the final
norm, the LM head and sampling (6). The engine-grade decode of benchmarks/estimate_latency_truth.py
launched 14.5-16 per layer on the H100 and H200 (docs/estimate.md); a serving engine that fuses the
residual into the norm and rotary into the cache write runs 10-12.

FLOOR_US, the GPU's cost per kernel beyond its bytes, is the one figure fitted on measurements: ITL minus
the step's bytes at the bandwidth ``perfstack bench`` measured, over the kernels, was 3.5-3.7 µs on every
row of that truth set (1B-8B, batch 1 and 16, H100 and H200), while bench's empty kernels replay at
~1 µs. HOST_US is the host's cost per kernel launched eagerly from PyTorch: the book's figure, or
``launch.eager`` from a bench Run (8.7-11.3 µs measured on those hosts).
"""

from __future__ import annotations

from dataclasses import dataclass

from perfstack.estimate.config import ModelSpec

FLOOR_US = 3.6  # GPU cost per kernel beyond its bytes (fitted on the truth set; see the module doc)
HOST_US = 10.0  # host cost per kernel launched eagerly (bench launch.eager measures it)
OUTSIDE = 6  # embedding, final norm, LM head, sampling
LAUNCH_MODES = ("graph", "eager")


@dataclass(frozen=True)
class KernelCount:
    layers: float  # kernels of all the layers together (MoE and dense layers differ)
    outside: int
    items: tuple[tuple[str, int], ...]  # what one dense layer launches, for the working

    @property
    def per_step(self) -> float:
        return self.layers + self.outside


def count(m: ModelSpec, experts_touched: float | None = None) -> KernelCount:
    """Kernels one forward step launches (decode: one token per sequence); ``experts_touched``: the
    routed experts a MoE layer reads in that step (default: top-k)."""
    attn = [("norm", 1), ("QKV projection", 1), *([("q/k norm", 1)] if m.qk_norm else []),
            *([] if m.learned_positions else [("rotary", 1)]), ("K and V written into the cache", 2),
            ("attention", 2), ("output projection", 1), ("residual add", 1)]
    mlp = [("norm", 1), ("gate/up projection" if m.gated_mlp else "up projection", 1), ("activation", 1),
           ("down projection", 1), ("residual add", 1)]
    n_attn, n_mlp = sum(k for _, k in attn), sum(k for _, k in mlp)
    dense = n_attn + n_mlp
    layers = float(dense * m.n_layers)
    if m.moe:
        mo = m.moe
        touched = float(mo.top_k) if experts_touched is None else experts_touched
        experts = min(float(mo.n_routed), touched) + mo.n_shared
        moe_layer = n_attn + 4 + 3 * experts  # norm, router GEMM, top-k, residual; 3 per expert read
        n_moe = mo.n_moe_layers or m.n_layers
        layers = float(dense * (m.n_layers - n_moe) + moe_layer * n_moe)
    return KernelCount(layers=layers, outside=OUTSIDE, items=tuple(attn + mlp))


def host_s(kernels: float, launch: str, host_us: float) -> float:
    """The host's time to issue ``kernels`` kernels: none inside a replayed graph."""
    return 0.0 if launch == "graph" else kernels * host_us * 1e-6
