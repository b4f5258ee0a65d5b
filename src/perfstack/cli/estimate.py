"""perfstack estimate: what a model needs to serve or train, closed-form, with the working shown.

    perfstack estimate infer --model llama-3-8b --batch 8 --prompt 2048 --gen 256 --gpu h100-sxm
    perfstack estimate train --model path/to/config.json --batch 4 --seq 4096 --zero 3 --dp 8
    perfstack estimate models
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from perfstack.cli import output
from perfstack.errors import UsageError
from perfstack.estimate import catalog, hardware, infer, train
from perfstack.estimate.config import ModelSpec, load_config, parse_config
from perfstack.model import Run
from perfstack.records.meta import run_meta
from perfstack.report.estimate_text import render_estimate, render_models
from perfstack.report.views import build

# explicit shape flags -> config.json field names (a llama-style decoder unless --model-type says otherwise)
SHAPE_FLAGS = {"layers": "num_hidden_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
               "kv_heads": "num_key_value_heads", "head_dim": "head_dim", "ffn": "intermediate_size",
               "vocab": "vocab_size", "max_seq_len": "max_position_embeddings"}


# default lengths, shortened to the model's context where it is shorter (fit_defaults)
PROMPT, GEN, SEQ = 1024, 128, 2048


def _model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model (a config.json, a built-in name, or explicit shape flags)")
    g.add_argument("--model", "-m", metavar="NAME|PATH",
                   help="config.json, a directory holding one, or a built-in name (perfstack estimate models)")
    g.add_argument("--model-type", default=None, help="model_type for explicit flags (default llama)")
    for flag, field in SHAPE_FLAGS.items():
        g.add_argument("--" + flag.replace("_", "-"), dest=flag, type=int, metavar="N", help=f"override {field}")
    g.add_argument("--tied", action="store_true", default=None, help="tied input/output embeddings")
    p.add_argument("--gpu", metavar="NAME", help="GPU from the spec table (default h100-sxm)")
    p.add_argument("--calibrate", metavar="RUN.json",
                   help="use measured TFLOP/s and bandwidth from a 'perfstack bench' Run instead of spec peaks")
    output.add_arguments(p)


def _positive(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("estimate", parents=[common], help="memory, latency and throughput a model needs",
                       description="Closed-form memory / FLOPs / latency / communication estimates, each number "
                                   "with its formula, inputs and assumptions.")
    esub = p.add_subparsers(dest="estimate_command", metavar="KIND")
    pi = esub.add_parser("infer", parents=[common], help="serving: weights, KV cache, fit, TTFT/ITL bounds")
    _model_args(pi)
    pi.add_argument("--batch", type=_positive, default=1, help="concurrent sequences (default 1)")
    pi.add_argument("--prompt", type=_positive, default=None,
                    help=f"prompt tokens (default {PROMPT}, less where the model's context is shorter)")
    pi.add_argument("--gen", type=_positive, default=None, help=f"generated tokens (default {GEN})")
    pi.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16", help="weights and activations")
    pi.add_argument("--weights", choices=("int8", "int4", "fp8"), help="quantized weights (block matrices)")
    pi.add_argument("--kv-dtype", choices=("fp8", "bf16", "fp16", "fp32"), help="KV cache dtype (default --dtype)")
    pi.add_argument("--tp", type=_positive, default=1, help="tensor-parallel GPUs")
    pi.add_argument("--prefill-chunk", type=_positive, help="tokens per prefill chunk (default: the whole prompt)")
    pi.add_argument("--mfu", type=float, default=infer.MFU_PREFILL,
                    help=f"MFU of the prefill's GEMMs for the expected TTFT (default {infer.MFU_PREFILL:g})")
    pi.add_argument("--mbu", type=float, default=infer.MBU_DECODE,
                    help=f"share of the HBM peak a decode's weight reads stream at (default {infer.MBU_DECODE:g}); "
                         "each kernel's fixed cost is counted apart")
    pi.add_argument("--launch", choices=("graph", "eager"), default="graph",
                    help="kernels replayed from CUDA graphs, as serving engines do (default), or launched from "
                         "Python each step (the host's cost per kernel can then bound the step)")
    pi.set_defaults(func=run)
    pt = esub.add_parser("train", parents=[common], help="training: per-GPU memory, step-time bound, comms")
    _model_args(pt)
    pt.add_argument("--batch", type=_positive, default=1, help="micro-batch per GPU, sequences (default 1)")
    pt.add_argument("--seq", type=_positive, default=None,
                    help=f"sequence length (default {SEQ}, or the model's context where that is shorter)")
    pt.add_argument("--precision", choices=train.PRECISIONS, default="bf16-mixed",
                    help="fp32, bf16-mixed (fp32 params + autocast, default) or bf16 (bf16 params + fp32 master)")
    pt.add_argument("--optimizer", choices=train.OPTIMIZERS, default="adamw")
    pt.add_argument("--grad-ckpt", action="store_true", help="activation checkpointing of every layer")
    z = pt.add_mutually_exclusive_group()
    z.add_argument("--zero", type=int, default=0, help="ZeRO stage 0-3 over the DP group")
    z.add_argument("--fsdp", action="store_true", help="FSDP FULL_SHARD (= ZeRO-3)")
    pt.add_argument("--dp", type=_positive, default=1, help="data-parallel GPUs")
    pt.add_argument("--tp", type=_positive, default=1, help="tensor-parallel GPUs")
    pt.add_argument("--pp", type=_positive, default=1, help="pipeline stages")
    pt.add_argument("--micro-batches", type=_positive, default=1, help="micro-batches per step (accumulation)")
    pt.add_argument("--mfu", type=float, default=train.MFU_TRAIN, help="MFU for the expected step time (0.4)")
    pt.set_defaults(func=run)
    pm = esub.add_parser("models", parents=[common], help="list the built-in model configs")
    pm.set_defaults(func=run_models)

    def usage(args: argparse.Namespace, out: Console, err: Console) -> int:
        """``perfstack estimate`` without a subcommand: its help, as a usage error."""
        p.print_help()
        return 2
    p.set_defaults(func=usage)


def model_from_args(args: argparse.Namespace) -> ModelSpec:
    shape = {SHAPE_FLAGS[k]: getattr(args, k) for k in SHAPE_FLAGS if getattr(args, k, None) is not None}
    if args.tied is not None:
        shape["tie_word_embeddings"] = True
    if args.model:
        path = Path(args.model)
        looks_like_path = path.suffix == ".json" or "/" in args.model or path.exists()
        if looks_like_path:
            spec = load_config(path)
        else:
            spec = catalog.get(args.model)
        return _spec_overrides(spec, shape) if shape else spec
    missing = [f"--{k.replace('_', '-')}" for k in ("layers", "hidden", "heads", "ffn", "vocab")
               if getattr(args, k, None) is None]
    if missing:
        raise UsageError("no model given",
                         hint=f"pass --model NAME|config.json, or the shape: missing {' '.join(missing)}")
    cfg: dict[str, Any] = {"model_type": args.model_type or "llama", **shape}
    return parse_config(cfg, name="custom", where="command-line flags")


def _spec_overrides(spec: ModelSpec, shape: dict[str, Any]) -> ModelSpec:
    names = {"num_hidden_layers": "n_layers", "hidden_size": "d_model", "num_attention_heads": "n_heads",
             "num_key_value_heads": "n_kv_heads", "head_dim": "head_dim", "intermediate_size": "d_ff",
             "vocab_size": "vocab_size", "max_position_embeddings": "max_seq_len",
             "tie_word_embeddings": "tied_embeddings"}
    for k, v in shape.items():
        if isinstance(v, int) and not isinstance(v, bool) and v <= 0:
            raise UsageError(f"--{k} must be a positive integer, got {v}")
    return spec.with_overrides(**{names[k]: v for k, v in shape.items()})


def fit_defaults(args: argparse.Namespace, spec: ModelSpec) -> None:
    """Lengths the user did not give: the defaults, shortened to the model's context (gpt2's is
    1,024 tokens, less than the default prompt plus generation); given values are checked as given."""
    ctx = spec.max_seq_len
    if args.estimate_command == "infer":
        if args.gen is None:
            args.gen = GEN if not ctx or args.prompt is None or args.prompt + GEN <= ctx else max(1, ctx - args.prompt)
        if args.prompt is None:
            args.prompt = PROMPT if not ctx else max(1, min(PROMPT, ctx - args.gen))
    elif args.seq is None:
        args.seq = SEQ if not ctx else min(SEQ, ctx)


def build_run(args: argparse.Namespace) -> Run:
    t0 = time.perf_counter()
    spec = model_from_args(args)
    fit_defaults(args, spec)
    if args.estimate_command == "infer":
        compute = "fp8" if args.weights == "fp8" else args.dtype
        hw = hardware.resolve(args.gpu, compute, args.calibrate)
        serving = infer.InferSettings(batch=args.batch, prompt=args.prompt, gen=args.gen, dtype=args.dtype,
                                      weights=args.weights, kv_dtype=args.kv_dtype, tp=args.tp,
                                      prefill_chunk=args.prefill_chunk, mfu=args.mfu, mbu=args.mbu,
                                      launch=args.launch)
        est = infer.estimate(spec, hw, serving)
    else:
        hw = hardware.resolve(args.gpu, "fp32" if args.precision == "fp32" else "bf16", args.calibrate)
        training = train.TrainSettings(batch=args.batch, seq=args.seq, precision=args.precision,
                                       optimizer=args.optimizer, grad_ckpt=args.grad_ckpt,
                                       zero=3 if args.fsdp else args.zero, dp=args.dp, tp=args.tp, pp=args.pp,
                                       micro_batches=args.micro_batches, mfu=args.mfu)
        est = train.estimate(spec, hw, training)
    meta = run_meta("estimate", subcommand=args.estimate_command, source=spec.source,
                    calibrated_from=str(args.calibrate) if args.calibrate else None,
                    elapsed_s=round(time.perf_counter() - t0, 3))
    return Run(meta=meta, estimates=est)


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    output.check_paths(args.output, args.html)
    result = build_run(args)
    output.emit_run(result, args, out, err, lambda: render_estimate(build(result), out, verbose=args.verbose > 0))
    return 0


def run_models(args: argparse.Namespace, out: Console, err: Console) -> int:
    render_models(out)
    return 0
