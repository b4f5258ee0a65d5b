"""A small Mixtral-style MoE decoder trained from scratch (transformers MixtralForCausalLM, random init).

Config built in code: 8 layers, 768 wide, 8 experts with top-2 routing, SwiGLU experts of 1536,
GQA 12/4, 32000 vocabulary. transformers' eager MoE path loops over the experts that received
tokens, gathering and scattering them one expert at a time. fp32, AdamW, router aux loss on.

Anti-patterns it carries:
  * fp32 training where bf16 mixed precision would do       -> fix: bf16-autocast
  * AdamW's step as foreach kernels over the expert tensors rather than fused -> fix: fused-optimizer
  * fp32 matmuls at full precision (TF32 off by default)    -> fix: tf32

    python benchmarks/workloads/mixtral_train.py [--batch-size 8] [--seq-len 512] [--iters N] [--small]
"""

import argparse
import time

import torch
from transformers import MixtralConfig, MixtralForCausalLM


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.small:
        config = MixtralConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                               num_experts_per_tok=2, max_position_embeddings=128, output_router_logits=True)
        args.batch_size, args.seq_len = 2, 32
    else:
        config = MixtralConfig(vocab_size=32000, hidden_size=768, intermediate_size=1536, num_hidden_layers=8,
                               num_attention_heads=12, num_key_value_heads=4, num_local_experts=8,
                               num_experts_per_tok=2, max_position_embeddings=4096, sliding_window=None,
                               output_router_logits=True, router_aux_loss_coef=0.02)
    model = MixtralForCausalLM(config).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)

    t0 = time.time()
    for it in range(args.iters):
        ids = torch.randint(0, config.vocab_size, (args.batch_size, args.seq_len), device=device)
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        if it % args.log_every == 0:
            print(f"iter {it} loss {out.loss.item():.4f} aux {out.aux_loss.item():.4f} "
                  f"({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
