"""Streaming inference over a rolling window: each new frame attends to the last M frames' keys and values.

A batch of 64 sensor streams sends one frame per step. A small MLP encodes each new frame (with a
learned embedding of its time step), projects it to a key and a value, and the frame's query attends
over the keys and values of the last 4096 frames of its stream (single-query attention, one head of
512, fp32, random weights) before a small head reads the result. The window is kept as two tensors
(batch, M, 512) rolled forward with ``torch.cat([window[:, 1:], new], dim=1)`` every step, as in many
streaming and memory-bank scripts. Runs under ``torch.inference_mode()``. One perfstack step per frame.

``--reader decay`` reads the window in order instead: a learned weight per age (newest to oldest) pools the
last M values, as temporal pooling and decayed memories do, so the order of the frames matters.

Anti-pattern it carries:
  * the rolling window is re-allocated and copied whole at every step (1 GiB of reads and writes per
    frame here, more than the attention itself reads) -> fix (``--fixed``): for attention, a ring buffer
    written in place at ``step % M`` (attention over a set of keys does not depend on their order, and
    the time embedding carries position, so the outputs are the same); for the ordered reader, a mirrored
    ring buffer of 2M written at ``step % M`` and ``step % M + M``, whose slice ``[p + 1, p + M]`` is the
    window in order, a view (two small writes per frame, no copy)

    python benchmarks/workloads/stream_window.py [--steps 3000] [--streams 64] [--window 4096] [--dim 512]
        [--reader attention|decay] [--small] [--fixed]   (the fixed variant, for timing it by hand)
"""

import argparse
import math
import time

import torch
import torch.nn as nn

try:
    import perfstack
    step = perfstack.step
except (ImportError, AttributeError):  # outside perfstack a step marker does nothing
    def step():
        pass


class FrameAttention(nn.Module):
    def __init__(self, d_in=64, dim=512, horizon=1 << 16):
        super().__init__()
        self.encode = nn.Sequential(nn.Linear(d_in, dim), nn.GELU(), nn.Linear(dim, dim))
        self.when = nn.Embedding(horizon, dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 8))
        self.horizon = horizon

    def new_frame(self, x, t):
        h = self.encode(x) + self.when.weight[t % self.horizon]
        return self.qkv(h).chunk(3, dim=-1)

    def read(self, q, keys, values):
        w = torch.softmax(torch.bmm(keys, q[:, :, None]) / math.sqrt(q.shape[-1]), dim=1)
        return self.head(torch.bmm(w.transpose(1, 2), values)[:, 0] + q)

    def read_in_order(self, q, values, by_age):
        """Pool the window oldest to newest with one weight per age: the order matters."""
        return self.head(torch.matmul(by_age, values) + q)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100000, help="frames per stream")
    p.add_argument("--streams", type=int, default=64)
    p.add_argument("--window", type=int, default=4096)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--reader", choices=("attention", "decay"), default="attention",
                   help="attention over the window (order-free) or a pooling weighted by age (ordered)")
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    p.add_argument("--fixed", action="store_true", help="the fixed variant: a ring buffer written in place")
    args = p.parse_args()
    if args.small:
        args.streams, args.window, args.dim = 4, 64, 32

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = FrameAttention(dim=args.dim).to(device).eval()
    b, m, d = args.streams, args.window, args.dim
    ordered = args.reader == "decay"
    keys = torch.zeros(b, m, d, device=device)
    values = torch.zeros(b, 2 * m if ordered and args.fixed else m, d, device=device)
    by_age = torch.softmax(torch.linspace(-4.0, 0.0, m, device=device), dim=0)  # oldest first
    out = None
    t0 = time.time()
    with torch.inference_mode():
        for t in range(args.steps):
            x = torch.randn(b, 64, device=device)
            q, k, v = model.new_frame(x, t)
            if ordered:
                if args.fixed:  # mirrored: the window in order is a view, [p + 1, p + m]
                    p = t % m
                    values[:, p] = v
                    values[:, p + m] = v
                    window = values[:, p + 1:p + 1 + m]
                else:
                    window = values = torch.cat([values[:, 1:], v[:, None]], dim=1)
                out = model.read_in_order(q, window, by_age)
            else:
                if args.fixed:
                    keys[:, t % m] = k
                    values[:, t % m] = v
                else:
                    keys = torch.cat([keys[:, 1:], k[:, None]], dim=1)
                    values = torch.cat([values[:, 1:], v[:, None]], dim=1)
                out = model.read(q, keys, values)
            step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    print(f"{args.steps} frames of {b} streams in {time.time() - t0:.2f} s "
          f"({args.reader}, {'ring buffer' if args.fixed else 'torch.cat'}; last output norm {out.norm().item():.4f})", flush=True)


if __name__ == "__main__":
    main()
