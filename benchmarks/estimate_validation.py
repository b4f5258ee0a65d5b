"""Measure real models against `perfstack estimate`: peak memory and time, inference and training.

Builds Hugging Face transformers models from configs with random weights (no downloads), on a
CUDA GPU: a GQA Llama, an MHA Llama, a Qwen2 with tied embeddings, a small Mixtral (MoE) and
GPT-2. For each it records

* inference with ``generate`` (bf16, SDPA) at two batch/length settings: the peak of
  ``torch.cuda.max_memory_allocated()``, the time to the first token and per generated token;
* training steps (fp32 parameters = master weights, AdamW, bf16 autocast) with and without
  gradient checkpointing: the peak over the steps, the peaks of forward+backward and of the
  optimizer step separately, and the time per step.

The same configs are written into the output, so the tests hand exactly these models to perfstack.
Run on the GPU machine:

    PYTHONPATH=$PWD/src python3 benchmarks/estimate_validation.py --out validation.json

``--dry`` runs tiny configs on whatever device there is (CPU included) to check the script itself.

Two more modes work from a saved table, on any machine:

    # other estimators on the same models and settings (run in each tool's environment; merges)
    python benchmarks/estimate_validation.py --tools tests/fixtures/estimate/h100-validation.json \
        --tools-out tests/fixtures/estimate/h100-tools.json
    # the markdown table of docs/estimate.md: measured vs perfstack (vs the tools)
    PYTHONPATH=src python benchmarks/estimate_validation.py --table tests/fixtures/estimate/h100-validation.json \
        --tools-out tests/fixtures/estimate/h100-tools.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from typing import Any

# The validated models: real architectures (the first three are published configs) or small
# members of a family, 0.35-1.3 B parameters so that each takes seconds.
MODELS: dict[str, dict[str, Any]] = {
    # Llama-3.2-1B (huggingface.co/meta-llama/Llama-3.2-1B config.json): GQA 32/8, tied, V=128256
    "llama-gqa-1b": dict(model_type="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                         max_position_embeddings=131072, tie_word_embeddings=True, rope_theta=500000.0),
    # a Llama-2-style MHA decoder, 0.94 B
    "llama-mha-0.9b": dict(model_type="llama", hidden_size=2048, intermediate_size=5504, num_hidden_layers=16,
                           num_attention_heads=16, num_key_value_heads=16, vocab_size=32000,
                           max_position_embeddings=4096, tie_word_embeddings=False),
    # Qwen2.5-0.5B (huggingface.co/Qwen/Qwen2.5-0.5B config.json): GQA 14/2, QKV bias, tied, V=151936
    "qwen2-tied-0.5b": dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                            num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                            max_position_embeddings=32768, sliding_window=32768, use_sliding_window=False,
                            max_window_layers=21, tie_word_embeddings=True, rope_theta=1000000.0),
    # a small Mixtral: 8 experts, top-2, 0.93 B total / 0.29 B active
    "mixtral-moe-0.9b": dict(model_type="mixtral", hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
                             num_attention_heads=16, num_key_value_heads=8, vocab_size=32000,
                             max_position_embeddings=4096, num_local_experts=8, num_experts_per_tok=2,
                             sliding_window=None, tie_word_embeddings=False),
    # GPT-2 medium (huggingface.co/openai-community/gpt2-medium config.json): MHA, learned positions, tied
    "gpt2-medium": dict(model_type="gpt2", n_embd=1024, n_layer=24, n_head=16, vocab_size=50257, n_positions=1024,
                        n_ctx=1024, activation_function="gelu_new", resid_pdrop=0.1, embd_pdrop=0.1,
                        attn_pdrop=0.1, bos_token_id=50256, eos_token_id=50256),
}

INFER_SETTINGS = [dict(batch=1, prompt=128, gen=64), dict(batch=32, prompt=960, gen=64)]
TRAIN_SETTINGS = [dict(batch=4, seq=1024, grad_ckpt=False), dict(batch=4, seq=1024, grad_ckpt=True)]
TRAIN_STEPS = 3

DRY_MODELS = {
    "llama-gqa-tiny": dict(model_type="llama", hidden_size=128, intermediate_size=352, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                           max_position_embeddings=512, tie_word_embeddings=True),
    "mixtral-tiny": dict(model_type="mixtral", hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=512, max_position_embeddings=512,
                         num_local_experts=4, num_experts_per_tok=2),
    "gpt2-tiny": dict(model_type="gpt2", n_embd=128, n_layer=2, n_head=4, vocab_size=512, n_positions=256,
                      bos_token_id=0, eos_token_id=0),
}
DRY_INFER = [dict(batch=1, prompt=16, gen=4), dict(batch=2, prompt=32, gen=4)]
DRY_TRAIN = [dict(batch=2, seq=32, grad_ckpt=False), dict(batch=2, seq=32, grad_ckpt=True)]


class Device:
    """Memory counters and synchronisation for CUDA; the same calls are no-ops on CPU (--dry)."""

    def __init__(self, torch: Any, name: str) -> None:
        self.torch, self.name, self.cuda = torch, name, name == "cuda"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def reset_peak(self) -> None:
        if self.cuda:
            self.sync()
            self.torch.cuda.reset_peak_memory_stats()

    def allocated(self) -> int | None:
        return int(self.torch.cuda.memory_allocated()) if self.cuda else None

    def peak(self) -> int | None:
        return int(self.torch.cuda.max_memory_allocated()) if self.cuda else None

    def peak_reserved(self) -> int | None:
        return int(self.torch.cuda.max_memory_reserved()) if self.cuda else None

    def used(self) -> int | None:
        if not self.cuda:
            return None
        free, total = self.torch.cuda.mem_get_info()
        return int(total - free)

    def clear(self) -> None:
        import gc

        gc.collect()
        if self.cuda:
            self.torch.cuda.empty_cache()


def build(transformers: Any, torch: Any, dev: Device, cfg: dict[str, Any], dtype: Any) -> Any:
    config = transformers.AutoConfig.for_model(**cfg)
    with torch.device(dev.name):
        try:
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
        except TypeError:  # transformers 4.x spells it torch_dtype
            model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=dtype,
                                                                  attn_implementation="sdpa")
    return model


def timed(dev: Device, fn: Any) -> float:
    dev.sync()
    t0 = time.perf_counter()
    fn()
    dev.sync()
    return time.perf_counter() - t0


def measure_infer(transformers: Any, torch: Any, dev: Device, cfg: dict[str, Any], settings: list[dict],
                  reps: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    model = build(transformers, torch, dev, cfg, torch.bfloat16).eval()
    model.generation_config.eos_token_id = None  # random weights: never stop early, always N_gen tokens
    model.generation_config.pad_token_id = 0
    weights_alloc = dev.allocated()
    info = {"params": sum(p.numel() for p in model.parameters()),
            "experts_implementation": getattr(model.config, "_experts_implementation_internal", None)
            or getattr(model.config, "_experts_implementation", None),
            "attn_implementation": getattr(model.config, "_attn_implementation", None)}
    out = []
    first = True
    for s in settings:
        row: dict[str, Any] = dict(s)
        try:
            B, P, G = s["batch"], s["prompt"], s["gen"]
            x = torch.randint(0, cfg.get("vocab_size", 512), (B, P), device=dev.name)
            mask = torch.ones_like(x)

            def gen(n: int, model: Any = model) -> Any:
                with torch.no_grad():
                    return model.generate(input_ids=x, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                                          do_sample=False)

            if first:
                gen(2)  # kernels, cuBLAS handles, workspaces
                first = False
            dev.clear()
            dev.reset_peak()
            before = dev.allocated()
            t1 = sorted(timed(dev, lambda: gen(1)) for _ in range(reps))[0]
            tg, produced = [], None
            for _ in range(reps):
                dev.sync()
                t0 = time.perf_counter()
                produced = gen(G)
                dev.sync()
                tg.append(time.perf_counter() - t0)
            tgen = sorted(tg)[0]
            row.update(
                weights_allocated_bytes=weights_alloc, allocated_before_bytes=before,
                peak_allocated_bytes=dev.peak(), peak_reserved_bytes=dev.peak_reserved(), device_used_bytes=dev.used(),
                ttft_s=t1, generate_s=tgen, itl_s=(tgen - t1) / (G - 1) if G > 1 else None,
                generated_tokens=int(produced.shape[1] - P), ok=True)
        except Exception as e:  # keep going: one failure must not cost the other measurements
            row.update(ok=False, error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc(limit=4))
        out.append(row)
    del model
    dev.clear()
    return out, info


def measure_train(transformers: Any, torch: Any, dev: Device, cfg: dict[str, Any], s: dict[str, Any],
                  steps: int) -> dict[str, Any]:
    row: dict[str, Any] = dict(s, precision="bf16-mixed", optimizer="adamw", steps=steps)
    model = opt = None
    try:
        dev.clear()
        model = build(transformers, torch, dev, cfg, torch.float32)
        model.train()
        if s["grad_ckpt"]:
            model.gradient_checkpointing_enable()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        B, S = s["batch"], s["seq"]
        x = torch.randint(0, cfg.get("vocab_size", 512), (B, S), device=dev.name)
        dev.reset_peak()
        row["params_allocated_bytes"] = dev.allocated()
        times, fb_peaks, opt_peaks = [], [], []
        for step in range(steps):
            dev.sync()
            t0 = time.perf_counter()
            dev.reset_peak()
            with torch.autocast(device_type=dev.name, dtype=torch.bfloat16):
                loss = model(input_ids=x, labels=x).loss
            loss.backward()
            fb_peaks.append(dev.peak())
            dev.reset_peak()
            opt.step()
            opt.zero_grad(set_to_none=True)
            opt_peaks.append(dev.peak())
            dev.sync()
            times.append(time.perf_counter() - t0)
            if step == 0:
                row["after_first_step_allocated_bytes"] = dev.allocated()
        steady = times[1:] or times
        row.update(
            peak_forward_backward_bytes=max(fb_peaks[1:] or fb_peaks) if dev.cuda else None,
            peak_optimizer_bytes=max(opt_peaks) if dev.cuda else None,
            peak_allocated_bytes=max(max(fb_peaks[1:] or fb_peaks), max(opt_peaks)) if dev.cuda else None,
            peak_reserved_bytes=dev.peak_reserved(), device_used_bytes=dev.used(),
            step_s=sum(steady) / len(steady), step_times_s=times, loss=float(loss.detach()), ok=True)
    except Exception as e:
        row.update(ok=False, error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc(limit=4))
    del model, opt
    dev.clear()
    return row


def _gated(cfg: dict[str, Any]) -> bool:
    return cfg["model_type"] != "gpt2"


def llm_analysis_rows(name: str, entry: dict[str, Any]) -> dict[str, Any]:
    """llm-analysis (pip install llm-analysis) on the same shapes: its own 2-matrix MLP, so a gated
    MLP of width F is given as ffn_embed_dim = 1.5·F (same parameters), as its Llama-2 config does."""
    import tempfile

    from llm_analysis.analysis import infer, train

    cfg = entry["config"]
    gpt2 = cfg["model_type"] == "gpt2"
    d = cfg["n_embd"] if gpt2 else cfg["hidden_size"]
    F = 4 * d if gpt2 else cfg["intermediate_size"]
    ffn = F if gpt2 else int(1.5 * F)
    mc = {"name": name, "num_layers": cfg["n_layer"] if gpt2 else cfg["num_hidden_layers"],
          "n_head": cfg["n_head"] if gpt2 else cfg["num_attention_heads"], "hidden_dim": d,
          "vocab_size": cfg["vocab_size"], "max_seq_len": cfg.get("n_positions") or cfg.get("max_position_embeddings"),
          "num_key_value_heads": cfg.get("num_key_value_heads", cfg.get("n_head")), "ffn_embed_dim": ffn,
          "expansion_ratio": ffn / d, "model_type": cfg["model_type"],
          "moe_num_experts": cfg.get("num_local_experts", 1), "moe_top_k": cfg.get("num_experts_per_tok", 1)}
    out: dict[str, Any] = {"model_config": mc, "infer": [], "train": []}
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/{name}.json"
        with open(path, "w") as f:
            json.dump(mc, f)
        for r in entry["infer"]:
            x = infer(model_name=path, gpu_name="h100-sxm-80gb", dtype_name="w16a16e16",
                      batch_size_per_gpu=r["batch"], seq_len=r["prompt"], num_tokens_to_generate=r["gen"],
                      log_level="ERROR")
            total = x["weight_memory_per_gpu"] + x["kv_cache_memory_per_gpu"] + max(
                x["prefill_activation_memory_per_gpu"], x["decode_activation_memory_per_gpu"])
            out["infer"].append({"batch": r["batch"], "prompt": r["prompt"], "gen": r["gen"], "memory_bytes": total,
                                 "weights_bytes": x["weight_memory_per_gpu"], "kv_bytes": x["kv_cache_memory_per_gpu"],
                                 "prefill_activation_bytes": x["prefill_activation_memory_per_gpu"],
                                 "decode_latency_s": x["decode_latency"], "prefill_latency_s": x["prefill_latency"]})
        for r in entry["train"]:
            x = train(model_name=path, gpu_name="h100-sxm-80gb", dtype_name="w16a16e16", batch_size_per_gpu=r["batch"],
                      seq_len=r["seq"], total_num_tokens=r["batch"] * r["seq"] * 3,
                      activation_recomputation=2 if r["grad_ckpt"] else 0, dp_size=1,
                      mlp_gated_linear_units=_gated(cfg), log_level="ERROR")
            out["train"].append({"grad_ckpt": r["grad_ckpt"],
                                 "memory_bytes": x["(weight+op_state+grad+act)_memory_per_gpu"],
                                 "activation_bytes": x["activation_memory_per_gpu"],
                                 "step_s": x["latency_per_iter"]})
    return out


def accelerate_rows(entry: dict[str, Any]) -> dict[str, Any]:
    """What `accelerate estimate-memory` prints, from its own functions: the CLI itself insists on
    the Hugging Face Hub (verify_on_hub) and cannot read a local config offline."""
    import torch
    import transformers
    from accelerate import init_empty_weights
    from accelerate.commands.estimate import estimate_training_usage
    from accelerate.utils import calculate_maximum_sizes

    with init_empty_weights():
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**entry["config"]),
                                                              dtype=torch.float32)
    total, _ = calculate_maximum_sizes(model)
    training = max(estimate_training_usage(total, "float16").values())  # the "Training using Adam" column
    return {"total_size_float16_bytes": total / 2, "training_using_adam_float16_bytes": training,
            "note": "independent of batch and sequence length"}


def tools_mode(table: str, out_path: str) -> int:
    import os

    data = json.load(open(table, encoding="utf-8"))
    result: dict[str, Any] = json.load(open(out_path, encoding="utf-8")) if os.path.exists(out_path) else {}
    result.setdefault("source", table)
    result.setdefault("models", {})
    for name, entry in data["models"].items():
        if "infer" not in entry:
            continue
        row = result["models"].setdefault(name, {})
        try:
            import llm_analysis

            row["llm_analysis"] = llm_analysis_rows(name, entry)
            result["llm_analysis_version"] = getattr(llm_analysis, "__version__", None) or _dist_version("llm-analysis")
        except ImportError:
            pass
        try:
            import accelerate

            row["accelerate"] = accelerate_rows(entry)
            result["accelerate_version"] = accelerate.__version__
        except ImportError:
            pass
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {out_path}", file=sys.stderr)
    return 0


def _dist_version(dist: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:
        return None


def _gb(x: float | None) -> str:
    return "—" if x is None else f"{x / 1e9:.2f}"


def table_mode(table: str, tools_path: str | None) -> int:
    """Markdown tables: measured vs perfstack (and the other tools) for memory and time."""
    import os

    from perfstack.estimate import hardware, infer, train
    from perfstack.estimate.config import parse_config

    data = json.load(open(table, encoding="utf-8"))
    tools = json.load(open(tools_path, encoding="utf-8"))["models"] if tools_path and os.path.exists(tools_path) else {}
    hw = hardware.resolve(data["env"].get("gpu") or "h100-sxm", "bf16")
    print("| model | inference (batch × prompt + gen) | measured peak GB | perfstack GB | error | llm-analysis GB "
          "| accelerate GB | ITL measured ms | ITL bound ms | measured / bound |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, e in data["models"].items():
        m = parse_config(e["config"], name=name)
        t = tools.get(name, {})
        la = {(r["batch"], r["prompt"]): r for r in t.get("llm_analysis", {}).get("infer", [])}
        acc = t.get("accelerate", {})
        for r in e.get("infer", []):
            if not r.get("ok"):
                continue
            est = infer.estimate(m, hw, infer.InferSettings(batch=r["batch"], prompt=r["prompt"], gen=r["gen"]))
            pa, meas = est["memory"]["peak_allocated_bytes"], r["peak_allocated_bytes"]
            itl = est["time"]["itl_s"]
            lar = la.get((r["batch"], r["prompt"]))
            print(f"| {name} | {r['batch']} × {r['prompt']} + {r['gen']} | {_gb(meas)} | {_gb(pa)} | "
                  f"{(pa / meas - 1) * 100:+.1f}% | {_gb(lar['memory_bytes']) if lar else '—'} | "
                  f"{_gb(acc.get('total_size_float16_bytes'))} | {r['itl_s'] * 1e3:.1f} | {itl * 1e3:.2f} | "
                  f"{r['itl_s'] / itl:.0f}× |")
    print()
    print("| model | training (batch × seq) | measured peak GB | perfstack GB | error | llm-analysis GB "
          "| accelerate GB | step measured ms | step bound ms | measured / bound |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, e in data["models"].items():
        m = parse_config(e["config"], name=name)
        t = tools.get(name, {})
        la = {r["grad_ckpt"]: r for r in t.get("llm_analysis", {}).get("train", [])}
        acc = t.get("accelerate", {})
        for r in e.get("train", []):
            if not r.get("ok"):
                continue
            est = train.estimate(m, hw, train.TrainSettings(batch=r["batch"], seq=r["seq"], grad_ckpt=r["grad_ckpt"]))
            pa, meas = est["memory"]["peak_allocated_bytes"], r["peak_allocated_bytes"]
            st = est["time"]["step_time_s"]
            lar = la.get(r["grad_ckpt"])
            label = f"{r['batch']} × {r['seq']}" + (", grad-ckpt" if r["grad_ckpt"] else "")
            print(f"| {name} | {label} | {_gb(meas)} | {_gb(pa)} | {(pa / meas - 1) * 100:+.1f}% | "
                  f"{_gb(lar['memory_bytes']) if lar else '—'} | {_gb(acc.get('training_using_adam_float16_bytes'))} | "
                  f"{r['step_s'] * 1e3:.0f} | {st * 1e3:.1f} | {r['step_s'] / st:.1f}× |")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="where to write the JSON table")
    ap.add_argument("--tools", metavar="TABLE", help="run llm-analysis / accelerate on a saved table's models")
    ap.add_argument("--tools-out", metavar="FILE", help="where --tools writes (merged); read by --table")
    ap.add_argument("--table", metavar="TABLE", help="print the markdown comparison for a saved table")
    ap.add_argument("--dry", action="store_true", help="tiny configs, any device: checks the script")
    ap.add_argument("--models", help="comma-separated subset of the model names")
    ap.add_argument("--reps", type=int, default=2, help="timed repetitions per inference setting (best kept)")
    ap.add_argument("--budget-s", type=float, default=330, help="stop starting new models after this many seconds")
    args = ap.parse_args(argv)
    if args.tools:
        if not args.tools_out:
            ap.error("--tools needs --tools-out")
        return tools_mode(args.tools, args.tools_out)
    if args.table:
        return table_mode(args.table, args.tools_out)
    if not args.out:
        ap.error("--out is required to measure")
    t_start = time.perf_counter()
    import torch
    import transformers

    cuda = torch.cuda.is_available()
    if not cuda and not args.dry:
        print("no CUDA device: use --dry to check the script on CPU", file=sys.stderr)
        return 3
    dev = Device(torch, "cuda" if cuda else "cpu")
    models = DRY_MODELS if args.dry else MODELS
    if args.models:
        models = {k: v for k, v in models.items() if k in args.models.split(",")}
    infer_settings = DRY_INFER if args.dry else INFER_SETTINGS
    train_settings = DRY_TRAIN if args.dry else TRAIN_SETTINGS
    env: dict[str, Any] = {"torch": torch.__version__, "transformers": transformers.__version__,
                           "python": platform.python_version(), "device": dev.name, "dry": args.dry}
    if cuda:
        torch.zeros(1, device="cuda")
        props = torch.cuda.get_device_properties(0)
        env.update(gpu=torch.cuda.get_device_name(0), gpu_memory_bytes=int(props.total_memory),
                   cuda=torch.version.cuda, context_bytes=dev.used() - int(torch.cuda.memory_reserved()))
    try:
        import accelerate

        env["accelerate"] = accelerate.__version__
    except Exception:
        pass
    result: dict[str, Any] = {"script": "benchmarks/estimate_validation.py", "env": env, "models": {}}
    for name, cfg in models.items():
        if time.perf_counter() - t_start > args.budget_s:
            result["models"][name] = {"config": cfg, "skipped": "time budget"}
            continue
        t0 = time.perf_counter()
        entry: dict[str, Any] = {"config": cfg}
        print(f"{name}: inference…", file=sys.stderr, flush=True)
        try:
            entry["infer"], info = measure_infer(transformers, torch, dev, cfg, infer_settings, args.reps)
            entry.update(info)
        except Exception as e:
            entry["infer_error"] = f"{type(e).__name__}: {e}"
            entry["infer"] = []
        entry["train"] = []
        for s in train_settings:
            print(f"{name}: training {s}…", file=sys.stderr, flush=True)
            entry["train"].append(measure_train(transformers, torch, dev, cfg, s, TRAIN_STEPS))
        entry["elapsed_s"] = round(time.perf_counter() - t0, 2)
        result["models"][name] = entry
        with open(args.out, "w", encoding="utf-8") as f:  # partial results survive a timeout
            json.dump(result, f, indent=1)
    result["elapsed_s"] = round(time.perf_counter() - t_start, 2)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out} in {result['elapsed_s']} s", file=sys.stderr)
    for name, e in result["models"].items():  # a compact summary on stdout
        for r in e.get("infer", []):
            print(name, "infer", r.get("batch"), r.get("prompt"), r.get("gen"), r.get("peak_allocated_bytes"),
                  r.get("itl_s"), r.get("error", ""))
        for r in e.get("train", []):
            print(name, "train", r.get("grad_ckpt"), r.get("peak_allocated_bytes"), r.get("step_s"), r.get("error", ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
