"""perfstack loadtest: drive an OpenAI-compatible inference server under load and say why it misses its SLO.

    perfstack loadtest http://127.0.0.1:8000 --concurrency 8 --slo ttft=500ms,itl=50ms
    perfstack loadtest URL --sweep --slo ttft=1s,itl=60ms -o sweep.json --html sweep.html
    perfstack loadtest URL --rate 2,4,8 --burstiness 0.5 --prompts my.jsonl
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from rich.console import Console

from perfstack.extras import install_hint
from perfstack.audit import FAIL_ON, exit_code
from perfstack.cli import output
from perfstack.errors import CannotRunHere, UsageError
from perfstack.loadtest.vocabulary import Mode
from perfstack.model import Run
from perfstack.records.meta import run_meta

if TYPE_CHECKING:
    from perfstack.loadtest.findings import Bound
    from perfstack.loadtest.run import Plan


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("loadtest", parents=[common], help="load-test an OpenAI-compatible inference server",
                       description="Stream completions from an OpenAI-compatible server (vLLM, SGLang, TGI, "
                                   "TensorRT-LLM, llama.cpp, transformers serve) at fixed concurrency or request "
                                   "rate; report TTFT, TPOT, ITL, E2E, throughput and goodput per load level, and "
                                   "why the server misses its SLO.")
    p.add_argument("url", help="the server's base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", help="model name to request (default: the first the server lists)")
    p.add_argument("--api", choices=("chat", "completions", "embeddings"), default="chat",
                   help="/v1/chat/completions (default), /v1/completions, or /v1/embeddings (not streamed: "
                        "latency is the time to the whole answer, throughput requests and input tokens/s)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                   help="environment variable holding the API key (default OPENAI_API_KEY; never printed)")
    load = p.add_argument_group("load")
    mode = load.add_mutually_exclusive_group()
    mode.add_argument("--concurrency", metavar="N[,N...]", help="closed loop: this many streams at once (default 1)")
    mode.add_argument("--rate", metavar="R[,R...]", help="open loop: requests per second ('inf': all at once)")
    load.add_argument("--sweep", action="store_true",
                      help="from light load to saturation: doubling concurrency, or with --rate sweep, fractions "
                           "of the saturated throughput; finds the knee and the highest load meeting --slo")
    load.add_argument("--sweep-max", type=int, default=512, metavar="N", help="highest concurrency a sweep tries")
    load.add_argument("--requests", type=int, default=100, metavar="N",
                      help="measured requests per level (default 100; at least 3 per stream)")
    load.add_argument("--warmup", type=int, default=None, metavar="N",
                      help="requests per level excluded from the figures (default: one per stream, or 5%% of an "
                           "open-loop level)")
    load.add_argument("--burstiness", type=float, default=1.0, metavar="F",
                      help="open loop: gamma shape of the arrival gaps (1: Poisson; < 1: burstier)")
    load.add_argument("--max-concurrency", type=int, default=None, metavar="N", help="open loop: cap in flight")
    load.add_argument("--client-procs", type=int, default=None, metavar="N",
                      help="client processes sharing each level (default: one per 100 streams, up to the usable "
                           "CPUs but one); one event loop reads a burst of chunks one after another")
    load.add_argument("--ramp-up", type=float, default=0.0, metavar="S",
                      help="each level's load climbs over S seconds: the rate from 0 (open loop), or the streams "
                           "start one after another (closed loop)")
    load.add_argument("--repeat", type=int, default=1, metavar="N",
                      help="run every level N times: each figure is the median over the runs, with its interval "
                           "(order statistics: 94%% for 5 runs, 98%% for 10); diff judges on them")
    load.add_argument("--seed", type=int, default=0)
    load.add_argument("--timeout", type=float, default=600.0, metavar="S", help="per request (default 600 s)")
    load.add_argument("--stall-timeout", type=float, default=60.0, metavar="S",
                      help="fail a request after this long without a byte (default 60 s)")
    wl = p.add_argument_group("workload")
    wl.add_argument("--input-len", type=int, default=512, metavar="TOKENS")
    wl.add_argument("--output-len", type=int, default=None, metavar="TOKENS",
                    help="max_tokens (default 128; with --prompts: replaces the file's lengths)")
    wl.add_argument("--spread", type=float, default=0.0, metavar="F",
                    help="lengths uniform in ±F around the given ones (default 0: fixed)")
    wl.add_argument("--shared-prefix", type=int, default=0, metavar="TOKENS",
                    help="a prefix common to every prompt (prefix caching)")
    wl.add_argument("--prompts", metavar="FILE", help="JSONL ({\"prompt\": ..., \"max_tokens\": ...}) or ShareGPT JSON")
    wl.add_argument("--prefixes", type=int, default=1, metavar="K",
                    help="with --shared-prefix: K different shared prefixes, prompt i behind prefix i mod K")
    wl.add_argument("--turns", type=int, default=1, metavar="N",
                    help="multi-turn conversations of N turns: each turn sends the whole history so far")
    wl.add_argument("--trace", metavar="FILE",
                    help="replay a timed trace: mooncake-style JSONL (timestamp ms, input_length, output_length, "
                         "hash_ids) or BurstGPT-style columns (CSV or JSONL: Timestamp s, Request tokens, Response "
                         "tokens)")
    wl.add_argument("--trace-speed", metavar="F[,F...]", default=None,
                    help="replay the trace F times faster (default 1); several speeds make several levels")
    wl.add_argument("--trace-block", type=int, default=512, metavar="TOKENS",
                    help="tokens per hash id of a mooncake-style trace (default 512)")
    wl.add_argument("--tokenizer", metavar="NAME|PATH", help="count tokens with this tokenizer (needs transformers)")
    wl.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                    help="let the model stop early (default: ask for exactly max_tokens where the server allows)")
    why = p.add_argument_group("judging")
    why.add_argument("--slo", metavar="SPEC", help="e.g. ttft=500ms,itl=50ms,e2e=20s (itl is judged per request, "
                                                   "as its mean time per output token)")
    why.add_argument("--slo-attainment", type=float, default=0.9, metavar="F",
                     help="share of requests that must meet the SLO (default 0.9)")
    why.add_argument("--model-config", metavar="NAME|PATH",
                     help="the served model's config.json or a built-in name, with --gpu: compare decode with what "
                          "an engine-grade decode of it takes (perfstack estimate infer)")
    why.add_argument("--gpu", metavar="NAME", help="the server's GPU from the spec table (e.g. h100-sxm)")
    why.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs the server uses (for the bound)")
    output.add_arguments(p)
    p.add_argument("--csv", metavar="STEM", help="also write STEM.levels.csv (one row per level) and "
                                                 "STEM.requests.csv (one row per request)")
    p.add_argument("--fail-on", choices=FAIL_ON, default="never", help="exit 1 on findings at or above this")
    p.set_defaults(func=run)


def _loads(text: Optional[str], what: str) -> list[float]:
    out = []
    for part in (text or "").split(","):
        part = part.strip().lower()
        if not part:
            continue
        try:
            v = math.inf if part in ("inf", "max") else float(part)
        except ValueError:
            raise UsageError(f"--{what} {text}: {part!r} is not a number") from None
        if not v > 0 or (what == "concurrency" and (math.isinf(v) or v != int(v))):
            raise UsageError(f"--{what} {text}: {part!r} must be a positive {'integer' if what == 'concurrency' else 'number'}")
        out.append(v)
    return out


def _check(args: argparse.Namespace) -> None:
    for name in ("requests", "sweep_max", "repeat"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("timeout", "stall_timeout", "burstiness"):
        v = getattr(args, name)
        if not (math.isfinite(v) and v > 0):
            raise UsageError(f"--{name.replace('_', '-')} must be a positive number")
    if args.warmup is not None and args.warmup < 0:
        raise UsageError("--warmup must be 0 or more")
    if args.client_procs is not None and args.client_procs < 1:
        raise UsageError("--client-procs must be at least 1")
    if args.max_concurrency is not None and args.max_concurrency < 1:
        raise UsageError("--max-concurrency must be at least 1")
    if not 0 < args.slo_attainment <= 1:
        raise UsageError("--slo-attainment must be in (0, 1]")
    _check_workload(args)
    if bool(args.model_config) != bool(args.gpu):
        raise UsageError("--model-config and --gpu go together (the decode bound needs both)")


def _check_workload(args: argparse.Namespace) -> None:
    if not (math.isfinite(args.ramp_up) and args.ramp_up >= 0):
        raise UsageError("--ramp-up must be 0 or more seconds")
    if args.prefixes < 1 or args.turns < 1:
        raise UsageError("--prefixes and --turns must be at least 1")
    if args.trace and (args.prompts or args.sweep or args.rate or args.concurrency or args.turns > 1):
        raise UsageError("--trace sets the arrivals and lengths itself: leave out --prompts, --sweep, --rate, "
                         "--concurrency and --turns", hint="replay faster with --trace-speed 2")
    if args.trace_speed and not args.trace:
        raise UsageError("--trace-speed goes with --trace")
    if args.api == "embeddings" and args.turns > 1:
        raise UsageError("--turns makes conversations; an embeddings request has none")
    if args.turns > 1 and args.prompts:
        raise UsageError("--turns makes synthetic conversations; a prompt file's turns are not replayed")


def _bound(args: argparse.Namespace) -> Bound | None:
    if not args.model_config:
        return None
    from perfstack.estimate import catalog, hardware, infer
    from perfstack.estimate.config import load_config
    from perfstack.loadtest.findings import Bound

    path = Path(args.model_config)
    spec = load_config(path) if path.suffix == ".json" or "/" in args.model_config or path.exists() \
        else catalog.get(args.model_config)
    hw = hardware.resolve(args.gpu, "bf16")

    def itl_ms(batch: int, prompt: int, gen: int) -> float:
        est = infer.estimate(spec, hw, infer.InferSettings(batch=batch, prompt=prompt, gen=gen, tp=args.tp))
        return float((est.time or {})["itl_expected_s"] or 0.0) * 1e3  # as estimate infer --launch graph

    return Bound(itl_ms=itl_ms, what=f"{spec.name} bf16 on {hw.spec.name} ({hw.hbm_bw / 1e12:.2f} TB/s"
                                     + (f", TP {args.tp}" if args.tp > 1 else "") + ")")


def _csv_paths(stem: Optional[str]) -> list[str]:
    if not stem:
        return []
    from perfstack.report.loadtest_csv import paths
    return list(paths(stem))


def build_plan(args: argparse.Namespace) -> Plan:
    from perfstack.loadtest.metrics import parse_slo
    from perfstack.loadtest.run import Plan

    mode: Mode = "trace" if args.trace else "rate" if args.rate else "concurrency"
    loads = (_loads(args.trace_speed or "1", "trace-speed") if args.trace else
             _loads(args.rate, "rate") if args.rate else _loads(args.concurrency or "1", "concurrency"))
    return Plan(url=args.url, api=args.api, model=args.model, mode=mode, loads=loads, sweep=args.sweep,
                sweep_max=args.sweep_max, requests=args.requests, warmup=args.warmup, burstiness=args.burstiness,
                max_concurrency=args.max_concurrency, seed=args.seed,
                slo=parse_slo(args.slo, args.slo_attainment) if args.slo else None, ignore_eos=args.ignore_eos,
                timeout_s=args.timeout, stall_s=args.stall_timeout, api_key_env=args.api_key_env,
                client_procs=args.client_procs, repeat=args.repeat, ramp_s=args.ramp_up)


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    try:
        import aiohttp  # noqa: F401
        from perfstack.loadtest import findings, workload
        from perfstack.loadtest import run as lrun
    except ImportError as e:
        raise CannotRunHere(f"perfstack loadtest needs the loadtest extra ({e.name} is missing)",
                            hint=install_hint("loadtest")) from None
    _check(args)
    if args.sweep and args.rate and len(_loads(args.rate, "rate")) > 1:
        raise UsageError("--sweep chooses the rates itself: give --rate without a list, or leave --sweep out")
    plan = build_plan(args)
    bound = _bound(args)
    csv_paths = _csv_paths(args.csv)
    output.check_paths(args.output, args.html, *csv_paths)
    tok = workload.load_tokenizer(args.tokenizer)
    if args.trace:
        from perfstack.loadtest import trace
        wl, notes = trace.load(args.trace, args.trace_block, args.seed, tok)
        plan.arrivals = wl.arrivals
    elif args.prompts:
        wl, notes = workload.from_file(args.prompts, args.output_len, args.seed, tok)
    else:
        # a conversation's next turn comes twice the heaviest level's streams after its last: answered by then,
        # as no more requests are in flight (an open loop has no such bound: 64 conversations at a time)
        streams = max([plan.sweep_max if plan.sweep else 0] + [x for x in plan.loads if not math.isinf(x)] + [1])
        wl, notes = workload.synthetic(args.input_len, args.output_len or 128, args.spread, args.shared_prefix,
                                       args.seed, tok, prefixes=args.prefixes, turns=args.turns,
                                       conversations=2 * int(streams) if plan.mode == "concurrency" else 64), []
    t0 = time.perf_counter()
    lt = lrun.run(plan, wl, lambda m: err.print(m, markup=False, highlight=False))
    lt.notes[:0] = notes
    result = Run(meta=run_meta("loadtest", source=lt.url, elapsed_s=round(time.perf_counter() - t0, 3)),
                 findings=findings.findings(lt, bound))
    result.loadtest = lt
    from perfstack.report.loadtest_text import render_loadtest
    from perfstack.report.loadtest_view import view_of
    from perfstack.report import loadtest_csv
    # the Run is scrubbed of credentials as it is written: what every output shows is the scrubbed section
    extra = [(csv_paths[0], lambda: loadtest_csv.levels_csv(result.loadtest or lt), "wrote the levels as CSV to"),
             (csv_paths[1], lambda: loadtest_csv.requests_csv(result.loadtest or lt), "wrote the requests as CSV to")
             ] if csv_paths else []
    output.emit_run(result, args, out, err, lambda: render_loadtest(view_of(result.loadtest or lt, result), out,
                                                                    verbose=args.verbose > 0), extra=extra)
    unfinished = [i + 1 for i, lv in enumerate(lt.levels) if lv.stopped]
    if unfinished:
        err.print(f"perfstack: error: level {unfinished[0]} did not finish (a fault of the client; see the notes); "
                  "the partial load test is above" + (f" and in {args.output}" if args.output else ""), markup=False)
        return 4
    if lt.interrupted:
        err.print("perfstack: interrupted: the partial load test is above" + (f" and in {args.output}" if args.output else ""),
                  markup=False)
        return 130
    return exit_code(result, args.fail_on)

