"""Fine-tuning a 6-layer BERT for sequence classification with every example padded to 512 tokens.

``BertForSequenceClassification`` from a ``BertConfig`` built in code (random init, no download).
The data is a tokenized dataset held as CPU tensors, padded to the maximum length once up front,
read through a ``DataLoader`` with the defaults (no workers, no pinned memory) and copied to the
GPU each step. Trained in fp32 with AdamW.

Anti-patterns it carries:
  * fp32 training where bf16 mixed precision would do         -> fix: bf16-autocast
  * eager mode: embedding sums, LayerNorm, GELU, dropout as separate kernels -> fix: compile
  * host-to-device copies from pageable memory (DataLoader pin_memory=False) -> fix: pin-memory
  (Padding every example to 512 when most are under 200 tokens also wastes work; no fix id for it.)

    python benchmarks/workloads/bert_classify_train.py [--batch-size 16] [--max-len 512] [--iters N] [--small]
"""

import argparse
import time

import torch
from torch.utils.data import DataLoader, TensorDataset
from transformers import BertConfig, BertForSequenceClassification


def make_dataset(n, max_len, vocab_size, gen):
    """Token ids of random lengths (mostly short), right-padded to max_len, with attention masks."""
    lengths = torch.randint(max_len // 16, max_len // 2 + 1, (n,), generator=gen)
    ids = torch.zeros(n, max_len, dtype=torch.long)
    mask = torch.zeros(n, max_len, dtype=torch.long)
    for i, length in enumerate(lengths.tolist()):
        ids[i, :length] = torch.randint(1000 % vocab_size, vocab_size, (length,), generator=gen)
        ids[i, 0] = 101 % vocab_size
        mask[i, :length] = 1
    labels = torch.randint(0, 2, (n,), generator=gen)
    return TensorDataset(ids, mask, labels)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-len", type=int, default=512)
    p.add_argument("--examples", type=int, default=4096)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.small:
        config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=128, num_labels=2)
        args.batch_size, args.max_len, args.examples = 2, 64, 16
    else:
        config = BertConfig(num_hidden_layers=6, num_labels=2)
    dataset = make_dataset(args.examples, args.max_len, config.vocab_size, gen)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, drop_last=True, generator=gen)

    model = BertForSequenceClassification(config).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01)

    it = 0
    t0 = time.time()
    while it < args.iters:
        for ids, mask, labels in loader:
            ids, mask, labels = ids.to(device), mask.to(device), labels.to(device)
            out = model(input_ids=ids, attention_mask=mask, labels=labels)
            out.loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if it % args.log_every == 0:
                print(f"iter {it} loss {out.loss.item():.4f} ({time.time() - t0:.1f}s)", flush=True)
            it += 1
            if it >= args.iters:
                break


if __name__ == "__main__":
    main()
