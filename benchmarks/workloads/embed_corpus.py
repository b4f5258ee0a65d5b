"""Embedding a corpus with a small sentence encoder, the embeddings collected with torch.cat per batch.

A MiniLM-sized encoder (6 layers, 384 wide, 6 heads, sequence 64; random weights) written in plain
PyTorch runs under ``torch.inference_mode()`` and bf16 autocast over batches of 256 random token ids
drawn on the GPU (no data loader: the step is the model and the collection alone). Each batch's
mean-pooled, normalised fp32 embeddings are appended to the corpus's embeddings with
``torch.cat([all_emb, emb])``, as in many indexing scripts. One perfstack step per batch.

Anti-pattern it carries:
  * the collected embeddings grow by one batch per step and are re-allocated and copied whole at every
    step: copy traffic grows with the corpus, quadratic over the run -> fix: collect the batches in a
    list and concatenate once at the end (``--fixed``), or preallocate and write in place

    python benchmarks/workloads/embed_corpus.py [--batches 6000] [--batch-size 256] [--seq-len 64] [--small]
        [--fixed]   (the fixed variant, for timing it by hand)
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


class Encoder(nn.Module):
    def __init__(self, vocab=30522, dim=384, layers=6, heads=6, ctx=512):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(ctx, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=False)
        self.layers = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        x = self.norm(self.layers(x))
        return F.normalize(x.mean(dim=1).float(), dim=-1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=6000, help="batches in the corpus")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    p.add_argument("--fixed", action="store_true",
                   help="the fixed variant: batches collected in a list, concatenated once at the end")
    args = p.parse_args()

    torch.manual_seed(0)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    model = Encoder(dim=32, layers=1, heads=2) if args.small else Encoder()
    model = model.to(device).eval()
    vocab = model.tok.num_embeddings

    dim = model.tok.embedding_dim
    all_emb = torch.empty(0, dim, device=device)
    pieces = []
    t0 = time.time()
    with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
        for _ in range(args.batches):
            ids = torch.randint(0, vocab, (args.batch_size, args.seq_len), device=device)
            emb = model(ids)
            if args.fixed:
                pieces.append(emb)
            else:
                all_emb = torch.cat([all_emb, emb])
            step()
        if args.fixed:
            all_emb = torch.cat(pieces)
    if cuda:
        torch.cuda.synchronize()
    print(f"{all_emb.shape[0]} embeddings of {all_emb.shape[1]} in {time.time() - t0:.2f} s", flush=True)


if __name__ == "__main__":
    main()
