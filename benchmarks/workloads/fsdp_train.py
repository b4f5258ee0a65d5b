"""Two-GPU FSDP (fully_shard) training of a ~200M-parameter Llama-style decoder in fp32.

A hand-written decoder (12 layers, 1024 wide, RMSNorm, SwiGLU 2816, SDPA attention, 32000
vocabulary) with every block sharded by ``torch.distributed.fsdp.fully_shard`` and then the root,
no mixed-precision policy, so parameters are all-gathered and gradients reduce-scattered in
fp32. Batches of 2 x 1024 random tokens per rank, AdamW. Launched with torchrun; the job's
environment (set by the validation manifest) carries ``NCCL_P2P_DISABLE=1`` and
``NCCL_IB_DISABLE=1`` from a cluster template.

Anti-patterns it carries:
  * fp32 compute and fp32 collectives where bf16 would do     -> fix: bf16-autocast
  * NCCL pushed off its defaults by stale environment variables (no peer-to-peer)
                                                              -> fix: nccl-defaults
  * fp32 matmuls at full precision (TF32 off by default)      -> fix: tf32

    torchrun --nproc-per-node 2 benchmarks/workloads/fsdp_train.py [--batch-size 2] [--seq-len 1024] [--iters N] [--small]
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.wqkv(self.norm1(x)).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.wo(y)
        h = self.norm2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Decoder(nn.Module):
    def __init__(self, vocab, dim, layers, heads, hidden, ctx):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(ctx, dim)
        self.layers = nn.ModuleList([Block(dim, heads, hidden) for _ in range(layers)])
        self.norm = RMSNorm(dim)
        self.out = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for layer in self.layers:
            x = layer(x)
        return self.out(self.norm(x))


def setup():
    rank = int(os.environ.get("RANK", 0))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world)
    return rank, world, device


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()

    rank, world, device = setup()
    torch.manual_seed(0)
    if args.small:
        model = Decoder(vocab=1000, dim=64, layers=2, heads=2, hidden=128, ctx=64)
        args.batch_size, args.seq_len = 2, 32
    else:
        model = Decoder(vocab=32000, dim=1024, layers=12, heads=16, hidden=2816, ctx=args.seq_len)
    model = model.to(device)
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    vocab = model.out.out_features
    data_gen = torch.Generator(device=device).manual_seed(1000 + rank)

    t0 = time.time()
    for it in range(args.iters):
        tokens = torch.randint(0, vocab, (args.batch_size, args.seq_len + 1), device=device, generator=data_gen)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if rank == 0 and it % args.log_every == 0:
            print(f"step {it} loss {loss.item():.4f} ({time.time() - t0:.1f}s, {world} ranks)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
