"""perfstack try: apply each fix to the user's own script and measure it without the profiler."""

from __future__ import annotations

import argparse
import os
import shlex
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from rich.console import Console
from rich.table import Table

from perfstack.cli import output
from perfstack.errors import CannotRunHere, InputError, UsageError
from perfstack.model import Run
from perfstack.records.meta import run_meta

if TYPE_CHECKING:
    from perfstack.trial.fixes import Fix, Setting
    from perfstack.records.trial import Trial
    from perfstack.trial.runner import Plan


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("try", parents=[common], help="apply each fix to your script and measure it",
                       description="Run 'perfstack try -- python train.py ARGS': the script unmodified and once per "
                                   "fix, each in a fresh process, rounds alternating, timed without the profiler; "
                                   "the fixes are applied from outside (environment, or patched at import). "
                                   "Fixes come from --fix, from a profile Run (--from), or from a short profile "
                                   "run first.")
    p.add_argument("--fix", metavar="ID,...", help="the fixes to try (perfstack try --list shows them)")
    p.add_argument("--all", action="store_true", help="try every fix that applies here and needs no opt-in")
    p.add_argument("--from", dest="from_run", metavar="RUN.json",
                   help="a 'perfstack profile' Run: its findings choose the fixes and give the predicted gains")
    p.add_argument("--list", action="store_true", help="list every fix, whether it applies and why, and exit")
    p.add_argument("--nproc", type=int, default=1, metavar="N", help="processes per run, started as torchrun would")
    p.add_argument("--warmup", type=int, default=5, metavar="N",
                   help="steps left out of the timing (compilation, autotuning, allocator growth; default 5)")
    p.add_argument("--steps", type=int, default=20, metavar="N",
                   help="steps timed per run; the script is ended after them (default 20)")
    p.add_argument("--rounds", type=int, default=3, metavar="N", help="alternating rounds (default 3)")
    p.add_argument("--budget", type=float, metavar="SECONDS", help="bound the whole trial")
    p.add_argument("--step-at", metavar="MODULE:FUNCTION",
                   help="for scripts no optimizer steps: each return of this function is a step "
                        "(or call perfstack.step() in the script)")
    p.add_argument("--no-combine", action="store_true", help="do not try the fixes that worked together")
    p.add_argument("--apply-best", action="store_true",
                   help="after the report, print the changes that make the best fixes permanent (nothing is written)")
    output.add_arguments(p)
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- python train.py ARGS")
    p.set_defaults(func=run)


def _command(args: argparse.Namespace) -> list[str]:
    cmd = list(args.cmd or [])
    return cmd[1:] if cmd[:1] == ["--"] else cmd


def _check(args: argparse.Namespace) -> None:
    for name, low in (("nproc", 1), ("warmup", 1), ("steps", 2), ("rounds", 1)):
        v = getattr(args, name)
        if v < low:
            raise UsageError(f"--{name} {v}: must be at least {low}")
    if args.budget is not None and not args.budget > 0:
        raise UsageError(f"--budget {args.budget:g}: must be a positive number of seconds")
    if args.step_at is not None and (":" not in args.step_at or not all(args.step_at.partition(":")[::2])):
        raise UsageError(f"--step-at {args.step_at}: expected MODULE:FUNCTION (e.g. mypkg.infer:decode_step)")


Predicted = tuple[dict[str, float], dict[str, float]]  # finding id -> %, and fix id -> % replayed whole


def _findings_of(path: str) -> Predicted:
    """The profile findings of a saved Run, as finding id → recoverable %, and the fixes the profile replayed as a
    whole, as fix id → recoverable % (hostile input: checked on load)."""
    run = Run.load(path)
    if run.profile is None:
        raise InputError(f"{path} is not a 'perfstack profile' Run (it has no profile section)",
                         hint="perfstack profile -o profile.json -- python train.py ARGS")
    return _predicted(run)


def _predicted(run: Run) -> Predicted:
    from perfstack.trial.fixes import replayed_fixes
    whatif = run.profile.whatif if run.profile is not None else {}
    return {f.id: float(f.recoverable_pct or 0.0) for f in run.findings}, replayed_fixes(whatif)


def _profile_first(cmd: list[str], err: Console) -> Predicted:
    """A short profile of the script (3 steps, then it is ended), for the findings that choose the fixes."""
    from perfstack.profile import capture
    from perfstack.profile.summary import profile_run
    err.print("no --fix or --from: profiling the script first to choose the fixes")
    with tempfile.TemporaryDirectory(prefix="perfstack-try-profile-") as d:
        res = capture.run(cmd, Path(d), capture.Plan(steps=3, stop_after_window=True))
        u = res.unprofiled
        result = profile_run(res.trace_paths, telemetry=res.telemetry,
                             unprofiled_step_ms=u["step_ms"] if u else None,
                             unprofiled_note=capture.unprofiled_note(u, "capture mode") if u else None)
    return _predicted(result)


def _list(out: Console, predicted: Optional[dict[str, float]], replayed: dict[str, float], nproc: int) -> int:
    from perfstack.trial.fixes import FIXES, predicted_for
    from perfstack.trial.runner import setting
    s = setting(dict(os.environ), nproc, frozenset(predicted) if predicted is not None else None)
    t = Table(show_edge=False, pad_edge=False, header_style="bold")
    for h in ("fix", "how", "applies here", "opt-in", "numerics", "predicted by"):
        t.add_column(h, overflow="fold")
    for f in FIXES.values():
        why = f.applies(s)
        pred = ""
        if predicted is not None:
            pct, by = predicted_for(f, predicted, replayed)
            pred = f"{pct:.0f}% ({', '.join(by)})" if pct is not None else "no finding of this profile"
        t.add_row(f.id, f.how, "yes" if why is None else f"no: {why}", "yes" if f.opt_in else "",
                  "changes them" if f.changes_numerics else "", pred or ", ".join(f.predicted_by))
    out.print(t)
    return 0


def _choose(args: argparse.Namespace, predicted: dict[str, float], s: Setting, err: Console) -> list[Fix]:
    from perfstack.trial.fixes import FIXES, parse
    if args.fix:
        chosen = parse(args.fix)
    elif args.all:
        chosen = [f for f in FIXES.values() if not f.opt_in]
    else:
        chosen = [f for f in FIXES.values() if not f.opt_in and set(f.predicted_by) & set(predicted)]
        opt = [f.id for f in FIXES.values() if f.opt_in and set(f.predicted_by) & set(predicted)]
        if opt:
            err.print(f"the profile also points at {', '.join(opt)} (opt-in: name them with --fix to try them)")
    out: list[Fix] = []
    for f in chosen:
        why = f.applies(s)
        if why is None:
            out.append(f)
        else:
            err.print(f"skipping {f.id}: {why}", markup=False)
    return out


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    from perfstack.profile.capture import parse_argv
    from perfstack.report.try_text import render_try
    from perfstack.report.try_view import try_view
    from perfstack.trial import runner

    _check(args)
    predicted: Optional[dict[str, float]] = None
    replayed: dict[str, float] = {}
    if args.from_run:
        predicted, replayed = _findings_of(args.from_run)
    if args.list:
        return _list(out, predicted, replayed, args.nproc)
    cmd = _command(args)
    if not cmd:
        raise UsageError("nothing to try", hint="perfstack try [--fix ID,...] -- python train.py ARGS")
    target = parse_argv(cmd)
    output.check_paths(args.output, args.html)
    if predicted is None and not args.fix and not args.all:
        if args.nproc > 1:
            raise UsageError("with --nproc, name the fixes (--fix ID,... or --all) or give a profile (--from)",
                             hint="a multi-process script cannot be profiled first here")
        predicted, replayed = _profile_first(cmd, err)
    s = runner.setting(dict(os.environ), args.nproc, frozenset(predicted or {}))
    fixes = _choose(args, predicted or {}, s, err)
    if not fixes:
        raise CannotRunHere("no fix to try: " + ("the profile found nothing perfstack can apply from outside"
                                                 if not args.fix and not args.all else "none of them applies here"),
                            hint="perfstack try --list shows every fix and why it applies or not")
    plan = runner.Plan(target=target, command=cmd, fixes=fixes, nproc=args.nproc, warmup=args.warmup,
                       steps=args.steps, rounds=args.rounds, budget_s=args.budget, step_at=args.step_at,
                       combine=not args.no_combine, predicted=predicted or {}, replayed=replayed,
                       profile_from=args.from_run)
    err.print(f"trying {', '.join(f.id for f in fixes)} on {shlex.join(cmd)}: {1 + len(fixes)} arms × "
              f"{args.rounds} rounds", markup=False)
    trial = _with_progress(plan, err)
    result = Run(meta=run_meta("try", source=shlex.join(cmd), elapsed_s=trial.elapsed_s,
                                      gpu=trial.device), trial=trial)
    view = try_view(result)
    assert view is not None  # the Run holds the trial
    output.emit_run(result, args, out, err, lambda: render_try(view, out, verbose=args.verbose > 0))
    if args.apply_best:
        out.print("\n# the best fixes, to make permanent (nothing was changed):" if trial.advice
                  else "\n# nothing to apply", markup=False)
        for line in trial.advice:
            out.print(line, markup=False, soft_wrap=True)
    return 130 if trial.interrupted else 0


def _with_progress(plan: Plan, err: Console) -> Trial:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from perfstack.trial import runner
    total = plan.rounds * (1 + len(plan.fixes))
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=err,
                  transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("starting", total=total)

        def progress(arm: str, rnd: int, left: float) -> None:
            if bar.tasks[task].completed >= (bar.tasks[task].total or total):
                bar.update(task, total=bar.tasks[task].completed + 1)
            left_s = "" if left == float("inf") else f", {left:,.0f} s left"
            bar.update(task, description=f"round {rnd}/{plan.rounds} · {arm}{left_s}")
            bar.advance(task)

        return runner.run(plan, progress)
