"""Memory per GPU: inference (weights, KV cache, working set) and training (ZeRO-style model states).

Inference (F24, F26, F29, X8, X9, X11):
    weights   = Σ tensors · b_w                        (quantized block linears; embeddings stay 16-bit)
    kv_tok    = 2·L·H_kv·d_h·b_kv                      (MLA: L·(r_kv + d_rope)·b_kv; window layers cap at W)
    peak      = weights + max(KV(S_prompt) + prefill working set, KV(S_prompt + N_gen) + decode working set)
Training (X1, X2): parameters + gradients + optimizer states (+ fp32 master) + autocast copies +
activations (+ loss buffers), with the optimizer step's temporaries as a second candidate peak.
Everything is in bytes; ``allocated`` is what ``torch.cuda.max_memory_allocated`` would report,
``total`` adds the CUDA context and allocator slack that it does not see.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfstack.estimate import activations as act
from perfstack.estimate.config import ModelSpec
from perfstack.estimate.params import count, weights

DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
# Effective bytes per quantized weight including scales (F25): int8 per-channel scales ≈ 1 B;
# int4 with a 16-bit scale and zero per group of 128 = 4.25 bits; fp8 with per-tensor scales = 1 B.
QUANT_BYTES = {"int8": 1.0, "int4": 4.25 / 8, "fp8": 1.0}
# cuBLAS + cuBLASLt workspaces (32 MiB each on Hopper), allocated through PyTorch's caching allocator
# and kept for the life of the process: 67-69 MB stayed allocated between models on the project's
# H100 (torch 2.11, tests/fixtures/estimate/h100-validation.json).
WORKSPACE = 64 * 2**20
# Not seen by torch.cuda.max_memory_allocated(): the CUDA context and library handles (0.73-0.87 GB of
# device memory beyond the allocator's reservation in the validation runs) and the caching
# allocator's reserved-but-unallocated blocks. Fitted on those 20 runs (device memory used vs
# estimate: -14 % to +16 %, mean |error| 7 %): context + 0.5 GB + 15 % of what is allocated above the
# weights (the part that grows and shrinks and so fragments).
CUDA_CONTEXT = 0.85e9
ALLOCATOR_FIXED = 0.5e9
ALLOCATOR_SLACK = 0.15


def overhead(peak: float, static: float, context_bytes: float = CUDA_CONTEXT) -> float:
    """CUDA context + allocator slack on top of the tensors (``static``: weights or parameters)."""
    return context_bytes + ALLOCATOR_FIXED + ALLOCATOR_SLACK * max(0.0, peak - static)


@dataclass(frozen=True)
class KV:
    per_token: float  # bytes per token per sequence on this GPU (full-attention layers)
    per_token_window: float  # bytes per token in sliding-window layers (capped at W tokens)
    window: int | None
    formula: str

    def per_seq(self, tokens: float) -> float:
        w = min(tokens, self.window) if self.window else tokens
        return self.per_token * tokens + self.per_token_window * w


def kv_cache(m: ModelSpec, b_kv: float, tp: int = 1) -> KV:
    """Bytes of K and V per token (F29), MLA latent (X9), sliding window (X8), TP sharding (X11)."""
    if m.mla:
        per_layer = (m.mla.kv_lora_rank + m.mla.qk_rope_head_dim) * b_kv  # latent is replicated across TP
        return KV(m.n_layers * per_layer, 0.0, None, "L·(r_kv + d_rope)·b_kv (MLA latent; replicated under TP)")
    kv_heads = math.ceil(m.n_kv_heads / tp) if tp > 1 else m.n_kv_heads
    per_layer = 2 * kv_heads * m.head_dim * b_kv
    full_layers = m.n_layers - m.sliding_layers if m.sliding_window else m.n_layers
    win_layers = m.n_layers - full_layers
    f = "2·L·H_kv·d_h·b_kv" if tp == 1 else "2·L·⌈H_kv/TP⌉·d_h·b_kv"
    if win_layers:
        f += f" ({win_layers} window layers hold at most W = {m.sliding_window} tokens)"
    return KV(full_layers * per_layer, win_layers * per_layer, m.sliding_window if win_layers else None, f)


def weight_bytes(m: ModelSpec, b_w: float, quant: str | None = None, tp: int = 1) -> float:
    """Σ parameters · bytes; with ``quant`` the transformer-block matrices use QUANT_BYTES[quant]."""
    total = 0.0
    for w in weights(m):
        blockmat = w.kind in ("attn", "mlp", "expert", "shared_expert")
        b = QUANT_BYTES[quant] if (quant and blockmat) else b_w
        total += w.total * b
    return total / tp


@dataclass(frozen=True)
class InferenceMemory:
    weights: float
    kv_per_token: float  # all layers, one sequence, full-attention layers
    kv_total: float  # B sequences at S_prompt + N_gen
    prefill_working: float  # activations while the prompt runs
    decode_working: float
    workspace: float
    peak_allocated: float
    overhead: float
    total: float
    peak_phase: str  # "prefill" or "decode"
    per_seq_prefill: float  # bytes one more sequence adds at the prefill peak
    per_seq_decode: float


@dataclass(frozen=True)
class ElementBytes:
    """Bytes per element of what a serving GPU holds: the weights (before quantization), the activations
    and the KV cache; and the weights' quantized format, when they are stored in one."""

    weights: float
    activations: float
    kv: float
    quant: str | None = None  # int8 | int4 | fp8


def inference(m: ModelSpec, batch: int, prompt: int, gen: int, elem: ElementBytes, tp: int = 1,
              prefill_chunk: int | None = None, context_bytes: float = CUDA_CONTEXT) -> InferenceMemory:
    b_w, b_act, b_kv, quant = elem.weights, elem.activations, elem.kv, elem.quant
    W = weight_bytes(m, b_w, quant, tp)
    kv = kv_cache(m, b_kv, tp)
    chunk = min(prompt, prefill_chunk) if prefill_chunk else prompt
    per_tok = sum(v for _, v in act.prefill_working_per_token(m, b_act)) / tp
    logits = m.vocab_size * (b_act + 4 + 4)  # last-token logits, an fp32 copy, and the sampler's scores
    prefill_ws = per_tok * chunk + logits
    layer_kv_slice = kv.per_seq(prompt + gen) / max(m.n_layers, 1) / 2  # torch.cat grows one of K/V at a time
    decode_ws = logits + layer_kv_slice + (2 * m.d_model + 3 * m.d_ff) * b_act / tp
    per_seq_prefill = kv.per_seq(prompt) + prefill_ws
    per_seq_decode = kv.per_seq(prompt + gen) + decode_ws
    a, b = batch * per_seq_prefill, batch * per_seq_decode
    peak = W + WORKSPACE + max(a, b)
    extra = overhead(peak, W, context_bytes)
    return InferenceMemory(
        weights=W, kv_per_token=kv.per_token + kv.per_token_window, kv_total=batch * kv.per_seq(prompt + gen),
        prefill_working=batch * prefill_ws, decode_working=batch * decode_ws, workspace=WORKSPACE,
        peak_allocated=peak, overhead=extra, total=peak + extra, peak_phase="prefill" if a >= b else "decode",
        per_seq_prefill=per_seq_prefill, per_seq_decode=per_seq_decode)


def max_batch(mem: InferenceMemory, capacity: float, context_bytes: float = CUDA_CONTEXT) -> int:
    """Largest B with total(B) ≤ capacity, where total(B) = W + (ws + B·per_seq)·(1 + slack) + context + fixed."""
    room = (capacity - context_bytes - ALLOCATOR_FIXED - mem.weights) / (1 + ALLOCATOR_SLACK) - mem.workspace
    per_seq = max(mem.per_seq_prefill, mem.per_seq_decode)
    return max(0, int(room // per_seq)) if per_seq > 0 else 0


# --- training ---------------------------------------------------------------------------------

OPTIMIZER_BYTES = {"adamw": 8.0, "adam": 8.0, "sgd": 4.0, "adam8bit": 2.0, "adafactor": None}


@dataclass(frozen=True)
class TrainingMemory:
    params: float
    grads: float
    optimizer: float
    master: float
    autocast_copies: float
    activations: float  # saved for backward, all layers this GPU holds
    activations_no_ckpt: float
    activations_ckpt: float
    loss_buffers: float
    optimizer_temp: float
    workspace: float
    peak_forward_backward: float
    peak_optimizer: float
    peak_allocated: float
    overhead: float
    total: float
    peak_phase: str
    notes: tuple[str, ...]


def adafactor_state_bytes(m: ModelSpec) -> float:
    """Factored second moment: (rows + cols)·4 B per matrix, full for vectors; no first moment."""
    tot = 0.0
    for w in weights(m):
        tot += ((w.rows + w.cols) * 4 if w.cols > 1 else w.rows * 4) * w.copies
    return tot


def training(m: ModelSpec, batch: int, seq: int, precision: str, optimizer: str, grad_ckpt: bool = False,
             zero: int = 0, dp: int = 1, tp: int = 1, pp: int = 1, micro_batches: int = 1,
             context_bytes: float = CUDA_CONTEXT) -> TrainingMemory:
    """Per-GPU bytes for one training step; ``batch`` is the micro-batch per GPU (sequences)."""
    c = count(m)
    N = c.total / (tp * pp)  # parameters this GPU holds before ZeRO sharding
    shard = lambda stage: dp if zero >= stage and dp > 1 else 1  # noqa: E731
    notes: list[str] = []
    if precision == "fp32":
        b_p, b_g, master = 4.0, 4.0, 0.0
    elif precision == "bf16-mixed":
        b_p, b_g, master = 4.0, 4.0, 0.0
        notes.append("bf16-mixed: the fp32 parameters are the master weights; autocast keeps bf16 copies")
    else:
        b_p, b_g, master = 2.0, 2.0, 4.0
        notes.append("bf16: bf16 parameters and gradients, fp32 master weights in the optimizer (16 B/param with Adam)")
    params = N * b_p / shard(3)
    grads = N * b_g / shard(2)
    master_b = N * master / shard(1)
    ob = OPTIMIZER_BYTES[optimizer]
    opt_state = (adafactor_state_bytes(m) / (tp * pp) if ob is None else N * ob) / shard(1)
    if optimizer == "adam8bit":
        notes.append("adam8bit: 1-byte m and v (bitsandbytes); tensors under 4,096 elements stay 32-bit (ignored)")
    # autocast casts every linear weight to bf16 once per forward (experts run in fp32 under HF)
    if precision == "bf16-mixed":
        expert_params = sum(w.total for w in weights(m) if w.kind == "expert")
        cast_params = (c.matmul_total - expert_params + (m.vocab_size * m.d_model if m.tied_embeddings else 0))
        copies = 2.0 * cast_params / (tp * pp)
        if zero >= 3 and dp > 1:
            copies *= min(1.0, 2.0 / max(1, m.n_layers // pp))  # only gathered units (≈2 layers) are cast
    else:
        copies = 0.0
    # activations: a token is B·S on this GPU; PP's first stage holds min(pp, m) micro-batches
    T = batch * seq
    layers = m.n_layers / pp
    in_flight = min(pp, micro_batches) if pp > 1 else 1
    per_layer = sum(v for _, v in act.saved_per_token_per_layer(m, precision)) / tp
    outside = sum(v for _, v in act.saved_outside_layers_per_token(m, precision))
    a_full = T * (per_layer * layers * in_flight + outside)
    per_layer_ckpt = act.checkpointed_per_token_per_layer(m, precision)
    # checkpointing keeps layer inputs, and recomputes one layer at a time in backward
    a_ckpt = T * (per_layer_ckpt * layers * in_flight + outside) + T * per_layer
    activations = a_ckpt if grad_ckpt else a_full
    loss = T * act.loss_buffers_per_token(m) / tp
    # optimizer step temporaries: foreach Adam builds sqrt(v) for every parameter at once
    if optimizer in ("adamw", "adam"):
        temp = N * 4.0 / shard(1)
    elif optimizer == "adafactor":
        temp = 2 * max(w.size for w in weights(m)) * 4.0 / tp
    else:
        temp = 0.0
    fixed = params + opt_state + master_b + WORKSPACE
    if grad_ckpt:
        # forward end: autocast's cache holds every bf16 weight copy until autocast exits, and the loss
        # holds bf16 + fp32 logits + log-probs (10·V per token); backward start: 12·V per token; then one
        # layer at a time is recomputed (its saved set and weight copies) while gradients accumulate.
        inputs = T * (per_layer_ckpt * layers * in_flight + outside)
        fwd = fixed + copies + inputs + loss * 10 / 12
        bwd_start = fixed + inputs + loss
        recompute = T * per_layer + copies / max(layers, 1)
        head_grads = m.vocab_size * m.d_model * b_g / (tp * shard(2))
        bwd_last_layer = fixed + inputs + head_grads + recompute  # first layer recomputed, all inputs kept
        bwd_first_layer = fixed + inputs / max(layers, 1) + grads + recompute  # last one, gradients all there
        peak_fb = max(fwd, bwd_start, bwd_last_layer, bwd_first_layer)
    else:
        peak_fb = fixed + copies + a_full + loss
    peak_opt = params + grads + opt_state + master_b + temp + WORKSPACE
    peak = max(peak_fb, peak_opt)
    extra = overhead(peak, params + master_b, context_bytes)
    return TrainingMemory(
        params=params, grads=grads, optimizer=opt_state, master=master_b, autocast_copies=copies,
        activations=activations, activations_no_ckpt=a_full, activations_ckpt=a_ckpt, loss_buffers=loss,
        optimizer_temp=temp, workspace=WORKSPACE, peak_forward_backward=peak_fb, peak_optimizer=peak_opt,
        peak_allocated=peak, overhead=extra, total=peak + extra,
        peak_phase="forward/backward" if peak_fb >= peak_opt else "optimizer step", notes=tuple(notes))
