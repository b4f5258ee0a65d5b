"""A DLRM-style click-through-rate model: big embedding tables, small MLPs, Adam on everything.

13 dense features through a bottom MLP (512-256-64), 26 categorical features looked up in
embedding tables of 200k rows x 64 (dense gradients), pairwise dot-product interaction, top MLP
(512-256-1), binary cross-entropy on synthetic clicks, batch 8192. ``torch.optim.Adam`` over all
~330M parameters, built with the defaults.

Anti-patterns it carries:
  * Adam over 1.3 GB of embedding weights as foreach kernels: several passes over params, grads
    and both moments each step, where one fused kernel makes one pass -> fix: fused-optimizer
  * eager element-wise work around the interaction and MLPs   -> fix: compile
  * fp32 GEMMs at full precision (TF32 off by default)        -> fix: tf32

    python benchmarks/workloads/dlrm_train.py [--batch-size 8192] [--rows 200000] [--iters N] [--small]
"""

import argparse
import time

import torch
import torch.nn as nn


def mlp(sizes, last_act=True):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_act:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self, dense_features=13, tables=26, rows=200000, dim=64):
        super().__init__()
        self.bottom = mlp([dense_features, 512, 256, dim])
        self.embeddings = nn.ModuleList([nn.Embedding(rows, dim) for _ in range(tables)])
        n = tables + 1
        self.top = mlp([dim + n * (n - 1) // 2, 512, 256, 1], last_act=False)
        self.register_buffer("tri", torch.triu_indices(n, n, offset=1), persistent=False)

    def forward(self, dense, sparse):
        x = self.bottom(dense)
        embs = [emb(sparse[:, i]) for i, emb in enumerate(self.embeddings)]
        feats = torch.stack([x] + embs, dim=1)  # (B, 27, dim)
        inter = torch.bmm(feats, feats.transpose(1, 2))[:, self.tri[0], self.tri[1]]
        return self.top(torch.cat([x, inter], dim=1)).squeeze(1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--batch-size", type=int, default=8192)
    p.add_argument("--rows", type=int, default=200000)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()
    if args.small:
        args.batch_size, args.rows = 32, 100

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = DLRM(rows=args.rows).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.BCEWithLogitsLoss()

    # power-law ids, as real categorical features have
    zipf = torch.distributions.Pareto(torch.tensor(1.0, device=device), torch.tensor(1.2, device=device))
    t0 = time.time()
    for it in range(args.iters):
        dense = torch.randn(args.batch_size, 13, device=device).abs().log1p()
        sparse = (zipf.sample((args.batch_size, 26)).long() - 1).clamp_(max=args.rows - 1)
        clicks = (torch.rand(args.batch_size, device=device) < 0.25).float()
        loss = loss_fn(model(dense, sparse), clicks)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if it % args.log_every == 0:
            print(f"iter {it} loss {loss.item():.4f} ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
