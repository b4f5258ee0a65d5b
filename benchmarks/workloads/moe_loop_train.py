"""A mixture-of-experts transformer with a hand-written top-2 router looping over experts in Python.

Six pre-norm transformer blocks (768 wide, SDPA attention) whose feed-forward layer is an MoE of
8 SwiGLU experts: a linear router, softmax, top-2, then for each expert the tokens routed to it
are gathered with ``torch.where``, run through that expert and scattered back with
``index_add_``, plus the Switch-style load-balancing loss. Trained in fp32 with AdamW.

Anti-patterns it carries:
  * fp32 training where bf16 mixed precision would do       -> fix: bf16-autocast
  * the per-expert Python loop: data-dependent shapes, a host sync per expert (``torch.where``
    on a mask), many small GEMMs and gathers                -> fix: compile
  * AdamW over ~150 tensors as foreach kernels rather than one fused kernel -> fix: fused-optimizer

    python benchmarks/workloads/moe_loop_train.py [--batch-size 8] [--seq-len 512] [--experts 8] [--iters N] [--small]
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Expert(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MoE(nn.Module):
    def __init__(self, dim, hidden, num_experts, top_k=2):
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(dim, num_experts, bias=False)
        self.experts = nn.ModuleList([Expert(dim, hidden) for _ in range(num_experts)])

    def forward(self, x):
        B, T, C = x.shape
        x = x.reshape(-1, C)
        probs = F.softmax(self.router(x), dim=-1)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            token_idx, slot = torch.where(chosen == e)
            if token_idx.numel() == 0:
                continue
            y = expert(x[token_idx]) * weights[token_idx, slot, None]
            out.index_add_(0, token_idx, y)
        # load-balancing loss (Switch Transformer): fraction routed x mean router probability
        frac = F.one_hot(chosen[:, 0], probs.shape[-1]).float().mean(0)
        aux = (frac * probs.mean(0)).sum() * probs.shape[-1]
        return out.reshape(B, T, C), aux


class Block(nn.Module):
    def __init__(self, dim, heads, hidden, num_experts):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.moe = MoE(dim, hidden, num_experts)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        m, aux = self.moe(self.norm2(x))
        return x + m, aux


class MoEModel(nn.Module):
    def __init__(self, vocab, dim, layers, heads, hidden, num_experts, ctx):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(ctx, dim)
        self.blocks = nn.ModuleList([Block(dim, heads, hidden, num_experts) for _ in range(layers)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        x = self.embed(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        aux_total = 0.0
        for blk in self.blocks:
            x, aux = blk(x)
            aux_total = aux_total + aux
        return self.head(self.norm(x)), aux_total


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--aux-weight", type=float, default=0.01)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.small:
        model = MoEModel(vocab=1000, dim=64, layers=2, heads=2, hidden=128, num_experts=4, ctx=64)
        args.batch_size, args.seq_len = 2, 32
    else:
        model = MoEModel(vocab=32000, dim=768, layers=6, heads=12, hidden=2048, num_experts=args.experts,
                         ctx=args.seq_len)
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    vocab = model.head.out_features

    t0 = time.time()
    for it in range(args.iters):
        tokens = torch.randint(0, vocab, (args.batch_size, args.seq_len + 1), device=device)
        logits, aux = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1)) + args.aux_weight * aux
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if it % args.log_every == 0:
            print(f"iter {it} loss {loss.item():.4f} ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
