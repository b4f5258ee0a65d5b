"""A transformer LM training loop that empties PyTorch's CUDA cache after every step "to avoid OOM".

An 8-layer, 768-wide GPT-style model (SDPA attention) on batches of 4 x 512 random tokens, fp32,
AdamW. After each optimizer step the loop deletes its tensors, runs ``gc.collect()`` and
``torch.cuda.empty_cache()``, a habit picked up from an out-of-memory thread. Every step then
has to get all of its activation memory back from the driver with cudaMalloc, and cudaFree it
again: both synchronize the device.

Anti-patterns it carries:
  * allocator churn: cudaMalloc/cudaFree of the whole working set every step -> fix: expandable-segments
  * fp32 training where bf16 mixed precision would do (and half the bytes to re-allocate)
                                                            -> fix: bf16-autocast
  (The real fix is to delete the empty_cache() call; no fix id can do that for the script.)

    python benchmarks/workloads/empty_cache_loop_train.py [--batch-size 4] [--seq-len 512] [--iters N] [--small]
"""

import argparse
import gc
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.out(y)
        return x + self.mlp(self.ln2(x))


class LM(nn.Module):
    def __init__(self, vocab, dim, layers, heads, ctx):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(ctx, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.ln(self.blocks(x)))


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
        model = LM(vocab=1000, dim=64, layers=2, heads=2, ctx=64)
        args.batch_size, args.seq_len = 2, 32
    else:
        model = LM(vocab=32000, dim=768, layers=8, heads=12, ctx=args.seq_len)
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    vocab = model.head.out_features

    t0 = time.time()
    for it in range(args.iters):
        tokens = torch.randint(0, vocab, (args.batch_size, args.seq_len + 1), device=device)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_value = loss.item()
        del tokens, logits, loss
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        if it % args.log_every == 0:
            print(f"iter {it} loss {loss_value:.4f} ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
