"""perfstack profile: analyse torch.profiler traces, or run a script under the profiler, and rank
what a fix would recover per step."""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from perfstack.audit import FAIL_ON, exit_code
from perfstack.cli import output
from perfstack.errors import CannotRunHere, UsageError
from perfstack.report.profile_text import render_profile
from perfstack.report.views import build

if TYPE_CHECKING:
    from perfstack.profile.capture import CaptureResult


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("profile", parents=[common], help="analyse a torch.profiler trace or profile a script",
                       description="Read Kineto traces (--trace FILE...; one per rank) or run "
                                   "'perfstack profile -- python train.py ARGS' under the profiler; print the per-step "
                                   "breakdown and findings ranked by the time a fix would recover.")
    p.add_argument("--trace", nargs="+", metavar="FILE", help="Kineto Chrome trace(s), .json or .json.gz")
    p.add_argument("--steps", type=int, default=3, help="capture mode: profiled steps (default 3)")
    p.add_argument("--skip-first", type=int, default=None, metavar="N",
                   help="capture mode: steps to let pass before profiling (a step ends at an optimizer's step(), "
                        "or at each perfstack.step() in a loop without one); up to 5 of them (the last "
                        "ones, never the first) are timed without the profiler (default: 2 untimed warm-up steps, "
                        "then 5 timed ones, fewer once they have taken 5 s)")
    p.add_argument("--window", type=int, default=None, metavar="SECONDS",
                   help="capture mode, for scripts with neither an optimizer's step() nor perfstack.step(): record "
                        "this many seconds from the script's import of torch")
    p.add_argument("--stop-after-window", action="store_true",
                   help="capture mode: end the script once the profiled steps are recorded and up to 5 more "
                        "are timed without the profiler")
    p.add_argument("--nproc", type=int, default=1, metavar="N",
                   help="capture mode: run the script on N local ranks, as torchrun --standalone "
                        "--nproc-per-node N would; each rank writes its own trace (default 1)")
    p.add_argument("--out-dir", metavar="DIR", help="capture mode: where traces are written (default: a temp dir)")
    p.add_argument("--model-flops-per-step", type=float, metavar="FLOPS", help="model FLOPs per step, for MFU")
    p.add_argument("--step-ms", metavar="MS",
                   help="the step time measured without the profiler, in milliseconds (e.g. from your training "
                        "log), so that the figures are corrected for the profiler's overhead; capture mode measures "
                        "it around the profiled window (this value replaces that measurement)")
    output.add_arguments(p)
    p.add_argument("--fail-on", choices=FAIL_ON, default="never", help="exit 1 on findings at or above this")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- python train.py ARGS (capture mode)")
    p.set_defaults(func=run)


def _command(args: argparse.Namespace) -> list[str]:
    """The user's command after '--'; later '--' belong to the script's own arguments."""
    cmd = list(args.cmd or [])
    return cmd[1:] if cmd[:1] == ["--"] else cmd


def _capture(args: argparse.Namespace, err: Console) -> CaptureResult:
    cmd = _command(args)
    try:
        from perfstack.profile import capture, interrupt
        # held from before the temporary folder exists until it is removed: a Ctrl-C never comes between
        # its making and its clean-up knowing it (which would leave it behind, empty)
        with interrupt.ctrl_c_held():
            made = None if args.out_dir else Path(tempfile.mkdtemp(prefix="perfstack-profile-"))
            try:
                out_dir = made or Path(args.out_dir)
                err.print(f"profiling {' '.join(cmd)} → {out_dir}", markup=False)
                plan = capture.Plan(steps=args.steps, window=args.window, skip_first=args.skip_first,
                                    stop_after_window=args.stop_after_window)
                return capture.run(cmd, out_dir, plan, nproc=args.nproc)
            finally:
                if made is not None:  # the temporary folder stays only when it holds the traces
                    try:
                        made.rmdir()
                    except OSError:
                        pass
    except ImportError as e:  # a perfstack whose capture cannot load on this platform
        raise CannotRunHere(f"capture mode is not available here ({type(e).__name__}: {e})",
                            hint="record a trace with torch.profiler and run 'perfstack profile --trace FILE'") from None


def _step_ms(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        ms = float(value)
    except ValueError:
        ms = math.nan
    if not (math.isfinite(ms) and ms > 0):
        raise UsageError(f"--step-ms {value}: must be a finite number of milliseconds greater than 0",
                         hint="give the step time measured without the profiler, e.g. --step-ms 4.25")
    return ms


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    from perfstack.profile.summary import profile_run

    cmd = _command(args)
    if args.trace and cmd:
        raise UsageError("give either --trace FILE... or a command after --, not both")
    if not args.trace and not cmd:
        raise UsageError("nothing to profile", hint="perfstack profile --trace FILE [FILE...]   or   "
                                                    "perfstack profile -- python train.py ARGS")
    if args.steps < 1:
        raise UsageError(f"--steps {args.steps}: must be at least 1")
    if args.skip_first is not None and args.skip_first < 0:
        raise UsageError(f"--skip-first {args.skip_first}: must be 0 or more")
    step_ms = _step_ms(args.step_ms)
    if args.model_flops_per_step is not None and args.model_flops_per_step <= 0:
        raise UsageError(f"--model-flops-per-step {args.model_flops_per_step:g}: must be positive")
    output.check_paths(args.output, args.html)
    telemetry = unprofiled = None
    note = "given with --step-ms" if step_ms is not None else None
    if cmd:
        res = _capture(args, err)
        if not res.trace_paths:
            raise CannotRunHere(f"the command exited {res.returncode} without writing a trace")
        paths, telemetry, unprofiled = res.trace_paths, res.telemetry, res.unprofiled
        from perfstack.profile.capture import overhead_line, unprofiled_note
        line = overhead_line(unprofiled)
        if line:
            err.print(line)
        if unprofiled and step_ms is None:
            step_ms, note = unprofiled["step_ms"], unprofiled_note(unprofiled, "capture mode")
    else:
        paths = args.trace
    result = profile_run(paths, model_flops_per_step=args.model_flops_per_step, telemetry=telemetry,
                         unprofiled_step_ms=step_ms, unprofiled_note=note)
    if unprofiled and result.profile is not None:
        result.profile.unprofiled = unprofiled
    for w in result.meta.warnings or []:
        err.print(f"perfstack: warning: {w}", markup=False)
    output.emit_run(result, args, out, err, lambda: render_profile(build(result), out, verbose=args.verbose > 0))
    if cmd and res.interrupted:  # the steps traced before Ctrl-C are reported; the exit says it was cut short
        err.print("perfstack: interrupted: the report covers what was traced before Ctrl-C")
        return 130
    return exit_code(result, args.fail_on)
