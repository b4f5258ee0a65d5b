"""Training a recurrent decoder unrolled in Python, its outputs gathered with torch.cat per time step.

A GRU cell (hidden 1024, fp32, random weights) is unrolled over 384 time steps in a Python loop, as
sequence-to-sequence tutorials and many research scripts write it: at each time step the cell reads
the previous token's embedding (teacher forcing) and its hidden state, and the new hidden state is
appended to the outputs so far with ``torch.cat([outputs, h[:, None]], dim=1)``. A linear head over the
whole output sequence gives the logits (vocabulary 8192), cross-entropy against random targets, the
backward pass and an AdamW step. Batches of 128 random token sequences drawn on the GPU (no data
loader). One perfstack step per training iteration.

Anti-pattern it carries:
  * the outputs are re-allocated and copied whole at every time step: copy traffic grows with the
    square of the sequence length (about 36 GiB read and as much written per iteration here) -> fix
    (``--fixed``): keep the hidden states in a list and ``torch.stack`` them once after the loop

It carries a second one, as the same tutorials write it: the loop reads its input with ``x[:, i]``, so the
backward writes each time step's gradient into a zeroed tensor of the whole sequence's size and adds that
to the total: 384 full-size fills and adds per iteration (about 0.6 GB each) -> fix (``--unbind``): take the
time steps apart once with ``x.unbind(1)`` (its backward stacks the gradients once).

``--compile-cell`` compiles the GRU cell with ``torch.compile`` (one small graph, called at every time step),
for timing by hand what fusing its element-wise work recovers; ``--compile-decoder`` compiles the whole
decoder, as the fusion finding's fix says (TorchDynamo unrolls all 384 time steps into one graph, and the
backward's sums of the cell's weight gradients over them fall inside it: compiling takes minutes).

    python benchmarks/workloads/rnn_decoder_train.py [--steps 60] [--batch-size 128] [--seq-len 384]
        [--hidden 1024] [--small] [--fixed] [--unbind] [--compile-cell | --compile-decoder]   (the variants, timed by hand)
"""

import argparse
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


class Decoder(nn.Module):
    def __init__(self, vocab=8192, hidden=1024):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.cell = nn.GRUCell(hidden, hidden)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens, fixed=False, unbind=False):
        b, t = tokens.shape
        x = self.embed(tokens)
        xs = x.unbind(1) if unbind else None
        h = x.new_zeros(b, self.cell.hidden_size)
        outputs = x.new_zeros(b, 0, self.cell.hidden_size)
        kept = []
        for i in range(t):
            h = self.cell(xs[i] if xs is not None else x[:, i], h)
            if fixed:
                kept.append(h)
            else:
                outputs = torch.cat([outputs, h[:, None]], dim=1)
        if fixed:
            outputs = torch.stack(kept, dim=1)
        return self.head(outputs)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60, help="training iterations")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--seq-len", type=int, default=384)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    p.add_argument("--fixed", action="store_true", help="the fixed variant: outputs stacked once after the loop")
    p.add_argument("--unbind", action="store_true", help="the inputs taken apart once with unbind, not indexed per step")
    p.add_argument("--compile-cell", action="store_true", help="the GRU cell compiled with torch.compile")
    p.add_argument("--compile-decoder", action="store_true", help="the whole decoder compiled with torch.compile")
    p.add_argument("--warmup", type=int, default=0,
                   help="iterations before the clock starts (compilation, allocator growth)")
    args = p.parse_args()
    if args.small:
        args.batch_size, args.seq_len, args.hidden = 4, 8, 32

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    vocab = 8192
    model = Decoder(vocab, args.hidden).to(device)
    if args.compile_cell:
        model.cell.compile()
    if args.compile_decoder:
        model.compile()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loss = None
    t0 = time.time()
    for i in range(args.warmup + args.steps):
        if i == args.warmup and args.warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.time()
        tokens = torch.randint(0, vocab, (args.batch_size, args.seq_len), device=device)
        targets = torch.randint(0, vocab, (args.batch_size, args.seq_len), device=device)
        logits = model(tokens, fixed=args.fixed, unbind=args.unbind)
        loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    print(f"{args.steps} iterations of {args.batch_size} x {args.seq_len} in {time.time() - t0:.2f} s "
          f"({'stacked once' if args.fixed else 'torch.cat per time step'}{', cell compiled' if args.compile_cell else ''}{', decoder compiled' if args.compile_decoder else ''}{', inputs unbound once' if args.unbind else ''}; last loss {loss.item():.4f})", flush=True)


if __name__ == "__main__":
    main()
