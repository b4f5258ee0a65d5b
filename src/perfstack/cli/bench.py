"""perfstack bench: what this machine really delivers, as a fraction of the SKU's peak."""

from __future__ import annotations

import argparse
from typing import Callable

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from perfstack import bench as benches
from perfstack.audit import FAIL_ON, audit, exit_code
from perfstack.bench.collectives import parse_sizes
from perfstack.bench.storage import files_to_read
from perfstack.cli import output
from perfstack.errors import CannotRunHere, UsageError
from perfstack.host.live import LiveHost
from perfstack.model import Facts, Measurement
from perfstack.report.bench_text import render_bench
from perfstack.report.views import build
from perfstack.rules import select_checks
from perfstack.rules.measured import MEASURED


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("bench", parents=[common], help="microbenchmarks against the SKU's physical peak",
                       description="Measure GEMM per dtype, HBM, host<->device copies, launch overhead, "
                                   "GPU<->GPU copies, collectives, host memory and storage.")
    p.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: the suite)")
    p.add_argument("--suite", choices=benches.SUITES, default="quick", help="quick (default, about a minute) or full")
    p.add_argument("--path", dest="storage_path", metavar="PATH", help="file or directory for the storage benchmark")
    p.add_argument("--device", type=int, default=0, help="CUDA device index (default 0)")
    p.add_argument("--sizes", metavar="LIST", help="collectives: message sizes, e.g. 1K,64M,1G (default: the suite's)")
    p.add_argument("--no-graph", dest="graph", action="store_false",
                   help="collectives: issue each batch eagerly instead of replaying it from a CUDA graph")
    p.add_argument("--via", choices=("nccl", "torch"), default="nccl",
                   help="collectives: call NCCL directly as nccl-tests does (default), or through "
                        "torch.distributed, which adds its own per-call work (what a training loop pays)")
    output.add_arguments(p)
    p.add_argument("--fail-on", choices=FAIL_ON, default="never", help="exit 1 on findings at or above this")
    p.set_defaults(func=run)


def bench_fn(args: argparse.Namespace, err: Console, suite: str, names: list[str],
             storage_path: str | None) -> Callable[[Facts], list[Measurement]]:
    """A function of the doctor's facts that runs the benchmarks with a progress line on stderr."""
    chosen = benches.select(names, suite, storage_path)
    run_suite = benches.suite_named(suite)
    options = {"graph": getattr(args, "graph", True), "via": getattr(args, "via", "nccl")}
    if getattr(args, "sizes", None):
        try:
            options["sizes"] = parse_sizes(args.sizes)
        except ValueError as e:
            raise UsageError(f"--sizes: {e}", hint="perfstack bench collectives --sizes 1K,1M,64M,1G") from None
    if storage_path:
        files_to_read(storage_path)  # fail before the other benchmarks spend a minute, not after

    def run_benches(facts: Facts) -> list[Measurement]:
        show = err.is_terminal and not args.quiet
        verbose: int = getattr(args, "verbose", 0)
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=err,
                      transient=True, disable=not show) as progress:
            task = progress.add_task("benchmarks", total=len(chosen))

            def step(name: str) -> None:
                progress.update(task, description=f"bench {name}", advance=1)
                if not show and verbose:
                    err.print(f"bench {name}…")

            ctx = benches.BenchContext(suite=run_suite, facts=facts, device=getattr(args, "device", 0),
                                       storage_path=storage_path, progress=step, options=options)
            return benches.run(chosen, ctx)

    return run_benches


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    output.check_paths(args.output, args.html)
    fn = bench_fn(args, err, args.suite, args.names, args.storage_path)
    result = audit(LiveHost(), select_checks(list(MEASURED)), "live machine", bench=fn, command="bench")
    output.emit_run(result, args, out, err, lambda: render_bench(build(result), out, verbose=args.verbose > 0))
    if not any(m.status == "ok" for m in result.measurements):
        reasons = list(dict.fromkeys(m.reason for m in result.measurements if m.reason))
        raise CannotRunHere("nothing could be measured here" + (f": {'; '.join(reasons)}" if reasons else ""),
                            hint="run 'perfstack bench host' for the host benchmarks, or run on the GPU machine")
    return exit_code(result, args.fail_on)
