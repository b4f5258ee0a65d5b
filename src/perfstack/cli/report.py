"""perfstack report: render a saved Run as text, Markdown, HTML or JSON, without re-collecting anything."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markdown import Markdown

from perfstack.cli.output import FORMATS, check_output, load_run, output_format, text_file, write_document
from perfstack.errors import UsageError
from perfstack.model import Run
from perfstack.report import html, markdown
from perfstack.report.bench_text import render_bench
from perfstack.report.text import render_doctor
from perfstack.report.views import RunView, build

if TYPE_CHECKING:
    from perfstack.records.loadtest import LoadTest


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("report", parents=[common], help="render a saved Run (text, Markdown, HTML, JSON)",
                       description="Render a saved Run: terminal text, Markdown for issues and pull requests, "
                                   "or one self-contained HTML file with charts.")
    p.add_argument("run_file", metavar="RUN.json", help="a Run saved with -o by doctor, bench, profile, estimate or loadtest")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE (format from its extension)")
    p.add_argument("-f", "--format", choices=FORMATS, help="text (default), md, html or json")
    p.add_argument("--csv", metavar="STEM", help="a load test: also write STEM.levels.csv and STEM.requests.csv")
    p.set_defaults(func=run)


def render_text(view: RunView, console: Console, verbose: bool) -> None:
    """The terminal renderers of doctor and bench, plus the other sections as rich Markdown."""
    if view.trial is not None and view.doctor is None and view.bench is None and view.profile is None:
        from perfstack.report.try_text import render_try  # a trial's Run holds the trial alone
        render_try(view.trial, console, verbose=verbose)
        return
    if view.doctor is not None:  # profile findings are listed with the profile, not by layer
        render_doctor(view, console, verbose=verbose)
    if view.bench is not None:
        console.print()
        render_bench(view, console, verbose=verbose, findings=False)
    rest = [markdown.roofline_md(view.roofline) if view.roofline is not None and verbose else "",
            markdown.profile_md(view.profile) if view.profile is not None else ""]
    if view.doctor is None and view.bench is None:
        rest.insert(0, f"# {view.title}\n\n{view.gpus}\n\n" + markdown.machine_md(view))
    for part in filter(None, rest):
        console.print()
        console.print(Markdown(part))
    if view.estimates is not None:
        console.print()
        if not _estimate_text(view, console, verbose):
            console.print(Markdown(markdown.estimates_md(view.estimates)))
    if view.trial is not None:
        from perfstack.report.try_text import render_try
        console.print()
        render_try(view.trial, console, verbose=verbose)
    if view.absent:
        console.print(f"[dim]not in this Run: {', '.join(view.absent)}[/dim]")


def _estimate_text(view: RunView, console: Console, verbose: bool) -> bool:
    """perfstack estimate's own terminal table, where the estimates are its sheet."""
    if view.estimates is None or view.estimates.sheet is None:
        return False
    try:
        from perfstack.report.estimate_text import render_estimate
    except ImportError:
        return False
    render_estimate(view, console, verbose=verbose)
    return True


def _report_loadtest(r: Run, lt: LoadTest, fmt: str, args: argparse.Namespace, out: Console, err: Console) -> int:
    from perfstack.report.loadtest_html import render_loadtest_html
    from perfstack.report.loadtest_md import render_loadtest_md
    from perfstack.report.loadtest_text import render_loadtest
    from perfstack.report.loadtest_view import view_of
    view = view_of(lt, r)
    if args.csv:
        from perfstack.report import loadtest_csv
        lv_path, rq_path = loadtest_csv.paths(args.csv)
        write_document(loadtest_csv.levels_csv(lt), lv_path, out, err, "the levels as CSV")
        write_document(loadtest_csv.requests_csv(lt), rq_path, out, err, "the requests as CSV")
    if fmt == "html":
        write_document(render_loadtest_html(view), args.output, out, err, "the HTML report")
    elif fmt == "md":
        write_document(render_loadtest_md(view), args.output, out, err, "the Markdown report")
    elif args.output:
        write_document(text_file(lambda c: render_loadtest(view, c, args.verbose > 0), 140), args.output, out, err,
                       "the report")
    else:
        render_loadtest(view, out, args.verbose > 0)
    return 0


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    fmt = output_format(args.format, args.output)
    check_output(args.output, fmt, out)
    r = load_run(args.run_file)
    if args.csv and r.loadtest is None:
        raise UsageError("--csv writes a load test's levels and requests; this Run holds no load test")
    if r.fleet is not None and fmt != "json":
        from perfstack.cli.fleet import report_fleet_run
        return report_fleet_run(r, fmt, args, out, err)
    if fmt == "json":
        write_document(r.to_json(), args.output, out, err, "the Run")
        return 0
    if r.loadtest is not None:  # a load test has its own views
        return _report_loadtest(r, r.loadtest, fmt, args, out, err)
    view = build(r)
    if fmt == "html":
        write_document(html.render_run(view), args.output, out, err, "the HTML report")
    elif fmt == "md":
        write_document(markdown.render_run(view), args.output, out, err, "the Markdown report")
    elif args.output:
        write_document(text_file(lambda c: render_text(view, c, args.verbose > 0), 120), args.output, out, err, "the report")
    else:
        render_text(view, out, args.verbose > 0)
    return 0
