"""perfstack diff: what changed between two Runs, with benchmark changes judged against their noise."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape

from perfstack.cli.output import check_output, load_run, output_format, text_file, write_document
from perfstack.compare import diff_runs
from perfstack.compare.stats import ALPHA
from perfstack.errors import UsageError
from perfstack.report import html, markdown
from perfstack.report.diff import render_diff


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("diff", parents=[common], help="compare two Runs: drifted facts, findings, benchmark deltas",
                       description="What changed between two Runs: facts that drifted, findings fixed or "
                                   "introduced, benchmark figures improved, regressed or within noise, profile "
                                   "time per step.")
    p.add_argument("before", metavar="BEFORE.json", help="the earlier Run")
    p.add_argument("after", metavar="AFTER.json", help="the later Run")
    p.add_argument("-f", "--format", choices=("text", "md", "html", "json"), help="text (default), md, html or json")
    p.add_argument("--json", action="store_true", help="print the diff as one JSON document (same as -f json)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the diff to FILE (format from its extension)")
    p.add_argument("--fail-on-regression", nargs="?", const=0.0, type=float, metavar="PCT",
                   help="exit 1 when a figure regressed significantly (and by at least PCT %%, default 0); "
                        "figures bound to hardware that differs between the Runs are not counted")
    p.add_argument("--alpha", type=float, default=ALPHA,
                   help=f"significance level of the Mann–Whitney test (default {ALPHA:g})")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    fmt = "json" if args.json else output_format(args.format, args.output)
    if args.fail_on_regression is not None and args.fail_on_regression < 0:
        raise UsageError(f"--fail-on-regression {args.fail_on_regression:g}: the threshold is a percentage ≥ 0")
    if not 0 < args.alpha < 1:
        raise UsageError(f"--alpha {args.alpha:g} must be between 0 and 1", hint="0.01 is the default")
    check_output(args.output, fmt, out)
    before, after = load_run(args.before), load_run(args.after)
    if before.fleet is not None or after.fleet is not None:  # two runs of a fleet: what changed across its nodes
        from perfstack.cli.fleet import diff_fleet_runs
        return diff_fleet_runs(before, after, args, fmt, out, err)
    d = diff_runs(before, after, args.before, args.after, alpha=args.alpha)
    if fmt == "json":
        write_document(d.to_json(), args.output, out, err, "the diff")
    elif fmt == "md":
        write_document(markdown.render_diff(d), args.output, out, err, "the Markdown diff")
    elif fmt == "html":
        write_document(html.render_diff(d), args.output, out, err, "the HTML diff")
    elif args.output:
        write_document(text_file(lambda c: render_diff(d, c, args.verbose > 0), 140), args.output, out, err, "the diff")
    else:
        render_diff(d, out, args.verbose > 0)
    if not d.hardware.same:
        err.print(f"[yellow]note:[/yellow] the hardware differs ({escape(', '.join(d.hardware.differs))}); "
                  "figures bound to it compare the machines, not the change", soft_wrap=True)
    if args.fail_on_regression is None:
        return 0
    bad = d.regressions(args.fail_on_regression)
    skipped = [m for m in d.regressions(args.fail_on_regression, include_hardware_bound=True) if m.hardware_bound]
    if skipped:
        err.print(f"{len(skipped)} regression(s) on hardware that differs were not counted by --fail-on-regression",
                  soft_wrap=True)
    if bad:
        names = ", ".join(f"{m.name} ({m.change_pct:+.1f}%)" for m in bad[:5]) + (" …" if len(bad) > 5 else "")
        err.print(f"[bold red]regressed:[/bold red] {escape(names)}", soft_wrap=True)
        return 1
    return 0

