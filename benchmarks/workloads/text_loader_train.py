"""Text classification whose tokenization runs in Python inside the Dataset, in the training process.

Each example is a synthetic document of 150-400 words (seeded by the index) that ``__getitem__``
lower-cases, splits and tokenizes with a greedy longest-match WordPiece written in plain Python;
a ``collate_fn`` pads each batch to its longest document (up to 512 tokens) and builds the
attention mask. ``DataLoader(num_workers=0, pin_memory=False)``. The model is a 4-layer
``nn.TransformerEncoder`` classifier, quick next to the tokenizer.

Anti-patterns it carries:
  * Python tokenization on the training process's main thread (num_workers=0): the GPU idles
    while each batch is tokenized                           -> fix: dataloader-workers
  * pageable host memory for the batches (pin_memory=False) -> fix: pin-memory
  * many small short-lived Python/host allocations with glibc malloc -> fix: jemalloc

    python benchmarks/workloads/text_loader_train.py [--batch-size 64] [--iters N] [--small]
"""

import argparse
import random
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

SYLLABLES = ["ka", "to", "ri", "men", "sa", "lo", "ven", "dar", "is", "un", "pre", "tion", "al", "ing", "er",
             "qu", "ex", "or", "an", "th", "est", "ble", "ly", "com", "pro", "de", "re", "con", "ment", "ous"]


def build_vocab():
    rng = random.Random(0)
    pieces = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
    for s in SYLLABLES:
        pieces.setdefault(s, len(pieces))
        pieces.setdefault("##" + s, len(pieces))
    for _ in range(4000):  # frequent multi-syllable pieces
        w = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3)))
        pieces.setdefault(w, len(pieces))
        pieces.setdefault("##" + w, len(pieces))
    for c in "abcdefghijklmnopqrstuvwxyz":
        pieces.setdefault(c, len(pieces))
        pieces.setdefault("##" + c, len(pieces))
    return pieces


class WordPiece:
    def __init__(self, vocab, max_chars=24):
        self.vocab, self.max_chars = vocab, max_chars

    def tokenize_word(self, word):
        out, start = [], 0
        while start < len(word):
            end = min(len(word), start + self.max_chars)
            piece = None
            while end > start:
                sub = word[start:end] if start == 0 else "##" + word[start:end]
                if sub in self.vocab:
                    piece = sub
                    break
                end -= 1
            if piece is None:
                return [self.vocab["[UNK]"]]
            out.append(self.vocab[piece])
            start = end
        return out

    def __call__(self, text, max_len):
        ids = [self.vocab["[CLS]"]]
        for word in text.lower().replace(",", " ").replace(".", " ").split():
            ids.extend(self.tokenize_word(word))
        return ids[:max_len - 1] + [self.vocab["[SEP]"]]


class SyntheticReviews(Dataset):
    def __init__(self, n, tokenizer, max_len=512, min_words=150, max_words=400):
        self.n, self.tok, self.max_len = n, tokenizer, max_len
        self.min_words, self.max_words = min_words, max_words

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        rng = random.Random(index)
        words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 5)))
                 for _ in range(rng.randint(self.min_words, self.max_words))]
        text = " ".join(w.capitalize() if rng.random() < 0.1 else w for w in words) + "."
        return self.tok(text, self.max_len), index % 2


def collate(batch):
    longest = max(len(ids) for ids, _ in batch)
    ids = torch.zeros(len(batch), longest, dtype=torch.long)
    mask = torch.zeros(len(batch), longest, dtype=torch.bool)
    for i, (toks, _) in enumerate(batch):
        ids[i, :len(toks)] = torch.tensor(toks)
        mask[i, :len(toks)] = True
    labels = torch.tensor([label for _, label in batch])
    return ids, mask, labels


class Classifier(nn.Module):
    def __init__(self, vocab_size, dim=512, layers=4, heads=8, max_len=512):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.pos = nn.Embedding(max_len, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.1, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, 2)

    def forward(self, ids, mask):
        x = self.embed(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        x = self.encoder(x, src_key_padding_mask=~mask)
        x = (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        return self.head(x)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    vocab = build_vocab()
    tok = WordPiece(vocab)
    if args.small:
        dataset = SyntheticReviews(64, tok, max_len=64, min_words=10, max_words=30)
        model = Classifier(len(vocab), dim=32, layers=1, heads=2, max_len=64)
        args.batch_size = 4
    else:
        dataset = SyntheticReviews(200000, tok)
        model = Classifier(len(vocab))
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, collate_fn=collate, drop_last=True)
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    criterion = nn.CrossEntropyLoss()

    it = 0
    t0 = time.time()
    while it < args.iters:
        for ids, mask, labels in loader:
            ids, mask, labels = ids.to(device), mask.to(device), labels.to(device)
            loss = criterion(model(ids, mask), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if it % args.log_every == 0:
                print(f"iter {it} loss {loss.item():.4f} ({time.time() - t0:.1f}s)", flush=True)
            it += 1
            if it >= args.iters:
                break


if __name__ == "__main__":
    main()
