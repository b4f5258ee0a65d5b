"""Transformer LM training with token-budget batches of varying length under a per-process memory cap.

Batches are sized by a token budget, fairseq style: each step draws a sequence length between
128 and 2048 and takes as many sequences as fit 8192 tokens, so every step allocates tensors of
new shapes. The job shares its GPU with an evaluation process, so it caps itself with
``torch.cuda.set_per_process_memory_fraction`` at 11 GiB. An 8-layer, 768-wide model in fp32
with AdamW; a batch that runs out of memory is skipped, as fairseq does.

Anti-patterns it carries:
  * the caching allocator fragments across changing shapes and, at the cap, frees its cache and
    retries (cudaFree/cudaMalloc, device syncs) inside the step -> fix: expandable-segments
    How long that lasts depends on the cap: on an H200 at 11 GiB the retries stopped after about
    100 steps (9 in all, no batch skipped), while at 10 GiB a quarter of the batches ran out of
    memory. In the steady state this is mostly a check that a gain is not claimed where the
    allocator has already settled; ``--mem-cap-gb 10`` makes it thrash.
  * fp32 training where bf16 mixed precision would do (and half the memory)
                                                            -> fix: bf16-autocast

    python benchmarks/workloads/varlen_churn_train.py [--tokens 8192] [--mem-cap-gb 11] [--iters N] [--small]
"""

import argparse
import random
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
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.out(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class LM(nn.Module):
    def __init__(self, vocab, dim, layers, heads, ctx):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(ctx, dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--tokens", type=int, default=8192, help="tokens per batch")
    p.add_argument("--min-len", type=int, default=128)
    p.add_argument("--max-len", type=int, default=2048)
    p.add_argument("--mem-cap-gb", type=float, default=11.0)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()

    torch.manual_seed(0)
    rng = random.Random(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.mem_cap_gb * 2**30 / total))
    if args.small:
        model = LM(vocab=1000, dim=64, layers=2, heads=2, ctx=64)
        args.tokens, args.min_len, args.max_len = 128, 8, 64
    else:
        model = LM(vocab=32000, dim=768, layers=8, heads=12, ctx=args.max_len)
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    vocab = model.head.out_features

    skipped = 0
    t0 = time.time()
    for it in range(args.iters):
        seq = rng.randrange(args.min_len, args.max_len + 1, 8)
        batch = max(1, args.tokens // seq)
        tokens = torch.randint(0, vocab, (batch, seq + 1), device=device)
        try:
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
            loss.backward()
        except torch.cuda.OutOfMemoryError:
            skipped += 1
            print(f"iter {it}: out of memory at {batch}x{seq}, skipping batch", flush=True)
            logits = loss = None
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            continue
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if it % args.log_every == 0:
            extra = ""
            if device.type == "cuda":
                stats = torch.cuda.memory_stats(device)
                extra = (f" reserved {stats['reserved_bytes.all.current'] / 2**30:.1f} GiB,"
                         f" alloc retries {stats['num_alloc_retries']}, cudaMalloc {stats.get('num_device_alloc', 0)}")
            print(f"iter {it} {batch}x{seq} loss {loss.item():.4f}{extra}, skipped {skipped} "
                  f"({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
