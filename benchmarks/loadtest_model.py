"""Build a random-weight Llama-architecture model and a tokenizer in a folder, without downloads, so that a
real inference server can be load-tested anywhere.

    python benchmarks/loadtest_model.py DIR                 # ~1.2B parameters, bf16 (Llama-3.2-1B's shape)
    python benchmarks/loadtest_model.py DIR --tiny          # 2 layers, 64 wide: CPU tests
    python benchmarks/loadtest_model.py DIR --small         # 8 layers, 512 wide: a CPU server to compare clients on

The tokenizer is word-level over the model's whole vocabulary ("w0" ... "wN"), so that every token a
random model emits decodes to visible text: a streamed chunk then always carries the token it stands for.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

SHAPES = {
    # Llama-3.2-1B's layer shape with a 32k vocabulary (the tokenizer below has to cover it)
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=32000, max_position_embeddings=16384, tie_word_embeddings=True),
    # a CPU server slow enough (milliseconds per token) that client overheads are small beside it
    "small": dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=8, num_attention_heads=8,
                  num_key_value_heads=4, vocab_size=4000, max_position_embeddings=4096, tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=2000, max_position_embeddings=4096, tie_word_embeddings=True),
}
# Role markers are ordinary vocabulary words: a random model that echoes the last prompt token then
# emits visible text, not the unknown token (which is special and would be skipped from the stream).
CHAT_TEMPLATE = "{% for m in messages %}w3 {{ m['content'] }} {% endfor %}{% if add_generation_prompt %}w4{% endif %}"


def tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    special = ["<unk>", "<s>", "</s>"]
    vocab = {t: i for i, t in enumerate(special)}
    for i in range(len(special), vocab_size):
        vocab[f"w{i}"] = i
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build(out: Path, shape: str, dtype: str = "bfloat16") -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**SHAPES[shape], bos_token_id=1, eos_token_id=2, torch_dtype=dtype)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(getattr(torch, dtype))
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer(cfg.vocab_size).save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    print(f"built {shape}: {n / 1e9:.3f} B parameters, {dtype}, in {out}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--dtype", default=None)
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    shape = "tiny" if a.tiny else "small" if a.small else "1b"
    build(Path(a.out), shape, a.dtype or ("bfloat16" if shape == "1b" else "float32"))
