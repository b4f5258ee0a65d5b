"""Two-GPU DistributedDataParallel training with gradient accumulation that all-reduces every micro-batch.

A GPT-2-small-sized model (12 layers, 768 wide, 50257 vocabulary; ~124M parameters) wrapped in
DDP, four micro-batches of 2 x 512 tokens accumulated per optimizer step. Each micro-batch's
``backward()`` runs inside DDP's normal path, so all ~500 MB of fp32 gradients are all-reduced
four times per step instead of once. fp32, AdamW. Launched with torchrun; the job's launch
script also exports ``NCCL_P2P_DISABLE=1`` (set by the validation manifest), a line copied from
an old cluster's troubleshooting page, which sends the GPU-to-GPU traffic through host memory.

Anti-patterns it carries:
  * gradient all-reduce on every micro-batch (no ``model.no_sync()`` for the first three)
                                                            -> fix: ddp-no-sync
  * NCCL tuned away from its defaults by a stale environment variable -> fix: nccl-defaults
  * fp32 training where bf16 mixed precision would do       -> fix: bf16-autocast

    torchrun --nproc-per-node 2 benchmarks/workloads/ddp_accum_train.py [--micro-batch 2] [--accum 4] [--iters N] [--small]
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.out(y)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, dim, layers, heads, ctx):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(ctx, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight
        nn.init.normal_(self.tok.weight, std=0.02)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.ln(self.blocks(x)))


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
    p.add_argument("--iters", type=int, default=100000, help="optimizer steps")
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--accum", type=int, default=4, help="micro-batches per optimizer step")
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()

    rank, world, device = setup()
    torch.manual_seed(0)
    if args.small:
        model = GPT(vocab=1000, dim=64, layers=2, heads=2, ctx=64)
        args.micro_batch, args.seq_len = 2, 32
    else:
        model = GPT(vocab=50257, dim=768, layers=12, heads=12, ctx=args.seq_len)
    model = model.to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=3e-4, weight_decay=0.1)
    vocab = model.head.out_features
    data_gen = torch.Generator(device=device).manual_seed(1000 + rank)

    t0 = time.time()
    for it in range(args.iters):
        for _ in range(args.accum):
            tokens = torch.randint(0, vocab, (args.micro_batch, args.seq_len + 1), device=device, generator=data_gen)
            logits = ddp(tokens[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1)) / args.accum
            loss.backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if rank == 0 and it % args.log_every == 0:
            print(f"step {it} loss {loss.item() * args.accum:.4f} ({time.time() - t0:.1f}s, {world} ranks)",
                  flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
