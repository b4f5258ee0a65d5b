"""A small tabular MLP whose step is a few hundred microsecond-sized kernels and a lot of Python.

12 blocks of Linear(256) + BatchNorm1d + ReLU + Dropout on batches of 256 rows, with the step's
accuracy read back with ``.item()`` for a running metric, and AdamW built with ``foreach=False``
so the update matches the CPU reference implementation step for step. The GPU is idle most of
the time: the CPU cannot issue kernels fast enough.

Anti-patterns it carries:
  * launch-bound eager execution: ~1000 tiny kernels per step    -> fix: compile
    (default mode fuses kernels; replaying the step as CUDA graphs -> fix: compile-cudagraphs)
  * the per-parameter AdamW loop (foreach=False)                 -> fix: foreach-optimizer
  * not the fused AdamW                                          -> fix: fused-optimizer
  (The per-step ``.item()`` is a host sync; no fix id for it.)

    python benchmarks/workloads/tiny_launch_bound_train.py [--batch-size 256] [--iters N] [--small]
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class TabularNet(nn.Module):
    def __init__(self, features=48, width=256, depth=12, classes=4, dropout=0.1):
        super().__init__()
        layers, d = [], features
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.BatchNorm1d(width), nn.ReLU(), nn.Dropout(dropout)]
            d = width
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.body(x))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--log-every", type=int, default=200)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = (TabularNet(width=32, depth=2) if args.small else TabularNet()).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2, foreach=False)

    n = 65536 if not args.small else 64
    X = torch.randn(n, 48, device=device)
    Y = (X[:, :4].argmax(dim=1) + (X[:, 4] > 1).long()) % 4
    correct = seen = 0
    t0 = time.time()
    for it in range(args.iters):
        idx = torch.randint(0, n, (min(args.batch_size, n),), device=device)
        logits = model(X[idx])
        loss = F.cross_entropy(logits, Y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        correct += (logits.argmax(1) == Y[idx]).sum().item()
        seen += idx.numel()
        if it % args.log_every == 0:
            print(f"iter {it} loss {loss.item():.4f} running acc {correct / seen:.3f} ({time.time() - t0:.1f}s)",
                  flush=True)


if __name__ == "__main__":
    main()
