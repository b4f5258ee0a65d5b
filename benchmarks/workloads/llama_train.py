"""A ~250M-parameter Llama-style decoder trained from scratch (transformers LlamaForCausalLM, random init).

The config is written in code (16 layers, 1024 wide, grouped-query attention 16/4, SwiGLU 2816,
32000 vocabulary, RoPE); the model is trained in fp32 on random token ids with AdamW.

Anti-patterns it carries:
  * fp32 training where bf16 mixed precision would do          -> fix: bf16-autocast
  * eager mode: RMSNorm, RoPE and SwiGLU are chains of small element-wise kernels -> fix: compile
  * fp32 matmuls at full precision (TF32 off by default)       -> fix: tf32

    python benchmarks/workloads/llama_train.py [--batch-size 2] [--seq-len 1024] [--iters N] [--small]
"""

import argparse
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.small:
        config = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
        args.batch_size, args.seq_len = 2, 32
    else:
        config = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=16,
                             num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=4096,
                             rope_theta=10000.0, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).to(device)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{n_params / 1e6:.0f}M parameters", flush=True)

    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)

    t0 = time.time()
    for it in range(args.iters):
        input_ids = torch.randint(0, config.vocab_size, (args.batch_size, args.seq_len), device=device)
        out = model(input_ids=input_ids, labels=input_ids)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        if it % args.log_every == 0:
            print(f"iter {it} loss {out.loss.item():.4f} ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
