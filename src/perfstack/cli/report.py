"""perfstack report: render a saved Run as text, Markdown, HTML or JSON, without re-collecting anything."""

from __future__ import annotations

import argparse
import io
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from rich.console import Console
from rich.markdown import Markdown

from perfstack import jsonload
from perfstack.cli.output import check_paths, write_document
from perfstack.compare.diff import KIND as DIFF_KIND
from perfstack.errors import InputError, UsageError
from perfstack.model import Run
from perfstack.report import html, markdown
from perfstack.report.bench_text import render_bench
from perfstack.report.inert import protect
from perfstack.report.text import render_doctor
from perfstack.report.views import RunView, build

if TYPE_CHECKING:
    from perfstack.loadtest.record import LoadTest

FORMATS = ("text", "md", "html", "json")
EXTENSIONS = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md", ".json": "json", ".txt": "text"}
RUN_HINT = "give a file written by 'perfstack doctor -o FILE' (or bench, profile, estimate, loadtest)"


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("report", parents=[common], help="render a saved Run (text, Markdown, HTML, JSON)",
                       description="Render a saved Run: terminal text, Markdown for issues and pull requests, "
                                   "or one self-contained HTML file with charts.")
    p.add_argument("run_file", metavar="RUN.json", help="a Run saved with -o by doctor, bench, profile, estimate or loadtest")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE (format from its extension)")
    p.add_argument("-f", "--format", choices=FORMATS, help="text (default), md, html or json")
    p.set_defaults(func=run)


def output_format(fmt: str | None, output: str | None) -> str:
    """The -f value, else the output file's extension, else text."""
    if fmt:
        return fmt
    if output:
        return EXTENSIONS.get(Path(output).suffix.lower(), "text")
    return "text"


def check_output(output: str | None, fmt: str, out: Console) -> None:
    check_paths(output)
    if fmt == "html" and not output and out.is_terminal:
        raise UsageError("HTML is not printed to a terminal", hint="write it to a file: -o report.html")


def load_run(path: str) -> Run:
    """The Run in ``path``, with the hints a user of report/diff needs; a saved diff is named as one."""
    try:
        data = jsonload.read(path, "Run file")
        if isinstance(data, dict) and data.get("kind") == DIFF_KIND:
            raise InputError(f"{path} is a perfstack diff, not a Run", hint=RUN_HINT)
        return Run.from_document(data, path)
    except InputError as e:
        raise InputError(e.message, e.hint or RUN_HINT) from None
    except AttributeError as e:  # a JSON object whose sections have the wrong shapes
        raise InputError(f"{path} is not a valid perfstack Run ({e})", hint=RUN_HINT) from None


def text_file(render: Callable[[Console], None], width: int) -> str:
    """What a terminal renderer prints, as plain text for a file."""
    buf = io.StringIO()
    console = Console(file=buf, width=width, no_color=True, highlight=False, soft_wrap=False)
    protect(console)
    render(console)
    return buf.getvalue()


def render_text(view: RunView, console: Console, verbose: bool) -> None:
    """The terminal renderers of doctor and bench, plus the other sections as rich Markdown."""
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
