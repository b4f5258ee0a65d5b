"""Built-in configs of well-known architectures, as the fields of their Hugging Face ``config.json``.

Each entry carries only the fields the estimates read, copied from the model's published config
(the source is in the comment beside it) so that ``perfstack estimate infer --model llama-3-8b``
works offline. They go through the same parser as a user's config.json.
"""

from __future__ import annotations

import difflib
from typing import Any

from perfstack.errors import UsageError
from perfstack.estimate.config import ModelSpec, parse_config

_LLAMA3_8B = dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=False,
                  hidden_act="silu")

CATALOG: dict[str, dict[str, Any]] = {
    # huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json (8.03 B parameters)
    "llama-3-8b": dict(_LLAMA3_8B, max_position_embeddings=8192),
    # huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json (same shape, 128K context)
    "llama-3.1-8b": dict(_LLAMA3_8B, max_position_embeddings=131072),
    # huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json (70.6 B)
    "llama-3-70b": dict(model_type="llama", hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                        num_attention_heads=64, num_key_value_heads=8, vocab_size=128256,
                        max_position_embeddings=8192, tie_word_embeddings=False),
    # huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json
    "llama-3.1-70b": dict(model_type="llama", hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                          num_attention_heads=64, num_key_value_heads=8, vocab_size=128256,
                          max_position_embeddings=131072, tie_word_embeddings=False),
    # huggingface.co/meta-llama/Llama-3.1-405B/blob/main/config.json (405 B; the FP8 repo's config
    # says 16 KV heads, duplicated for TP=16 -- the architecture has 8)
    "llama-3.1-405b": dict(model_type="llama", hidden_size=16384, intermediate_size=53248, num_hidden_layers=126,
                           num_attention_heads=128, num_key_value_heads=8, vocab_size=128256,
                           max_position_embeddings=131072, tie_word_embeddings=False),
    # huggingface.co/meta-llama/Llama-3.2-1B/blob/main/config.json (1.24 B, tied embeddings)
    "llama-3.2-1b": dict(model_type="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                         max_position_embeddings=131072, tie_word_embeddings=True),
    # huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json (6.74 B, MHA)
    "llama-2-7b": dict(model_type="llama", hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                       max_position_embeddings=4096, tie_word_embeddings=False),
    # huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json (7.24 B, sliding window 4096)
    "mistral-7b": dict(model_type="mistral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
                       max_position_embeddings=32768, sliding_window=4096, tie_word_embeddings=False),
    # huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json (46.7 B total, 12.9 B active)
    "mixtral-8x7b": dict(model_type="mixtral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
                         max_position_embeddings=32768, num_local_experts=8, num_experts_per_tok=2,
                         sliding_window=None, tie_word_embeddings=False),
    # huggingface.co/mistralai/Mixtral-8x22B-v0.1/blob/main/config.json (141 B total, 39 B active)
    "mixtral-8x22b": dict(model_type="mixtral", hidden_size=6144, intermediate_size=16384, num_hidden_layers=56,
                          num_attention_heads=48, num_key_value_heads=8, vocab_size=32768,
                          max_position_embeddings=65536, num_local_experts=8, num_experts_per_tok=2,
                          tie_word_embeddings=False),
    # huggingface.co/Qwen/Qwen2.5-0.5B/blob/main/config.json (0.49 B, tied embeddings)
    "qwen2.5-0.5b": dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                         max_position_embeddings=32768, sliding_window=32768, use_sliding_window=False,
                         max_window_layers=21, tie_word_embeddings=True),
    # huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json (7.62 B)
    "qwen2.5-7b": dict(model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                       max_position_embeddings=131072, sliding_window=131072, use_sliding_window=False,
                       max_window_layers=28, tie_word_embeddings=False),
    # huggingface.co/Qwen/Qwen2.5-72B/blob/main/config.json (72.7 B)
    "qwen2.5-72b": dict(model_type="qwen2", hidden_size=8192, intermediate_size=29568, num_hidden_layers=80,
                        num_attention_heads=64, num_key_value_heads=8, vocab_size=152064,
                        max_position_embeddings=131072, sliding_window=131072, use_sliding_window=False,
                        max_window_layers=80, tie_word_embeddings=False),
    # huggingface.co/Qwen/Qwen1.5-MoE-A2.7B/blob/main/config.json (14.3 B total, 2.7 B active)
    "qwen1.5-moe-a2.7b": dict(model_type="qwen2_moe", hidden_size=2048, intermediate_size=5632,
                              moe_intermediate_size=1408, shared_expert_intermediate_size=5632, num_experts=60,
                              num_experts_per_tok=4, decoder_sparse_step=1, num_hidden_layers=24,
                              num_attention_heads=16, num_key_value_heads=16, vocab_size=151936,
                              max_position_embeddings=8192, tie_word_embeddings=False),
    # huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (671 B total, 37 B active; the one
    # multi-token-prediction layer, num_nextn_predict_layers=1, is not part of the 671 B and is not counted)
    "deepseek-v3": dict(model_type="deepseek_v3", hidden_size=7168, intermediate_size=18432,
                        moe_intermediate_size=2048, num_hidden_layers=61, num_attention_heads=128,
                        num_key_value_heads=128, n_shared_experts=1, n_routed_experts=256, num_experts_per_tok=8,
                        first_k_dense_replace=3, moe_layer_freq=1, q_lora_rank=1536, kv_lora_rank=512,
                        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, vocab_size=129280,
                        max_position_embeddings=163840, tie_word_embeddings=False),
    # huggingface.co/deepseek-ai/DeepSeek-V2/blob/main/config.json (236 B total, 21 B active)
    "deepseek-v2": dict(model_type="deepseek_v2", hidden_size=5120, intermediate_size=12288,
                        moe_intermediate_size=1536, num_hidden_layers=60, num_attention_heads=128,
                        num_key_value_heads=128, n_shared_experts=2, n_routed_experts=160, num_experts_per_tok=6,
                        first_k_dense_replace=1, moe_layer_freq=1, q_lora_rank=1536, kv_lora_rank=512,
                        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, vocab_size=102400,
                        max_position_embeddings=163840, tie_word_embeddings=False),
    # huggingface.co/google/gemma-2-9b/blob/main/config.json (9.24 B; local/global layers, window 4096)
    "gemma-2-9b": dict(model_type="gemma2", hidden_size=3584, intermediate_size=14336, num_hidden_layers=42,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=256, vocab_size=256000,
                       max_position_embeddings=8192, sliding_window=4096, hidden_activation="gelu_pytorch_tanh",
                       tie_word_embeddings=True),
    # huggingface.co/tiiuae/falcon-7b/blob/main/config.json (7.2 B, multi-query attention)
    "falcon-7b": dict(model_type="falcon", hidden_size=4544, num_hidden_layers=32, num_attention_heads=71,
                      vocab_size=65024, multi_query=True, parallel_attn=True, bias=False,
                      new_decoder_architecture=False, max_position_embeddings=2048),
    # huggingface.co/EleutherAI/gpt-neox-20b/blob/main/config.json (20.6 B)
    "gpt-neox-20b": dict(model_type="gpt_neox", hidden_size=6144, intermediate_size=24576, num_hidden_layers=44,
                         num_attention_heads=64, vocab_size=50432, max_position_embeddings=2048,
                         tie_word_embeddings=False),
    # huggingface.co/openai-community/gpt2/blob/main/config.json (124 M, tied, learned positions)
    "gpt2": dict(model_type="gpt2", n_embd=768, n_layer=12, n_head=12, vocab_size=50257, n_positions=1024),
    # huggingface.co/openai-community/gpt2-medium/blob/main/config.json (355 M)
    "gpt2-medium": dict(model_type="gpt2", n_embd=1024, n_layer=24, n_head=16, vocab_size=50257, n_positions=1024),
    # huggingface.co/openai-community/gpt2-xl/blob/main/config.json (1.56 B)
    "gpt2-xl": dict(model_type="gpt2", n_embd=1600, n_layer=48, n_head=25, vocab_size=50257, n_positions=1024),
}


def names() -> list[str]:
    return sorted(CATALOG)


def get(name: str) -> ModelSpec:
    key = name.strip().lower()
    if key not in CATALOG:
        near = difflib.get_close_matches(key, names(), n=4, cutoff=0.4)
        hint = f"did you mean {', '.join(near)}?" if near else f"built-in models: {', '.join(names())}"
        raise UsageError(f"model {name!r} is neither a config.json path nor a built-in model", hint=hint)
    return parse_config(CATALOG[key], name=key, where=f"catalog:{key}")
