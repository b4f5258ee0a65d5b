"""Activation memory, counted tensor by tensor for an eager PyTorch (Hugging Face style) decoder.

Two questions, two functions:

* inference (no autograd): the largest *working set* of one layer's forward, per token -- what is
  alive at once while the prompt is processed (``prefill_working_per_token``);
* training: the bytes autograd *saves* for backward, per token per layer
  (``saved_per_token_per_layer``), plus the vocabulary-sized loss buffers.

The counts follow what the ops keep, not a fitted constant: Korthikanti et al. (2022) give
s·b·h·(34 + 5·a·s/h) bytes per layer for a GPT block in 16-bit with dropout; with FlashAttention
(no s² term), RMSNorm computed in fp32, SwiGLU and PyTorch autocast over fp32 parameters the
terms differ, and are listed here one by one so the working shows which tensor each comes from.

Precision modes (training): ``fp32`` (everything fp32), ``bf16-mixed`` (fp32 parameters, bf16
autocast: the residual stream stays fp32, each linear saves its own bf16 cast of its input), ``bf16``
(bf16 parameters and activations; fp32 master weights live in the optimizer).
"""

from __future__ import annotations

from perfstack.estimate.config import ModelSpec

Terms = list[tuple[str, float]]  # (what, bytes per token)

_FUSED_GELU = {"gelu", "gelu_pytorch_tanh", "gelu_fast", "relu", "silu", "swish", "quick_gelu", "gelu_10"}


def _python_gelu(act: str) -> bool:
    """GPT-2's "gelu_new" is written out in Python (0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))): each op saves."""
    return act in ("gelu_new",)


def prefill_working_per_token(m: ModelSpec, b: float, experts_grouped: bool = True) -> Terms:
    """Peak bytes per prompt token alive inside one layer's forward without autograd.

    The layer's input (residual) and its normalized copy stay alive while the block runs. The largest
    block is usually the MLP: SwiGLU holds act(gate)·up's three F-wide tensors at once; a Python GELU
    holds four. Attention holds q, k, v and RoPE temporaries. MoE (grouped GEMM) holds every routed
    token's copy: k·(d + 4·F_e).
    """
    d, F = m.d_model, m.d_ff
    resid: Terms = [("layer input, its normalized copy and the block output being added: 3·d·b", 3 * d * b)]
    attn = (4 * m.q_dim + 3 * m.kv_dim) * b
    if m.mla and m.mla.q_lora_rank:
        attn += (m.mla.q_lora_rank + m.mla.kv_lora_rank) * b
    if m.moe:
        mo = m.moe
        if experts_grouped:
            mlp = mo.top_k * (2 * d + 4 * mo.d_ff_expert) * b
            what = f"routed tokens (grouped GEMM): k·(2·d + 4·F_e)·b = {mo.top_k}·(2·{d} + 4·{mo.d_ff_expert})·{b:g}"
        else:
            mlp = mo.top_k / mo.n_routed * 4 * mo.d_ff_expert * b
            what = "one expert at a time: (k/E)·4·F_e·b"
        if mo.n_shared:
            mlp += 3 * mo.n_shared * mo.d_ff_shared * b
            what += " + shared experts 3·E_s·F_s·b"
        if m.n_layers > mo.n_moe_layers:
            mlp = max(mlp, 3 * F * b)
    elif m.gated_mlp:
        mlp, what = 3 * F * b, f"gated MLP act(gate)·up: 3·F·b = 3·{F}·{b:g}"
    elif _python_gelu(m.activation):
        mlp, what = 4 * F * b, f"MLP with Python GELU: 4·F·b = 4·{F}·{b:g}"
    else:
        mlp, what = 2 * F * b, f"MLP: 2·F·b = 2·{F}·{b:g}"
    if mlp >= attn:
        return resid + [(what, mlp)]
    return resid + [("attention q, k, v + RoPE temporaries: (4·H_q·d_h + 3·H_kv·d_h)·b", attn)]


def _bytes(precision: str) -> tuple[int, int]:
    """(residual-stream bytes r, compute bytes c) for a training precision."""
    if precision == "fp32":
        return 4, 4
    if precision == "bf16-mixed":
        return 4, 2
    return 2, 2


def _norm(m: ModelSpec, precision: str, consumers: int) -> Terms:
    """A pre-norm and the copies of its output that the next linears keep."""
    r, c = _bytes(precision)
    d = m.d_model
    out: Terms = []
    if m.norm == "rmsnorm" and precision == "bf16":  # x.to(fp32) kept; the bf16 x/rms kept by weight·(...)
        out.append(("RMSNorm keeps fp32 x (4·d) and bf16 x/rms(x) (2·d): 6·d", 6 * d))
    elif m.norm == "rmsnorm":  # HF RMSNorm: x.to(fp32); x * rsqrt(mean(x²)+eps); weight * (...)
        out.append(("RMSNorm keeps x and x/rms(x) in fp32: 8·d", 8 * d))
    else:  # native layer_norm keeps its (fp32 under autocast) input; mean/rstd are per token
        out.append((f"LayerNorm keeps its input: {4 if precision != 'bf16' else 2}·d",
                    (4 if precision != "bf16" else 2) * d + 8))
    if precision == "bf16-mixed":
        out.append((f"{consumers} linear(s) each keep a bf16 cast of the norm output: {consumers}·2·d",
                    consumers * 2 * d))
    else:
        out.append((f"norm output kept by the linears: {c}·d", c * d))
    return out


def saved_per_token_per_layer(m: ModelSpec, precision: str) -> Terms:
    """Bytes autograd keeps per token for one transformer layer (FlashAttention-style SDPA)."""
    _, c = _bytes(precision)
    d = m.d_model
    qd, kvd = m.q_dim, m.kv_dim
    terms: Terms = []
    n_qkv = 1 if m.fused_qkv else 3
    if m.mla:
        n_qkv = 2
    terms += [("attention " + t, v) for t, v in _norm(m, precision, n_qkv)]
    terms += _attention_terms(m, c)
    if m.qk_norm:
        terms.append(("q/k norms keep fp32 inputs and outputs: 8·(H_q + H_kv)·d_h", 8 * (qd + kvd)))
    terms.append(("softmax log-sum-exp: 4·H_q", 4 * m.n_heads))
    drop = m.dropout.get("resid", 0.0) or 0.0
    if drop > 0:
        terms.append(("residual dropout masks (1 byte, attention + MLP): 2·d", 2 * d))
    if m.norms_per_layer >= 2:
        n_mlp_in = 2 if m.gated_mlp else 1
        terms += [("MLP " + t, v) for t, v in _norm(m, precision, n_mlp_in if not m.moe else 1)]
    if m.norms_per_layer == 4:
        terms.append(("post-attention/post-MLP norms (Gemma-2/3): 2·8·d", 16 * d))
    terms += _feed_forward_terms(m, precision, c)
    if not m.norms_per_layer >= 2:  # Falcon-7B: one norm feeds attention and MLP in parallel
        terms.append(("parallel MLP input cast: 2·d", 2 * d if precision == "bf16-mixed" else 0))
    return terms


def _attention_terms(m: ModelSpec, c: int) -> Terms:
    """What attention keeps per token beyond its input norm: q, k, v (or MLA's latents) and the output."""
    qd, kvd = m.q_dim, m.kv_dim
    if m.mla:
        a = m.mla
        lat = (a.q_lora_rank or 0) + a.kv_lora_rank
        return [("MLA latents and their norms: (r_q + r_kv)·(8 + c)", lat * (8 + c)),
                ("q, k, v, output: c·H·(2·d_qk + 2·d_v)",
                 c * m.n_heads * (2 * (a.qk_nope_head_dim + a.qk_rope_head_dim) + 2 * a.v_head_dim))]
    if m.fused_qkv:
        terms: Terms = [("fused q,k,v output kept by SDPA: c·(H_q + 2·H_kv)·d_h", c * (qd + 2 * kvd))]
        if m.model_type != "gpt2":  # rope
            terms.append(("rotated q and k: c·(H_q + H_kv)·d_h", c * (qd + kvd)))
        terms.append(("attention output: c·H_q·d_h", c * qd))
        return terms
    return [("q, k (after RoPE), v kept by SDPA: c·(H_q + 2·H_kv)·d_h", c * (qd + 2 * kvd)),
            ("attention output (kept by SDPA and o_proj): c·H_q·d_h", c * qd)]


def _feed_forward_terms(m: ModelSpec, precision: str, c: int) -> Terms:
    """What the MLP (or the experts and their router) keeps per token."""
    d, F = m.d_model, m.d_ff
    if m.moe:
        mo = m.moe
        # HF's grouped-GEMM experts are not autocast-enabled: they run in the parameter dtype
        ce = 4 if precision in ("fp32", "bf16-mixed") else 2
        per = mo.top_k * ce * (2 * d + 4 * mo.d_ff_expert)
        terms: Terms = [(f"routed experts (run in the parameter dtype, {ce} B): k·{ce}·(2·d + 4·F_e)", per),
                        ("router logits and probabilities (fp32): 8·E", 8 * mo.n_routed)]
        if mo.n_shared:
            terms.append(("shared experts: E_s·4·c·F_s", mo.n_shared * 4 * c * mo.d_ff_shared))
        if m.n_layers > mo.n_moe_layers:
            dense_frac = (m.n_layers - mo.n_moe_layers) / m.n_layers
            terms.append(("dense-layer MLPs, averaged over layers: (L−L_moe)/L·4·c·F", dense_frac * 4 * c * F))
        return terms
    if m.gated_mlp:
        return [("gated MLP gate, act(gate), up, act·up: 4·c·F", 4 * c * F)]
    if _python_gelu(m.activation):
        if precision == "bf16-mixed":  # pow runs in fp32 under autocast: its fp32 input, tanh, 1+tanh stay
            return [("MLP up + Python GELU (fp32 pow/tanh under autocast): 16·F", 16 * F)]
        return [("MLP up + Python GELU: 5·c·F", 5 * c * F)]
    return [("MLP up output and activation: 2·c·F", 2 * c * F)]


def saved_outside_layers_per_token(m: ModelSpec, precision: str) -> Terms:
    """Final norm (and embedding dropout) per token."""
    terms = [("final " + t, v) for t, v in _norm(m, precision, 1)]
    if (m.dropout.get("embd", 0.0) or 0.0) > 0:
        terms.append(("embedding dropout mask: d", m.d_model))
    return terms


def checkpointed_per_token_per_layer(m: ModelSpec, precision: str) -> float:
    """With activation checkpointing each layer keeps only its input (the residual stream)."""
    r, _ = _bytes(precision)
    return r * m.d_model


def loss_buffers_per_token(m: ModelSpec) -> float:
    """fp32 log-probabilities (kept for backward), their gradient, and the gradient of the fp32 logits.

    Hugging Face upcasts the logits to fp32 before cross-entropy; at the start of backward three
    V-wide fp32 tensors per token are alive at once: 12·V bytes.
    """
    return 12 * m.vocab_size
