"""Token-by-token sampling from a hand-written GPT decoder whose KV cache grows with torch.cat.

A GPT-2-medium-sized decoder (24 layers, 1024 wide, 16 heads; random weights) written in plain
PyTorch. Each request: a 64-token prompt is prefilled, then up to 448 tokens are sampled one at a
time (temperature + top-k), checking for an end-of-text token after each. Every layer keeps its
keys and values in tensors that are re-allocated and copied with ``torch.cat`` at every token.
Runs in fp32 under ``torch.no_grad()``. One perfstack step per generated token.

Anti-patterns it carries:
  * a KV cache grown by torch.cat: a new allocation and a full copy of the cache per layer per
    token, shapes that change every token                   -> fix: static-kv-cache
  * eager per-token decoding is launch-bound (hundreds of tiny kernels per token, Python in
    between); at batch 1 the GPU mostly waits               -> fix: compile
  * fp32 weights and activations (at batch 32 the matmuls start to matter) -> fix: bf16-autocast
  (The ``.item()`` end-of-text check syncs the host every token; no fix id for it.)

    python benchmarks/workloads/kv_cat_decode.py [--batch-size 1|32] [--max-new-tokens 448] [--iters N] [--small]
        [--static-cache]   (the fixed variant of the first anti-pattern, for timing it by hand)
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


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(dim)
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.proj = nn.Linear(4 * dim, dim)

    def forward(self, x, cache, start):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        if "K" in cache:  # the fixed variant: written in place, attended through a view
            cache["K"][:, :, start:start + T] = k
            cache["V"][:, :, start:start + T] = v
            k, v = cache["K"][:, :, :start + T], cache["V"][:, :, :start + T]
        else:
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        x = x + self.proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self, vocab=50257, ctx=1024, dim=1024, layers=24, heads=16):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(ctx, dim)
        self.h = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        nn.init.normal_(self.wte.weight, std=0.02)

    def forward(self, idx, caches, start):
        pos = torch.arange(start, start + idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block, cache in zip(self.h, caches):
            x = block(x, cache, start)
        return self.lm_head(self.ln_f(x[:, -1:, :]))[:, -1, :]


def sample(logits, temperature=0.8, top_k=50):
    logits = logits / temperature
    v, _ = torch.topk(logits, top_k)
    logits[logits < v[:, [-1]]] = -float("inf")
    return torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100000, help="tokens to generate in all")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=448)
    p.add_argument("--small", action="store_true", help="tiny sizes, for a CPU smoke test")
    p.add_argument("--static-cache", action="store_true",
                   help="the fixed variant: each layer's cache preallocated and written in place")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.small:
        model = GPT(vocab=1000, ctx=128, dim=64, layers=2, heads=2)
        args.prompt_len, args.max_new_tokens = 8, 16
    else:
        model = GPT()
    model = model.to(device).eval()
    eos = model.wte.num_embeddings - 1

    done = 0
    t0 = time.time()
    with torch.no_grad():
        while done < args.iters:
            prompt = torch.randint(0, eos, (args.batch_size, args.prompt_len), device=device)
            caches = [{} for _ in model.h]
            if args.static_cache:
                shape = (args.batch_size, model.h[0].heads, args.prompt_len + args.max_new_tokens,
                         model.wte.embedding_dim // model.h[0].heads)
                caches = [{"K": torch.empty(shape, device=device), "V": torch.empty(shape, device=device)}
                          for _ in model.h]
            tok = sample(model(prompt, caches, 0))
            out = [tok]
            for t in range(args.max_new_tokens):
                tok = sample(model(tok, caches, args.prompt_len + t))
                out.append(tok)
                done += 1
                step()
                if done >= args.iters or (tok == eos).all().item():
                    break
            text = torch.cat(out, dim=1)
            print(f"{done} tokens: request of {text.shape[1]} tokens x {args.batch_size} "
                  f"({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
