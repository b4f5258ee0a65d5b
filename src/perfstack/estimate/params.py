"""Parameter counts from a ModelSpec: every weight tensor, total N and active-per-token N_act.

The model is listed tensor by tensor (one row per kind of tensor, with how many copies exist and
how many a token uses), so the same list serves the counts, the weight bytes under quantization,
Adafactor's factored state, and the matmul FLOPs. Dense, SwiGLU, no biases (the common case):

    N = L·[d·H_q·d_h + 2·d·H_kv·d_h + H_q·d_h·d + 3·d·F + 2d] + V·d·(1 if tied else 2) + d
"""

from __future__ import annotations

from dataclasses import dataclass

from perfstack.estimate.config import ModelSpec
from perfstack.estimate.quantity import Quantity, q


@dataclass(frozen=True)
class Weight:
    name: str
    rows: int  # a matrix is rows x cols; a vector has cols == 1
    cols: int
    copies: int  # how many exist (layers x experts)
    active: int  # how many one token uses
    kind: str  # "embedding", "lm_head", "attn", "mlp", "expert", "shared_expert", "router", "norm", "bias"

    @property
    def size(self) -> int:
        return self.rows * self.cols

    @property
    def total(self) -> int:
        return self.size * self.copies

    @property
    def matmul(self) -> bool:
        """Used as the weight of a matrix multiply (FLOPs, quantization, autocast copies)."""
        return self.kind in ("lm_head", "attn", "mlp", "expert", "shared_expert", "router")


def weights(m: ModelSpec) -> list[Weight]:
    """Every weight tensor of the model, grouped by kind."""
    L, d, V = m.n_layers, m.d_model, m.vocab_size
    out: list[Weight] = [Weight("embed_tokens", V, d, 1, 1, "embedding")]
    if m.learned_positions:
        out.append(Weight("embed_positions", m.learned_positions, d, 1, 1, "embedding"))
    # attention
    if m.mla:
        a = m.mla
        H = m.n_heads
        if a.q_lora_rank:
            out += [Weight("q_a_proj", d, a.q_lora_rank, L, L, "attn"),
                    Weight("q_a_norm", a.q_lora_rank, 1, L, L, "norm"),
                    Weight("q_b_proj", a.q_lora_rank, H * (a.qk_nope_head_dim + a.qk_rope_head_dim), L, L, "attn")]
        else:
            out.append(Weight("q_proj", d, H * (a.qk_nope_head_dim + a.qk_rope_head_dim), L, L, "attn"))
        out += [Weight("kv_a_proj", d, a.kv_lora_rank + a.qk_rope_head_dim, L, L, "attn"),
                Weight("kv_a_norm", a.kv_lora_rank, 1, L, L, "norm"),
                Weight("kv_b_proj", a.kv_lora_rank, H * (a.qk_nope_head_dim + a.v_head_dim), L, L, "attn"),
                Weight("o_proj", H * a.v_head_dim, d, L, L, "attn")]
    elif m.fused_qkv:
        out += [Weight("qkv_proj", d, m.q_dim + 2 * m.kv_dim, L, L, "attn"), Weight("o_proj", m.q_dim, d, L, L, "attn")]
    else:
        out += [Weight("q_proj", d, m.q_dim, L, L, "attn"), Weight("k_proj", d, m.kv_dim, L, L, "attn"),
                Weight("v_proj", d, m.kv_dim, L, L, "attn"), Weight("o_proj", m.q_dim, d, L, L, "attn")]
    if m.qkv_bias:
        out.append(Weight("qkv_bias", m.q_dim + 2 * m.kv_dim, 1, L, L, "bias"))
    if m.o_bias:
        out.append(Weight("o_bias", d, 1, L, L, "bias"))
    if m.qk_norm:
        out.append(Weight("qk_norm", 2 * m.head_dim, 1, L, L, "norm"))
    # feed-forward
    n_mats = 3 if m.gated_mlp else 2
    moe = m.moe
    n_dense = L - (moe.n_moe_layers if moe else 0)
    if n_dense:
        out.append(Weight("mlp", d, n_mats * m.d_ff, n_dense, n_dense, "mlp"))
        if m.mlp_bias:
            out.append(Weight("mlp_bias", (n_mats - 1) * m.d_ff + d, 1, n_dense, n_dense, "bias"))
    if moe:
        n = moe.n_moe_layers
        out += [Weight("router", d, moe.n_routed, n, n, "router"),
                Weight("experts", d, 3 * moe.d_ff_expert, n * moe.n_routed, n * moe.top_k, "expert")]
        if moe.router_bias:
            out.append(Weight("router_bias", moe.n_routed, 1, n, n, "bias"))
        if moe.n_shared:
            out.append(Weight("shared_experts", d, 3 * moe.d_ff_shared, n * moe.n_shared, n * moe.n_shared,
                              "shared_expert"))
        if moe.shared_gate:
            out.append(Weight("shared_expert_gate", d, 1, n, n, "router"))
    # norms: RMSNorm has a weight, LayerNorm a weight and a bias
    per_norm = 2 * d if m.norm == "layernorm" else d
    out.append(Weight("layer_norms", per_norm, 1, L * m.norms_per_layer, L * m.norms_per_layer, "norm"))
    out.append(Weight("final_norm", per_norm, 1, 1, 1, "norm"))
    if not m.tied_embeddings:
        out.append(Weight("lm_head", d, V, 1, 1, "lm_head"))
    return out


@dataclass(frozen=True)
class Counts:
    total: int  # N
    active: int  # N_act: used by one token (MoE: top-k + shared experts)
    embedding: int  # token (+ position) embedding tables
    lm_head: int  # untied output projection (0 when tied)
    matmul_active: int  # parameters one token multiplies through (FLOPs = 2 per parameter per token)
    matmul_total: int


def count(m: ModelSpec) -> Counts:
    ws = weights(m)
    emb = sum(w.total for w in ws if w.kind == "embedding")
    head = sum(w.total for w in ws if w.kind == "lm_head")
    mm_act = sum(w.size * w.active for w in ws if w.matmul)
    if m.tied_embeddings:
        mm_act += m.vocab_size * m.d_model  # the tied table is also the output projection
    return Counts(total=sum(w.total for w in ws), active=sum(w.size * w.active for w in ws), embedding=emb,
                  lm_head=head, matmul_active=mm_act, matmul_total=sum(w.total for w in ws if w.matmul))


def quantities(m: ModelSpec) -> list[Quantity]:
    c = count(m)
    sym: dict[str, int | None] = {"L": m.n_layers, "d": m.d_model, "H_q": m.n_heads, "H_kv": m.n_kv_heads, "d_h": m.head_dim,
           "F": m.d_ff, "V": m.vocab_size}
    mlp = "3·d·F" if m.gated_mlp else "2·d·F"
    attn = "d·H_q·d_h + 2·d·H_kv·d_h + H_q·d_h·d"
    notes = []
    if m.mla:
        a = m.mla
        attn = "d·r_q + r_q·H·(d_nope+d_rope) + d·(r_kv+d_rope) + r_kv·H·(d_nope+d_v) + H·d_v·d"
        sym.update(r_q=a.q_lora_rank, r_kv=a.kv_lora_rank, d_nope=a.qk_nope_head_dim, d_rope=a.qk_rope_head_dim,
                   d_v=a.v_head_dim)
    if m.moe:
        mo = m.moe
        mlp = f"({mlp} on {m.n_layers - mo.n_moe_layers} dense layers) or (E·3·d·F_e + E_s·3·d·F_s + d·E on MoE layers)"
        sym.update(E=mo.n_routed, k=mo.top_k, F_e=mo.d_ff_expert, E_s=mo.n_shared, F_s=mo.d_ff_shared,
                   L_moe=mo.n_moe_layers)
    head = "V·d (tied)" if m.tied_embeddings else "2·V·d"
    formula = f"N = L·[{attn} + {mlp} + norms] + {head} + final norm"
    if m.learned_positions:
        formula += " + P·d (positions)"
        sym["P"] = m.learned_positions
    if m.qkv_bias or m.o_bias or m.mlp_bias:
        notes.append("biases counted where the architecture has them")
    out = [q("params_total", "parameters (N)", c.total, "params", formula, sym, notes)]
    if m.moe:
        out.append(q("params_active", "active parameters per token (N_act)", c.active, "params",
                     "N − L_moe·(E − k)·3·d·F_e", {"N": c.total, "E": m.moe.n_routed, "k": m.moe.top_k},
                     ["active = all non-expert weights + shared experts + top-k routed experts"]))
    else:
        out.append(q("params_active", "active parameters per token (N_act)", c.active, "params", "N_act = N (dense)",
                     {"N": c.total}))
    return out
