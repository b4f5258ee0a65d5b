"""What torch.compile changes in a training step, kernel category by category: the eager step and the compiled
one (default mode, and mode="reduce-overhead"), each timed without the profiler and then profiled, with the GPU
time per step of each category as `perfstack profile` attributes it.

The unfused-elementwise finding predicts default compile from an eager trace alone (fused element-wise chains,
padded GEMMs, channels_last convolutions). Where it misses, the compiled step's own trace says what else
compiling changed: on the H200 fp32 GPT-2 (issue 23) fusion predicts 8.8% and compiling measured 1.1%; the
categories below show whether the element-wise time fell as modelled and what grew instead.

    PYTHONPATH=$PWD/src python benchmarks/compiled_breakdown.py --model gpt2 --out compiled-gpt2
    PYTHONPATH=$PWD/src python benchmarks/compiled_breakdown.py --model resnet50 --out compiled-resnet50

Needs a CUDA GPU, torch, and for gpt2 the transformers package. Prints one table; the traces stay in --out.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def build(name: str, torch):
    """The model, one batch and a step function, as the fix matrix's workloads build them (fp32, AdamW)."""
    dev = torch.device("cuda")
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        model = GPT2LMHeadModel(GPT2Config()).to(dev)
        x = torch.randint(0, 50257, (4, 1024), device=dev)

        def loss_of(m):
            return m(input_ids=x, labels=x).loss
    else:
        import torchvision
        model = torchvision.models.resnet50().to(dev)
        x = torch.randn(64, 3, 224, 224, device=dev)
        y = torch.randint(0, 1000, (64,), device=dev)

        def loss_of(m):
            return torch.nn.functional.cross_entropy(m(x), y)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return model, opt, loss_of


def timed(step, torch, steps: int) -> float:
    """Median ms of ``steps`` steps, CUDA events around each (after the caller's warm-up)."""
    times = []
    for _ in range(steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def main() -> int:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from perfstack.profile.summary import profile_run
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("gpt2", "resnet50"), default="gpt2")
    p.add_argument("--out", default="compiled-breakdown")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = {}
    for arm in ("eager", "default", "reduce-overhead"):
        torch.manual_seed(0)
        model, opt, loss_of = build(args.model, torch)
        m = model if arm == "eager" else torch.compile(model, mode=None if arm == "default" else arm)

        def step():
            opt.zero_grad(set_to_none=True)
            loss_of(m).backward()
            opt.step()
        t0 = time.time()
        for _ in range(5):  # warm-up: compilation, autotuning, the graphs' recording
            step()
        torch.cuda.synchronize()
        warm_s = time.time() - t0
        ms = min(timed(step, torch, args.steps) for _ in range(args.rounds))
        trace = out / f"{args.model}-{arm}.pt.trace.json"
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                     schedule=schedule(wait=0, warmup=1, active=3),
                     on_trace_ready=lambda prof, t=trace: prof.export_chrome_trace(str(t))) as prof:
            for _ in range(4):
                step()
                prof.step()
        run = profile_run([trace], unprofiled_step_ms=ms)
        rows[arm] = (ms, warm_s, run.profile.breakdown() or {})
    cats = sorted({c for _, _, b in rows.values() for c in b})
    print(f"{args.model} on {torch.cuda.get_device_name()}, torch {torch.__version__}: GPU ms per step by category "
          "(perfstack's attribution), step ms without the profiler (min over rounds of the median step)")
    print("| arm | step ms | gain % | warm-up s | " + " | ".join(cats) + " |")
    print("|---|---|---|---|" + "---|" * len(cats))
    base = rows["eager"][0]
    for arm, (ms, warm, b) in rows.items():
        print(f"| {arm} | {ms:.2f} | {100 * (base - ms) / base:.1f} | {warm:.0f} | "
              + " | ".join(f"{b.get(c, 0.0):.2f}" for c in cats) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
