"""What every command that writes a Run offers: --json, -o FILE, --html FILE."""

from __future__ import annotations

import argparse
from typing import Callable, Sequence

from rich.console import Console

from perfstack import outfile, redact
from perfstack.errors import OutputError
from perfstack.model import Run

# (path, what produces its text, what it is: "the fixes", ...)
Extra = tuple[str, Callable[[], str], str]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the Run as one JSON document")
    p.add_argument("-o", "--output", metavar="FILE", help="also save the Run as JSON")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")


def check_paths(*paths: str | None) -> None:
    """Before the work starts, the one rule for every file a command will write (see outfile)."""
    outfile.check_all(*paths)


def emit_run(result: Run, args: argparse.Namespace, out: Console, err: Console, render: Callable[[], None],
             extra: Sequence[Extra] = (), html: Callable[[], str] | None = None) -> None:
    """Save, write the HTML report and any extra file, then print the JSON document or the terminal
    report. A file that cannot be written does not cost the rest: the report is still printed, and
    the first failure is raised afterwards. Credentials read from the machine are redacted first,
    so no output of any kind carries them. ``html`` makes the HTML report where the Run's own
    (report.html.render_report) does not fit (a fleet)."""
    redact.scrub_run(result)
    files: list[Extra] = []
    if args.output:
        files.append((args.output, lambda: result.to_json() + "\n", "saved Run to"))
    if args.html:
        from perfstack.report.html import render_report
        files.append((args.html, html or (lambda: render_report(result)), "wrote the HTML report to"))
    files += list(extra)
    failed: list[OutputError] = []
    for path, text, said in files:
        try:
            outfile.write(path, text())
        except OutputError as e:
            failed.append(e)
        else:
            err.print(f"{said} {path}", markup=False, soft_wrap=True)
    if args.json:
        out.out(result.to_json(), highlight=False)
    else:
        render()
    if failed:
        raise failed[0]


def write_document(text: str, output: str | None, out: Console, err: Console, what: str) -> None:
    """A rendered document (a report or diff in any format) to a file, saying so on stderr, or to
    stdout as it is."""
    if output:
        outfile.write(output, text)
        err.print(f"wrote {what} to {output}", soft_wrap=True, markup=False)
    else:
        out.file.write(text if text.endswith("\n") else text + "\n")
        out.file.flush()
