"""perfstack doctor: audit the stack bottom-up and say what to fix first."""

from __future__ import annotations

import argparse
from contextlib import nullcontext

from rich.console import Console

from perfstack.audit import FAIL_ON, audit, exit_code
from perfstack.bench import SUITES
from perfstack.cli import output
from perfstack.cli.bench import bench_fn
from perfstack.errors import UsageError
from perfstack.host.bundle import PARTIAL_FLAG, BundleHost
from perfstack.host.live import LiveHost
from perfstack.model import Run
from perfstack.report.bench_text import render_measurements
from perfstack.report.fixscript import render_fix_script
from perfstack.report.text import render_doctor
from perfstack.report.views import build
from perfstack.rules import select_checks


def _ids(values: list[str] | None) -> list[str]:
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("doctor", parents=[common], help="audit this machine (or a bundle), bottom-up",
                       description="Audit the stack layer by layer: findings with evidence and the fix.")
    p.add_argument("--bundle", metavar="DIR", help="audit a recorded bundle instead of this machine")
    p.add_argument(PARTIAL_FLAG, action="store_true",
                   help="with --bundle: audit a bundle some of whose captured files are missing or cut short "
                        "(a partial copy) instead of refusing it; findings that need those files say so")
    output.add_arguments(p)
    p.add_argument("--fail-on", choices=FAIL_ON, default="critical",
                   help="exit 1 when a finding at or above this severity exists (default: critical)")
    p.add_argument("--select", action="append", metavar="IDS", help="only these check ids or layers (comma-separated)")
    p.add_argument("--ignore", action="append", metavar="IDS", help="skip these check ids or layers")
    p.add_argument("--fix-script", metavar="FILE", help="write the fixes as a shell script to review (never run)")
    p.add_argument("--bench", choices=SUITES, metavar="SUITE",
                   help="also run the benchmark suite (quick or full) and judge its results")
    p.set_defaults(func=run)


def doctor_run(args: argparse.Namespace, err: Console) -> Run:
    checks = select_checks(_ids(args.select), _ids(args.ignore))
    if args.bench and args.bundle:
        raise UsageError("--bench measures this machine; it cannot be combined with --bundle")
    if args.partial_bundle and not args.bundle:
        raise UsageError(f"{PARTIAL_FLAG} is for auditing a bundle; give it with --bundle DIR")
    host = BundleHost.given(args.bundle, partial=args.partial_bundle) if args.bundle else LiveHost()
    source = f"bundle {args.bundle}" if args.bundle else "live machine"
    if args.bench:
        return audit(host, checks, source, bench=bench_fn(args, err, args.bench, [], None))
    if isinstance(host, BundleHost) and host.manifest and (host.manifest.lost or host.manifest.edited):
        err.print(f"perfstack: warning: bundle {args.bundle}: {host.integrity}", markup=False, soft_wrap=True)
    status = err.status("auditing the stack…") if err.is_terminal and not args.quiet else nullcontext()
    if isinstance(host, LiveHost) and not isinstance(status, nullcontext):
        host.on_wait = lambda what: status.update(f"auditing the stack… {what}")
    with status:
        result = audit(host, checks, source)
    if isinstance(host, BundleHost):
        result.meta.bundle = host.integrity  # how complete it was, shown under the report's header
    return result


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    output.check_paths(args.output, args.fix_script, args.html)
    result = doctor_run(args, err)
    said = "wrote the fixes for review (perfstack did not run them) to"
    extra = [(args.fix_script, lambda: render_fix_script(result), said)] if args.fix_script else []

    def render() -> None:
        view = build(result)
        render_doctor(view, out, verbose=args.verbose > 0)
        if view.bench is not None:
            render_measurements(view, out, verbose=args.verbose > 0)
    output.emit_run(result, args, out, err, render, extra)
    return exit_code(result, args.fail_on)
