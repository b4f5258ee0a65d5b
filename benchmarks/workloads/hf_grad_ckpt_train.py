"""Fine-tuning a ~300M Qwen2-style decoder with ``model.gradient_checkpointing_enable()`` left on.

A ``Qwen2ForCausalLM`` built from a config in code (20 layers, 1024 wide, GQA 16/4, 32000
vocabulary, random init), trained on random token ids at batch 4 x 512 in fp32 with AdamW. The
training script turns on gradient checkpointing, as fine-tuning recipes for much larger models
do, although this model's activations fit easily.

Anti-patterns it carries:
  * gradient checkpointing on while memory is plentiful: every layer's forward runs twice
                                                            -> fix: no-checkpointing
  * fp32 training where bf16 mixed precision would do       -> fix: bf16-autocast
  * AdamW's step as foreach kernels rather than a fused one  -> fix: fused-optimizer

    python benchmarks/workloads/hf_grad_ckpt_train.py [--batch-size 4] [--seq-len 512] [--iters N] [--small]
"""

import argparse
import time

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.small:
        config = Qwen2Config(vocab_size=1000, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
        args.batch_size, args.seq_len = 2, 32
    else:
        config = Qwen2Config(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=20,
                             num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=4096,
                             tie_word_embeddings=False)
    model = Qwen2ForCausalLM(config).to(device)
    model.gradient_checkpointing_enable()
    model.config.use_cache = False
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.0)

    t0 = time.time()
    for it in range(args.iters):
        ids = torch.randint(0, config.vocab_size, (args.batch_size, args.seq_len), device=device)
        loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if it % args.log_every == 0:
            print(f"iter {it} loss {loss.item():.4f} ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
