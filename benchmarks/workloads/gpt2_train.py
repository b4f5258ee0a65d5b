"""GPT-2 (124M) causal language-model training from scratch (Hugging Face transformers, random init).

``GPT2LMHeadModel`` built from a ``GPT2Config`` in code (GPT-2 small: 12 layers, 768 wide,
50257-token vocabulary, 1024 context), trained on random token ids with AdamW, gradient clipping
and a cosine schedule, all in fp32.

Anti-patterns it carries:
  * fp32 training where bf16 mixed precision would do (the 50257-wide fp32 logits and their loss
    are a large share of the step)                          -> fix: bf16-autocast
  * fp32 matmuls at full precision (TF32 off by default)    -> fix: tf32
  * AdamW step as foreach kernels rather than a fused one    -> fix: fused-optimizer
  * eager mode: GELU, layer norms, residual adds and the loss are unfused element-wise kernels,
    each reading and writing the activations again         -> fix: compile

    python benchmarks/workloads/gpt2_train.py [--batch-size 4] [--seq-len 1024] [--iters N] [--small]
"""

import argparse
import math
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.small:
        config = GPT2Config(vocab_size=1000, n_positions=64, n_embd=64, n_layer=2, n_head=2)
        args.batch_size, args.seq_len = 2, 32
    else:
        config = GPT2Config(n_positions=args.seq_len)
    model = GPT2LMHeadModel(config).to(device)
    model.train()

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
    warmup = 200

    def lr_at(step):
        if step < warmup:
            return (step + 1) / warmup
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, args.iters - warmup))))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)

    t0 = time.time()
    for it in range(args.iters):
        tokens = torch.randint(0, config.vocab_size, (args.batch_size, args.seq_len), device=device)
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if it % args.log_every == 0:
            print(f"iter {it} loss {loss.item():.4f} ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
