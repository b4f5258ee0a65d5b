"""Hugging Face ``config.json`` -> a typed ``ModelSpec`` that every estimate reads.

Supported ``model_type`` values: dense decoders (llama, mistral, qwen2, qwen3, gemma, gemma2,
gemma3_text, gpt2, gpt_neox, falcon), mixture-of-experts (mixtral, qwen2_moe, qwen3_moe) and
DeepSeek (deepseek_v2, deepseek_v3: MLA attention, shared + routed experts). Multimodal configs
that nest the language model under ``text_config`` are unwrapped. A missing field or an unknown
architecture is an ``InputError`` that names the field, so the user knows what to add.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from perfstack import jsonload
from perfstack.errors import InputError


@dataclass(frozen=True)
class MoE:
    n_routed: int  # E: routed experts per MoE layer
    top_k: int  # k: routed experts each token uses
    d_ff_expert: int  # F_e: intermediate size of one routed expert
    n_shared: int = 0  # shared experts every token uses (DeepSeek, Qwen-MoE)
    d_ff_shared: int = 0  # intermediate size of one shared expert
    n_moe_layers: int = 0  # how many of the L layers are MoE (others dense, with F)
    router_bias: bool = False  # DeepSeek-V3 e_score_correction_bias
    shared_gate: bool = False  # Qwen2-MoE sigmoid gate on the shared expert (d x 1)


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2/V3): K and V are cached as one compressed latent."""

    q_lora_rank: int | None  # None: plain q_proj (DeepSeek-V2-Lite)
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class ModelSpec:
    name: str
    model_type: str
    n_layers: int  # L
    d_model: int  # d
    n_heads: int  # H_q
    n_kv_heads: int  # H_kv
    head_dim: int  # d_h
    d_ff: int  # F (dense layers)
    vocab_size: int  # V
    max_seq_len: int | None  # context the model was configured for
    tied_embeddings: bool = False
    gated_mlp: bool = True  # SwiGLU/GeGLU: 3 matrices (gate, up, down); else 2 (up, down)
    activation: str = "silu"
    norm: str = "rmsnorm"  # or "layernorm" (weight + bias)
    norms_per_layer: int = 2
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3, Gemma3)
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    fused_qkv: bool = False  # one projection for q, k, v (GPT-2, NeoX, Falcon)
    learned_positions: int = 0  # size of a learned position table (GPT-2), 0 for RoPE
    sliding_window: int | None = None  # W
    sliding_layers: int = 0  # layers that use the window (others attend to the full context)
    dropout: Mapping[str, float] = field(default_factory=dict)  # "embd", "attn", "resid" -> p in training
    moe: MoE | None = None
    mla: MLA | None = None
    source: str = ""

    @property
    def q_dim(self) -> int:
        """H_q · d_h: width of the query (and attention output) projection."""
        if self.mla:
            return self.n_heads * (self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim)
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """H_kv · d_h: width of each of the K and V projections (per token)."""
        return self.n_kv_heads * self.head_dim

    @property
    def attention_kind(self) -> str:
        if self.mla:
            return "MLA"
        if self.n_kv_heads == self.n_heads:
            return "MHA"
        return "MQA" if self.n_kv_heads == 1 else "GQA"

    def describe(self) -> str:
        parts = [f"{self.model_type}", f"L={self.n_layers}", f"d={self.d_model}", f"H_q={self.n_heads}",
                 f"H_kv={self.n_kv_heads}", f"d_h={self.head_dim}", f"F={self.d_ff}", f"V={self.vocab_size}",
                 self.attention_kind]
        if self.moe:
            parts.append(f"MoE {self.moe.n_routed}x{self.moe.d_ff_expert} top-{self.moe.top_k}"
                         + (f" +{self.moe.n_shared} shared" if self.moe.n_shared else ""))
        if self.sliding_window:
            parts.append(f"window {self.sliding_window} on {self.sliding_layers}/{self.n_layers} layers")
        if self.tied_embeddings:
            parts.append("tied embeddings")
        return " · ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        d = asdict(self)
        d["dropout"] = dict(self.dropout)
        d["attention"] = self.attention_kind
        return d

    def with_overrides(self, **changes: Any) -> "ModelSpec":
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


SUPPORTED = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "gpt2", "gpt_neox", "falcon",
             "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3")


# No dimension, count or context length of a real model comes near this; larger is a broken file.
MAX_SIZE = 2**40


class _Fields:
    """Reads fields of one config dict, naming the missing or malformed one in the error."""

    def __init__(self, cfg: Mapping[str, Any], where: str) -> None:
        self.cfg = cfg
        self.where = where

    def _bad(self, key: str, why: str) -> InputError:
        return InputError(f"{self.where}: field '{key}' {why} (model_type {self.cfg.get('model_type')!r})",
                          hint=f"{'add' if why == 'is missing' else 'correct'} \"{key}\" in the config, or pass it "
                               "with the matching --flag")

    def int(self, key: str, *alts: str, default: Any = ..., positive: bool = True) -> Any:
        for k in (key, *alts):
            v = self.cfg.get(k)
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, int) or (positive and v <= 0):
                    raise self._bad(k, f"must be a positive integer, got {v!r}")
                if v > MAX_SIZE:  # 10**300 layers would overflow every float formula downstream
                    raise self._bad(k, f"is {v:.3g}, beyond any model (at most {MAX_SIZE:,})")
                return v
        if default is ...:
            raise self._bad(key, "is missing")
        return default

    def float(self, key: str, default: float = 0.0) -> float:
        v = self.cfg.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self._bad(key, f"must be a number, got {v!r}")
        return float(v)

    def bool(self, key: str, default: bool) -> bool:
        v = self.cfg.get(key)
        return default if v is None else bool(v)


def _window(f: _Fields, n_layers: int, model_type: str) -> tuple[int | None, int]:
    """(W, how many layers use it) following each family's switches."""
    cfg = f.cfg
    w = cfg.get("sliding_window")
    if not isinstance(w, int) or isinstance(w, bool) or w <= 0:
        return None, 0
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        n = sum(1 for t in layer_types if str(t).startswith("sliding"))
        return (w, n) if n else (None, 0)
    if model_type in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        if not cfg.get("use_sliding_window", False):
            return None, 0  # Qwen ships sliding_window = context with use_sliding_window false: off
        first_full = min(int(cfg.get("max_window_layers", n_layers)), n_layers)
        return w, n_layers - first_full
    if model_type == "gemma2":
        return w, n_layers // 2  # alternating local / global, local first
    if model_type == "gemma3_text":
        pattern = int(cfg.get("sliding_window_pattern", 6))
        return w, n_layers - n_layers // pattern
    return w, n_layers


def parse_config(cfg: Mapping[str, Any], name: str = "", where: str = "config.json") -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config dict."""
    cfg, mt = _text_config(cfg, where)
    f = _Fields(cfg, where)
    name = name or str(cfg.get("_name_or_path") or mt)
    if mt == "gpt2":
        return _gpt2(f, cfg, name, where)
    if mt == "falcon":
        return _falcon(f, name, where)
    if mt == "gpt_neox":
        return _gpt_neox(f, cfg, name, where)
    return _decoder(f, cfg, mt, name, where)


def _text_config(cfg: Mapping[str, Any], where: str) -> tuple[Mapping[str, Any], str]:
    """The language model's part of a config (a multimodal config nests it under text_config), and its type."""
    if not isinstance(cfg, Mapping):
        raise InputError(f"{where} must hold a JSON object, got {type(cfg).__name__}")
    if "model_type" not in cfg and isinstance(cfg.get("text_config"), Mapping):
        cfg = cfg["text_config"]
    elif isinstance(cfg.get("text_config"), Mapping) and cfg.get("model_type") not in SUPPORTED:
        cfg = cfg["text_config"]
    mt = cfg.get("model_type")
    if mt is None:
        raise InputError(f"{where}: field 'model_type' is missing",
                         hint=f"add \"model_type\" (one of {', '.join(SUPPORTED)}) or describe the model with flags")
    if mt not in SUPPORTED:
        raise InputError(f"{where}: model_type {mt!r} is not supported",
                         hint=f"supported: {', '.join(SUPPORTED)}; or give the shape with --layers/--hidden/... flags")
    return cfg, mt


def _gpt2(f: _Fields, cfg: Mapping[str, Any], name: str, where: str) -> ModelSpec:
    d = f.int("n_embd", "hidden_size")
    L = f.int("n_layer", "num_hidden_layers")
    H = f.int("n_head", "num_attention_heads")
    return ModelSpec(
        name=name, model_type="gpt2", n_layers=L, d_model=d, n_heads=H, n_kv_heads=H, head_dim=d // H,
        d_ff=f.int("n_inner", default=4 * d), vocab_size=f.int("vocab_size"),
        max_seq_len=f.int("n_positions", "n_ctx", default=None),
        tied_embeddings=f.bool("tie_word_embeddings", True),
        gated_mlp=False, activation=str(cfg.get("activation_function", "gelu_new")), norm="layernorm",
        qkv_bias=True, o_bias=True, mlp_bias=True, fused_qkv=True,
        learned_positions=f.int("n_positions", "n_ctx", default=1024),
        dropout={"embd": f.float("embd_pdrop", 0.1), "attn": f.float("attn_pdrop", 0.1),
                 "resid": f.float("resid_pdrop", 0.1)},
        source=where)


def _falcon(f: _Fields, name: str, where: str) -> ModelSpec:
    d = f.int("hidden_size")
    L = f.int("num_hidden_layers")
    H = f.int("num_attention_heads")
    new_arch = f.bool("new_decoder_architecture", False)
    if new_arch:
        kv = f.int("num_kv_heads", default=H)
    else:
        kv = 1 if f.bool("multi_query", True) else H
    bias = f.bool("bias", False)
    return ModelSpec(
        name=name, model_type="falcon", n_layers=L, d_model=d, n_heads=H, n_kv_heads=kv, head_dim=d // H,
        d_ff=f.int("ffn_hidden_size", default=4 * d), vocab_size=f.int("vocab_size"),
        max_seq_len=f.int("max_position_embeddings", default=2048),
        tied_embeddings=f.bool("tie_word_embeddings", True), gated_mlp=False, activation="gelu",
        norm="layernorm", norms_per_layer=(f.int("num_ln_in_parallel_attn", default=2) if new_arch else 1),
        qkv_bias=bias, o_bias=bias, mlp_bias=bias, fused_qkv=True,
        dropout={"attn": f.float("attention_dropout"), "resid": f.float("hidden_dropout")}, source=where)


def _gpt_neox(f: _Fields, cfg: Mapping[str, Any], name: str, where: str) -> ModelSpec:
    d = f.int("hidden_size")
    L = f.int("num_hidden_layers")
    H = f.int("num_attention_heads")
    return ModelSpec(
        name=name, model_type="gpt_neox", n_layers=L, d_model=d, n_heads=H, n_kv_heads=H, head_dim=d // H,
        d_ff=f.int("intermediate_size", default=4 * d), vocab_size=f.int("vocab_size"),
        max_seq_len=f.int("max_position_embeddings", default=None),
        tied_embeddings=f.bool("tie_word_embeddings", False), gated_mlp=False,
        activation=str(cfg.get("hidden_act", "gelu")), norm="layernorm",
        qkv_bias=f.bool("attention_bias", True), o_bias=f.bool("attention_bias", True), mlp_bias=True,
        fused_qkv=True, dropout={"attn": f.float("attention_dropout"), "resid": f.float("hidden_dropout")},
        source=where)


def _decoder(f: _Fields, cfg: Mapping[str, Any], mt: str, name: str, where: str) -> ModelSpec:
    """The Llama-shaped families: gated MLP, RMSNorm, grouped-query attention; MoE and MLA where they have them."""
    d = f.int("hidden_size")
    L = f.int("num_hidden_layers")
    H = f.int("num_attention_heads")
    kv = f.int("num_key_value_heads", default=H)
    head_dim = f.int("head_dim", default=None) or d // H
    W, n_win = _window(f, L, mt)
    common: dict[str, Any] = dict(
        name=name, model_type=mt, n_layers=L, d_model=d, n_heads=H, n_kv_heads=kv, head_dim=head_dim,
        vocab_size=f.int("vocab_size"), max_seq_len=f.int("max_position_embeddings", default=None),
        activation=str(cfg.get("hidden_act") or cfg.get("hidden_activation") or "silu"),
        sliding_window=W, sliding_layers=n_win, source=where,
        dropout={"attn": f.float("attention_dropout")},
    )
    if mt in ("llama", "mistral", "mixtral"):
        common.update(tied_embeddings=f.bool("tie_word_embeddings", False), qkv_bias=f.bool("attention_bias", False),
                      o_bias=f.bool("attention_bias", False), mlp_bias=f.bool("mlp_bias", False))
    elif mt in ("qwen2", "qwen2_moe"):
        common.update(tied_embeddings=f.bool("tie_word_embeddings", False), qkv_bias=True)
    elif mt in ("qwen3", "qwen3_moe"):
        common.update(tied_embeddings=f.bool("tie_word_embeddings", False), qk_norm=True,
                      qkv_bias=f.bool("attention_bias", False), o_bias=f.bool("attention_bias", False))
    elif mt in ("gemma", "gemma2", "gemma3_text"):
        common.update(tied_embeddings=f.bool("tie_word_embeddings", True), norms_per_layer=2 if mt == "gemma" else 4,
                      qk_norm=(mt == "gemma3_text"), qkv_bias=f.bool("attention_bias", False),
                      o_bias=f.bool("attention_bias", False))
    elif mt in ("deepseek_v2", "deepseek_v3"):
        common.update(tied_embeddings=f.bool("tie_word_embeddings", False))
    return _experts(f, cfg, mt, L, H, common)


def _experts(f: _Fields, cfg: Mapping[str, Any], mt: str, L: int, H: int, common: dict[str, Any]) -> ModelSpec:
    """The MLP of a decoder: dense, or mixture of experts (Mixtral, Qwen MoE, DeepSeek with MLA)."""
    if mt == "mixtral":
        E = f.int("num_local_experts")
        return ModelSpec(d_ff=f.int("intermediate_size"), moe=MoE(
            n_routed=E, top_k=f.int("num_experts_per_tok"), d_ff_expert=f.int("intermediate_size"), n_moe_layers=L),
            **common)
    if mt in ("qwen2_moe", "qwen3_moe"):
        step = f.int("decoder_sparse_step", default=1)
        dense_layers = set(cfg.get("mlp_only_layers") or [])
        n_moe = sum(1 for i in range(L) if i not in dense_layers and (i + 1) % step == 0)
        shared_ff = f.int("shared_expert_intermediate_size", default=0, positive=False) if mt == "qwen2_moe" else 0
        return ModelSpec(d_ff=f.int("intermediate_size", default=f.int("moe_intermediate_size")), moe=MoE(
            n_routed=f.int("num_experts"), top_k=f.int("num_experts_per_tok"),
            d_ff_expert=f.int("moe_intermediate_size"),
            n_shared=1 if shared_ff else 0, d_ff_shared=shared_ff, n_moe_layers=n_moe, shared_gate=bool(shared_ff)),
            **common)
    if mt in ("deepseek_v2", "deepseek_v3"):
        mla = MLA(q_lora_rank=f.int("q_lora_rank", default=None), kv_lora_rank=f.int("kv_lora_rank"),
                  qk_nope_head_dim=f.int("qk_nope_head_dim"), qk_rope_head_dim=f.int("qk_rope_head_dim"),
                  v_head_dim=f.int("v_head_dim"))
        common.update(head_dim=mla.v_head_dim, n_kv_heads=H)
        n_routed = f.int("n_routed_experts", default=None)
        moe = None
        if n_routed:
            first_dense = f.int("first_k_dense_replace", default=0, positive=False)
            freq = f.int("moe_layer_freq", default=1)
            n_moe = sum(1 for i in range(L) if i >= first_dense and i % freq == 0)
            n_shared = f.int("n_shared_experts", default=0, positive=False)
            ffe = f.int("moe_intermediate_size")
            moe = MoE(n_routed=n_routed, top_k=f.int("num_experts_per_tok"), d_ff_expert=ffe, n_shared=n_shared,
                      d_ff_shared=ffe, n_moe_layers=n_moe, router_bias=(mt == "deepseek_v3"))
        return ModelSpec(d_ff=f.int("intermediate_size"), moe=moe, mla=mla, **common)
    return ModelSpec(d_ff=f.int("intermediate_size"), **common)


def load_config(path: str | Path) -> ModelSpec:
    """Read ``config.json`` (or a directory holding one) into a ModelSpec."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.exists():
        raise InputError(f"model config {p} does not exist",
                         hint="give a config.json path, a directory holding one, or a built-in model name "
                              "('perfstack estimate models' lists them)")
    # bounded: a regular file of at most 16 MiB (the largest configs are tens of kB); depth, digits,
    # NaN, each named
    data = jsonload.read(p, "model config", limit=16 * 2**20)
    name = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    return parse_config(data, name=name, where=str(p))
