"""Contrastive training with a queue of negative keys (MoCo style), the queue rolled with torch.cat per step.

A query encoder (an MLP of 4 layers, 2048 wide, over 1024 input features, projecting to 256, fp32,
random weights) is trained against a momentum-averaged copy of itself, the key encoder. Each step
draws a batch of 512 inputs on the GPU and two noisy views of it; the loss is InfoNCE over the
positive key and the 131,072 negatives of the queue (``q @ queue.T``, temperature 0.07). After the
AdamW step the key encoder moves towards the query encoder (momentum 0.999) and the queue takes the
batch's keys in place of its oldest, written as many re-implementations do:
``queue = torch.cat([queue[batch:], k])``. One perfstack step per training iteration.

Anti-pattern it carries:
  * the queue (128 MiB) is re-allocated and copied whole at every step to move 512 keys in -> fix
    (``--fixed``): a ring buffer written in place at a pointer that advances by the batch (the
    negatives are a set: their order does not change the loss)

``--compile-loss`` compiles the loss (the logits against the queue, the temperature, the cross-entropy) with
``torch.compile``, for timing by hand what fusing its element-wise work recovers: compiling the model
alone leaves the loss eager.

    python benchmarks/workloads/moco_queue_train.py [--steps 400] [--batch-size 512] [--queue 131072]
        [--small] [--fixed] [--compile-loss]   (the variants, for timing them by hand)
"""

import argparse
import copy
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    import perfstack
    step = perfstack.step
except (ImportError, AttributeError):  # outside perfstack a step marker does nothing
    def step():
        pass


def encoder(d_in=1024, width=2048, d_out=256):
    return nn.Sequential(nn.Linear(d_in, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, width), nn.ReLU(), nn.Linear(width, d_out))


def info_nce(q, k, queue, temperature=0.07):
    positive = (q * k).sum(dim=1, keepdim=True)
    negative = q @ queue.T
    logits = torch.cat([positive, negative], dim=1) / temperature
    return F.cross_entropy(logits, torch.zeros(q.shape[0], dtype=torch.long, device=q.device))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=400, help="training iterations")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--queue", type=int, default=131072, help="negative keys kept")
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    p.add_argument("--fixed", action="store_true", help="the fixed variant: a ring buffer written in place")
    p.add_argument("--compile-loss", action="store_true", help="the loss compiled with torch.compile")
    p.add_argument("--warmup", type=int, default=0,
                   help="iterations before the clock starts (compilation, allocator growth)")
    args = p.parse_args()
    d_in, width, dim = 1024, 2048, 256
    if args.small:
        args.batch_size, args.queue, d_in, width, dim = 8, 64, 16, 32, 8

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    query = encoder(d_in, width, dim).to(device)
    key = copy.deepcopy(query).requires_grad_(False)
    opt = torch.optim.AdamW(query.parameters(), lr=1e-4)
    queue = F.normalize(torch.randn(args.queue, dim, device=device), dim=1)
    loss_fn = torch.compile(info_nce) if args.compile_loss else info_nce
    ptr = 0
    loss = None
    t0 = time.time()
    for i in range(args.warmup + args.steps):
        if i == args.warmup and args.warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.time()
        x = torch.randn(args.batch_size, d_in, device=device)
        q = F.normalize(query(x + 0.1 * torch.randn_like(x)), dim=1)
        with torch.no_grad():
            k = F.normalize(key(x + 0.1 * torch.randn_like(x)), dim=1)
        loss = loss_fn(q, k, queue)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            torch._foreach_lerp_(list(key.parameters()), list(query.parameters()), 0.001)
            if args.fixed:
                queue[ptr:ptr + args.batch_size] = k
                ptr = (ptr + args.batch_size) % args.queue
            else:
                queue = torch.cat([queue[args.batch_size:], k])
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    print(f"{args.steps} iterations of {args.batch_size} against {args.queue} negatives in "
          f"{time.time() - t0:.2f} s ({'ring buffer' if args.fixed else 'torch.cat'}{', loss compiled' if args.compile_loss else ''}; last loss {loss.item():.4f})",
          flush=True)


if __name__ == "__main__":
    main()
