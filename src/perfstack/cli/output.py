"""What every command that writes a Run offers: --json, -o FILE, --html FILE."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

from rich.console import Console

from perfstack.errors import UsageError
from perfstack.model import Run


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the Run as one JSON document")
    p.add_argument("-o", "--output", metavar="FILE", help="also save the Run as JSON")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")


def check_paths(*paths: str | None) -> None:
    """Before the work starts: a directory where a file is expected would lose the result."""
    for path in paths:
        if path and Path(path).is_dir():
            raise UsageError(f"{path} is a directory", hint="give a file name")


def emit(result: Run, args: argparse.Namespace, out: Console, err: Console, render: Callable[[], None]) -> None:
    """Save, write the HTML report, then print the JSON document or the terminal report."""
    if args.output:
        result.save(args.output)
        err.print(f"saved Run to {args.output}", markup=False)
    if args.html:
        from perfstack.report.html import write_report
        write_report(result, args.html)
        err.print(f"wrote the HTML report to {args.html}", markup=False)
    if args.json:
        out.out(result.to_json(), highlight=False)
    else:
        render()
