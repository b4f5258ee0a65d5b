"""A deep residual MLP with hundreds of small parameter tensors and Adam built with foreach=False.

48 residual blocks (LayerNorm 384 -> Linear 384x1536 -> GELU -> Linear 1536x384), about 290
parameter tensors of 0.4-2.4 MB each, batch 1024. The optimizer is
``torch.optim.Adam(..., foreach=False)``, copied from a recipe that wanted bitwise-stable
updates, so every step launches a dozen small kernels per parameter tensor.

Anti-patterns it carries:
  * the per-parameter ("for-loop") Adam implementation: thousands of tiny kernel launches per
    step                                                   -> fix: foreach-optimizer
  * not the fused Adam (one kernel for all the tensors)    -> fix: fused-optimizer

    python benchmarks/workloads/adam_many_params_train.py [--blocks 48] [--width 384] [--batch-size 1024] [--iters N] [--small]
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--blocks", type=int, default=48)
    p.add_argument("--width", type=int, default=384)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()
    if args.small:
        args.blocks, args.width, args.batch_size = 4, 16, 8

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Sequential(nn.Linear(64, args.width), *[Block(args.width) for _ in range(args.blocks)],
                          nn.LayerNorm(args.width), nn.Linear(args.width, 10)).to(device)
    n_tensors = sum(1 for _ in model.parameters())
    print(f"{n_tensors} parameter tensors, {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters",
          flush=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-5, foreach=False)

    x = torch.randn(args.batch_size, 64, device=device)
    y = torch.randint(0, 10, (args.batch_size,), device=device)
    t0 = time.time()
    for it in range(args.iters):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if it % args.log_every == 0:
            print(f"iter {it} loss {loss.item():.4f} ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
