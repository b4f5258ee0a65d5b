"""A GPT-style transformer trained with activation checkpointing on every block, memory to spare.

12 pre-norm blocks, 1024 wide, 16 heads (SDPA), sequence 1024, batch 4: about 150M parameters
whose activations fit an 80 GB GPU many times over. Every block is still wrapped in
``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``, as in the template it was copied
from, so the forward pass of each block runs twice. fp32, AdamW.

Anti-patterns it carries:
  * activation checkpointing while memory is plentiful: ~a third more compute for nothing
                                                            -> fix: no-checkpointing
  * fp32 training where bf16 mixed precision would do       -> fix: bf16-autocast
  * fp32 matmuls at full precision (TF32 off by default)    -> fix: tf32

    python benchmarks/workloads/ckpt_transformer_train.py [--batch-size 4] [--seq-len 1024] [--iters N] [--small]
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.Linear(dim, 3 * dim)
        self.attn_out = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.attn(self.ln1(x)).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_out(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, dim, layers, heads, ctx, use_checkpoint=True):
        super().__init__()
        self.use_checkpoint = use_checkpoint
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(ctx, dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            if self.use_checkpoint and self.training:
                x = checkpoint(blk, x, use_reentrant=False)
            else:
                x = blk(x)
        return self.head(self.ln_f(x))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.small:
        model = GPT(vocab=1000, dim=64, layers=2, heads=2, ctx=64)
        args.batch_size, args.seq_len = 2, 32
    else:
        model = GPT(vocab=32000, dim=1024, layers=12, heads=16, ctx=args.seq_len)
    model = model.to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    vocab = model.head.out_features

    t0 = time.time()
    for it in range(args.iters):
        tokens = torch.randint(0, vocab, (args.batch_size, args.seq_len + 1), device=device)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.view(-1, vocab), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if it % args.log_every == 0:
            mem = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else 0.0
            print(f"iter {it} loss {loss.item():.4f} peak {mem:.1f} GiB ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
