"""The truth set for `perfstack estimate`'s time figures: prefill and engine-grade decode, measured.

For Llama-style configs (random bf16 weights, the shapes of Llama 3.2 1B, 3.2 3B and 3.1 8B) at
batch 1 and 16 this measures, on one GPU:

  * prefill (TTFT without the sampler): one forward over B × prompt tokens, K/V written into the
    cache, logits for the last position only; the median of several CUDA-event timings, launched
    from Python and replayed as one CUDA graph (an engine's host overhead lies between the two);
  * decode (ITL): one token per sequence per step, written like a serving engine does it:
      - grouped-query attention without repeating K/V (the query heads of each KV head are
        folded into the query length, so every cached K/V element is read once),
      - a static cache written in place at the step's position (index_copy_),
      - the layer compiled once with torch.compile (fused norms, rotary, residuals, SiLU·mul, as
        an engine's fused kernels), and the whole token's forward replayed as one CUDA graph;
    the mean replay time over the generated tokens, from position `prompt` on.

Each row also gives the kernels one step launches (counted with torch.profiler on one run outside
the graph), so the estimate's per-layer kernel count can be compared with what ran.

    python benchmarks/estimate_latency_truth.py [--configs 1b,3b,8b] [--batches 1,16]
        [--prompt 1024] [--gen 128] [-o rows.json] [--small]

`--small` runs a tiny config on the CPU (no graph), to check the script itself.
The attention reads the whole static cache (prompt + gen) every step, masked past the position: at
the default sizes that is ≤ 6% more K/V bytes than the tokens written so far (and < 1% of the step's
bytes at 8B); an engine's paged attention reads only what is there.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time

import torch
import torch._dynamo
import torch.nn.functional as F

torch._dynamo.config.cache_size_limit = 64  # one layer function serves every layer: never fall back to eager

CONFIGS = {  # d_model, layers, heads, kv heads, ffn, vocab (Llama 3.2 1B, 3.2 3B, 3.1 8B)
    "1b": dict(d=2048, layers=16, heads=32, kv=8, ffn=8192, vocab=128256),
    "3b": dict(d=3072, layers=28, heads=24, kv=8, ffn=8192, vocab=128256),
    "8b": dict(d=4096, layers=32, heads=32, kv=8, ffn=14336, vocab=128256),
    "tiny": dict(d=64, layers=2, heads=4, kv=2, ffn=128, vocab=256),
}
EPS = 1e-5


def rms(x, w):
    return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * w


def rotate(x, cos, sin):
    """Rotary embedding, half-split layout; x: [B, T, H, dh], cos/sin: [T, dh/2]."""
    x1, x2 = x.chunk(2, dim=-1)
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def layer(x, w, k_cache, v_cache, pos, cos, sin, mask, heads: int, kv: int):
    """One decoder layer over T new tokens at positions pos (T = prompt for prefill, 1 for decode).

    k_cache, v_cache: [B, kv, S_max, dh], written in place. mask: None for prefill (causal over the
    prompt), else [B, 1, 1, S_max] bool, True where a cached position may be attended."""
    B, T, d = x.shape
    dh = d // heads
    h = rms(x, w["n1"])
    qkv = h @ w["qkv"]
    q, k, v = qkv.split([heads * dh, kv * dh, kv * dh], dim=-1)
    q = rotate(q.view(B, T, heads, dh), cos, sin)
    k = rotate(k.view(B, T, kv, dh), cos, sin)
    v = v.view(B, T, kv, dh)
    k_cache.index_copy_(2, pos, k.transpose(1, 2))
    v_cache.index_copy_(2, pos, v.transpose(1, 2))
    g = heads // kv
    if mask is None:  # prefill: causal attention over the prompt itself
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True, enable_gqa=True)
        o = o.transpose(1, 2).reshape(B, T, d)
    else:  # decode: fold each KV head's g query heads into the query length; K/V read once
        qg = q.view(B, kv, g, dh)
        o = F.scaled_dot_product_attention(qg, k_cache, v_cache, attn_mask=mask)
        o = o.reshape(B, 1, d)
    x = x + o @ w["o"]
    h = rms(x, w["n2"])
    gu = h @ w["gate_up"]
    a, b = gu.chunk(2, dim=-1)
    return x + (F.silu(a) * b) @ w["down"]


class Model:
    def __init__(self, cfg, batch, s_max, device, dtype, compiled):
        self.cfg, self.device, self.dtype = cfg, device, dtype
        d, L, H, kv, ff, V = cfg["d"], cfg["layers"], cfg["heads"], cfg["kv"], cfg["ffn"], cfg["vocab"]
        dh = d // H
        gen = torch.Generator(device=device).manual_seed(0)

        def rand(*shape):
            return (torch.randn(*shape, device=device, dtype=dtype, generator=gen) * 0.02)

        self.layers = [{"n1": torch.ones(d, device=device, dtype=dtype), "qkv": rand(d, (H + 2 * kv) * dh),
                        "o": rand(H * dh, d), "n2": torch.ones(d, device=device, dtype=dtype),
                        "gate_up": rand(d, 2 * ff), "down": rand(ff, d)} for _ in range(L)]
        self.embed = rand(V, d)
        self.norm = torch.ones(d, device=device, dtype=dtype)
        self.head = rand(d, V)
        self.k = [torch.zeros(batch, kv, s_max, dh, device=device, dtype=dtype) for _ in range(L)]
        self.v = [torch.zeros_like(c) for c in self.k]
        inv = 1.0 / (500000.0 ** (torch.arange(0, dh, 2, device=device, dtype=torch.float32) / dh))
        ang = torch.outer(torch.arange(s_max, device=device, dtype=torch.float32), inv)
        self.cos, self.sin = ang.cos().to(dtype), ang.sin().to(dtype)
        self.arange = torch.arange(s_max, device=device)
        def prefill_layer(*a):
            return layer(*a, heads=H, kv=kv)

        def decode_layer(*a):  # its own code object: compiled and cached apart from the prefill's
            return layer(*a, heads=H, kv=kv)
        wrap = (lambda f: torch.compile(f, dynamic=False)) if compiled else (lambda f: f)
        self.prefill_layer, self.decode_layer = wrap(prefill_layer), wrap(decode_layer)

    def forward(self, tokens, pos):
        """Logits of the last position; pos: [T] positions of the T new tokens (a device tensor)."""
        x = self.embed[tokens]
        cos, sin = self.cos[pos], self.sin[pos]
        decode = tokens.shape[1] == 1
        mask = (self.arange <= pos[-1])[None, None, None, :].expand(tokens.shape[0], 1, 1, -1) if decode else None
        f = self.decode_layer if decode else self.prefill_layer
        for w, kc, vc in zip(self.layers, self.k, self.v):
            x = f(x, w, kc, vc, pos, cos, sin, mask)
        return rms(x[:, -1], self.norm) @ self.head


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, reps):
    """Milliseconds per call: CUDA events on the GPU (the median of reps), wall time on the CPU."""
    out = []
    for _ in range(reps):
        if device.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
    return out


def kernels_per_call(fn, device):
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        fn()
        sync(device)
    return sum(1 for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and not e.name.startswith(("Memcpy", "Memset")))


def capture(fn, device):
    """``fn`` recorded as one CUDA graph (after warm-up on a side stream, as graph capture needs)."""
    s = torch.cuda.Stream(device)
    s.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream(device).wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()  # the graph keeps its output buffers alive
    return g


def measure(name, batch, prompt, gen, device, compiled, graphs, reps):
    cfg = CONFIGS[name]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    s_max = prompt + gen
    t0 = time.perf_counter()
    m = Model(cfg, batch, s_max, device, dtype, compiled)
    tokens = torch.randint(0, cfg["vocab"], (batch, prompt), device=device)
    ppos = torch.arange(prompt, device=device)
    with torch.inference_mode():
        for _ in range(3):  # compile and warm up
            m.forward(tokens, ppos)
        sync(device)
        pre = timed(lambda: m.forward(tokens, ppos), device, reps)
        pre_k = kernels_per_call(lambda: m.forward(tokens, ppos), device)
        pre_graph = None
        if graphs and device.type == "cuda":  # the same prefill replayed as one graph: no host in the way
            gp = capture(lambda: m.forward(tokens, ppos), device)
            pre_graph = timed(gp.replay, device, reps)
            del gp
        tok = torch.zeros(batch, 1, dtype=torch.long, device=device)
        pos = torch.full((1,), prompt, dtype=torch.long, device=device)
        for _ in range(3):
            m.forward(tok, pos)
        sync(device)
        dec_k = kernels_per_call(lambda: m.forward(tok, pos), device)
        if graphs and device.type == "cuda":
            g = capture(lambda: m.forward(tok, pos), device)
            step = g.replay
        else:
            def step():
                return m.forward(tok, pos)

        def token_loop():
            for i in range(gen):
                pos.fill_(prompt + i)
                step()
        loops = timed(token_loop, device, max(2, reps // 3))
    row = {"config": name, "batch": batch, "prompt": prompt, "gen": gen, **cfg,
           "prefill_ms": statistics.median(pre), "prefill_ms_all": pre,
           "prefill_graph_ms": statistics.median(pre_graph) if pre_graph else None,
           "itl_ms": min(loops) / gen, "itl_ms_rounds": [x / gen for x in loops],
           "kernels_prefill": pre_k, "kernels_decode_step": dec_k,
           "compiled": compiled, "graph": bool(graphs and device.type == "cuda"),
           "setup_s": time.perf_counter() - t0}
    m = None  # the weights go before the next config is built
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default="1b,3b,8b")
    p.add_argument("--batches", default="1,16")
    p.add_argument("--prompt", type=int, default=1024)
    p.add_argument("--gen", type=int, default=128)
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--eager", action="store_true", help="no torch.compile of the layer")
    p.add_argument("--no-graph", action="store_true", help="decode eagerly instead of replaying a CUDA graph")
    p.add_argument("--small", action="store_true", help="a tiny config on the CPU, to check the script")
    p.add_argument("-o", "--output")
    a = p.parse_args(argv)
    if a.small:
        device, configs, batches, a.prompt, a.gen = torch.device("cpu"), ["tiny"], [1, 2], 16, 4
    else:
        device = torch.device("cuda")
        configs, batches = a.configs.split(","), [int(b) for b in a.batches.split(",")]
    env = {"torch": torch.__version__, "python": platform.python_version(),
           "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "cuda": torch.version.cuda}
    rows = []
    for c in configs:
        for b in batches:
            r = measure(c, b, a.prompt, a.gen, device, not a.eager, not a.no_graph, a.reps)
            rows.append(r)
            pg = f", {r['prefill_graph_ms']:.2f} ms as a graph" if r["prefill_graph_ms"] else ""
            print(f"{env['gpu']} {c} b={b}: prefill {r['prefill_ms']:.2f} ms{pg} ({r['kernels_prefill']} kernels), "
                  f"ITL {r['itl_ms']:.3f} ms ({r['kernels_decode_step']} kernels/step), setup {r['setup_s']:.0f} s",
                  flush=True)
    doc = {"env": env, "rows": rows}
    if a.output:
        with open(a.output, "w") as f:
            json.dump(doc, f, indent=1)
    return 0 if all(math.isfinite(r["itl_ms"]) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
