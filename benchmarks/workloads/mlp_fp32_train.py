"""A wide, deep MLP regressor trained in fp32: almost all of the step is large GEMMs.

1024 input features -> 6 hidden layers of 4096 (Linear + LayerNorm + GELU) -> 1 output, batch
4096, MSE loss, Adam. PyTorch's default fp32 matmul precision ("highest": no TF32) is left as is.

Anti-patterns it carries:
  * fp32 GEMMs at full precision on a GPU whose Tensor Cores do TF32 many times faster
                                                            -> fix: tf32
  * fp32 training where bf16 mixed precision would do       -> fix: bf16-autocast
  * LayerNorm + GELU + bias as separate element-wise kernels between the GEMMs -> fix: compile

    python benchmarks/workloads/mlp_fp32_train.py [--batch-size 4096] [--width 4096] [--depth 6] [--iters N] [--small]
"""

import argparse
import time

import torch
import torch.nn as nn


def make_mlp(inp, width, depth):
    layers, d = [], inp
    for _ in range(depth):
        layers += [nn.Linear(d, width), nn.LayerNorm(width), nn.GELU()]
        d = width
    layers.append(nn.Linear(d, 1))
    return nn.Sequential(*layers)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--batch-size", type=int, default=4096)
    p.add_argument("--features", type=int, default=1024)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()
    if args.small:
        args.batch_size, args.features, args.width, args.depth = 16, 32, 64, 2

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = make_mlp(args.features, args.width, args.depth).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    loss_fn = nn.MSELoss()

    # a fixed synthetic regression problem: y = sin(x @ w) summed
    w_true = torch.randn(args.features, 8, device=device) / args.features ** 0.5
    t0 = time.time()
    for it in range(args.iters):
        x = torch.randn(args.batch_size, args.features, device=device)
        y = torch.sin(x @ w_true).sum(dim=1, keepdim=True)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if it % args.log_every == 0:
            print(f"iter {it} loss {loss.item():.5f} ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
