"""FLOPs of a forward pass, a decode step and a training step (F1-F4, F7, X3).

One multiply-add is 2 FLOP, so a token through a weight matrix of n parameters costs 2·n FLOP:
    forward           ≈ 2·N_mm·T + attention                     (N_mm: matmul parameters a token uses)
    attention (causal)= 4·L·H_q·d_h · Σ_t min(t, W)               (QKᵀ and A·V; F3 corrected to H_q)
    training step     ≈ 6·N_mm·T + 3·attention  (8·N_mm·T + 4·attention with full recompute, X3)
The embedding lookup is not a matmul and costs nothing here; the output projection (lm_head) is.
"""

from __future__ import annotations

from perfstack.estimate.config import ModelSpec
from perfstack.estimate.params import count


def attn_flops_per_pair(m: ModelSpec) -> float:
    """FLOPs for one (query, key) pair summed over layers: 2·d_qk (QKᵀ) + 2·d_v (A·V) per head."""
    if m.mla:
        a = m.mla
        return 2 * m.n_layers * m.n_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim + a.v_head_dim)
    return 4 * m.n_layers * m.n_heads * m.head_dim


def _pairs_causal(S: int, window: int | None) -> float:
    """Σ_{t=1..S} min(t, W): (query, key) pairs of a causal prefill of S tokens."""
    if not window or window >= S:
        return S * (S + 1) / 2
    return window * (window + 1) / 2 + (S - window) * window


def attention_pairs(m: ModelSpec, S: int) -> float:
    """Causal (query, key) pairs per sequence, averaged over window and full layers."""
    if not m.sliding_window or not m.sliding_layers:
        return _pairs_causal(S, None)
    f = m.sliding_layers / m.n_layers
    return f * _pairs_causal(S, m.sliding_window) + (1 - f) * _pairs_causal(S, None)


def context_keys(m: ModelSpec, ctx: float) -> float:
    """Keys one new token attends to at context ``ctx`` (window layers cap at W)."""
    if not m.sliding_window or not m.sliding_layers:
        return ctx
    f = m.sliding_layers / m.n_layers
    return f * min(ctx, m.sliding_window) + (1 - f) * ctx


def prefill(m: ModelSpec, batch: int, prompt: int) -> tuple[float, float]:
    """(matmul FLOPs, attention FLOPs) to process B prompts; logits only for the last position."""
    c = count(m)
    head = m.vocab_size * m.d_model
    mm = 2 * (c.matmul_active - head) * batch * prompt + 2 * head * batch
    return mm, attn_flops_per_pair(m) * attention_pairs(m, prompt) * batch


def decode_step(m: ModelSpec, batch: int, ctx: float) -> tuple[float, float]:
    """(matmul FLOPs, attention FLOPs) for one new token per sequence at context ``ctx``."""
    c = count(m)
    return 2 * c.matmul_active * batch, attn_flops_per_pair(m) * context_keys(m, ctx) * batch


def training_step(m: ModelSpec, tokens: int, seq: int, recompute: bool = False) -> tuple[float, float]:
    """(matmul FLOPs, attention FLOPs) for one step over ``tokens`` tokens of sequences of ``seq``."""
    c = count(m)
    passes = 8 if recompute else 6  # fwd 2 + bwd 4 (+ fwd again when recomputing)
    seqs = tokens / seq
    attn_fwd = attn_flops_per_pair(m) * attention_pairs(m, seq) * seqs
    return passes * c.matmul_active * tokens, attn_fwd * passes / 2
