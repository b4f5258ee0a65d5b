"""Training a word-level LSTM language model written step by step, as truncated-BPTT tutorials write it.

Two stacked ``nn.LSTMCell`` layers (hidden 1536, TF32 on, dropout between the layers, random weights) run
over a time-major batch (sequence 128, batch 64, vocabulary 16384) in a Python loop: at each time step the
first layer reads ``emb[t]``, the embeddings of that time step, and the top layer's outputs are kept in a
list and stacked once after the loop, for a tied-weight output layer, cross-entropy, the backward pass and
an SGD step with gradient clipping. Batches of random tokens drawn on the GPU (no data loader). One perfstack
step per training iteration.

Anti-pattern it carries:
  * ``emb[t]`` in the loop: the backward of each time step's slice writes a zeroed gradient of the whole
    sequence's embeddings and adds it to the total -> fix (``--unbind``): ``emb.unbind(0)`` once before
    the loop

    python benchmarks/workloads/lstm_lm_train.py [--steps 40] [--seq-len 128] [--batch-size 64] [--hidden 1536]
        [--small] [--unbind] [--compile-graphs] [--warmup N]

``--compile-graphs`` compiles the model with torch.compile(mode="reduce-overhead") (CUDA graphs), for timing
by hand what launch-bound claims (TorchDynamo unrolls the time loop: compiling takes minutes).
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


class LanguageModel(nn.Module):
    def __init__(self, vocab, hidden, dropout=0.2):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.cells = nn.ModuleList([nn.LSTMCell(hidden, hidden), nn.LSTMCell(hidden, hidden)])
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(hidden, vocab)
        self.out.weight = self.embed.weight  # tied

    def forward(self, tokens, unbind=False):
        t, b = tokens.shape
        emb = self.drop(self.embed(tokens))
        steps = emb.unbind(0) if unbind else None
        state = [(emb.new_zeros(b, c.hidden_size), emb.new_zeros(b, c.hidden_size)) for c in self.cells]
        outs = []
        for i in range(t):
            x = steps[i] if steps is not None else emb[i]
            for k, cell in enumerate(self.cells):
                h, c = cell(x, state[k])
                state[k] = (h, c)
                x = self.drop(h)
            outs.append(x)
        return self.out(torch.stack(outs))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40, help="training iterations")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--hidden", type=int, default=1536)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    p.add_argument("--unbind", action="store_true", help="the fix: the embeddings taken apart once with unbind")
    p.add_argument("--compile-graphs", action="store_true", help="the model compiled with CUDA graphs")
    p.add_argument("--warmup", type=int, default=0, help="iterations before the clock starts")
    args = p.parse_args()
    vocab = 16384
    if args.small:
        args.seq_len, args.batch_size, args.hidden, vocab = 8, 4, 32, 128
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = LanguageModel(vocab, args.hidden).to(device)
    if args.compile_graphs:
        model.compile(mode="reduce-overhead")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = None
    t0 = time.time()
    for i in range(args.warmup + args.steps):
        if i == args.warmup and args.warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.time()
        tokens = torch.randint(0, vocab, (args.seq_len + 1, args.batch_size), device=device)
        logits = model(tokens[:-1], unbind=args.unbind)
        loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    print(f"{args.steps} iterations of {args.seq_len} x {args.batch_size} in {time.time() - t0:.2f} s "
          f"({'unbound once' if args.unbind else 'emb[t] per time step'}{', compiled with CUDA graphs' if args.compile_graphs else ''}; last loss {loss.item():.4f})", flush=True)


if __name__ == "__main__":
    main()
