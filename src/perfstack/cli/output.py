"""The CLI's one seam to its outputs: what every command that writes a Run offers (--json, -o FILE,
--html FILE), and what the commands that read saved Runs and write documents share (report, diff, fleet
report): the Run a file holds, the format asked for, where the document goes."""

from __future__ import annotations

import argparse
import io
from pathlib import Path
from typing import Callable, Sequence

from rich.console import Console

from perfstack import jsonload, outfile, redact
from perfstack.records.diff import KIND as DIFF_KIND
from perfstack.errors import InputError, OutputError, UsageError
from perfstack.model import Run
from perfstack.report.inert import protect

# (path, what produces its text, what it is: "the fixes", ...)
Extra = tuple[str, Callable[[], str], str]

FORMATS = ("text", "md", "html", "json")
EXTENSIONS = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md", ".json": "json", ".txt": "text"}
RUN_HINT = "give a file written by 'perfstack doctor -o FILE' (or bench, profile, estimate, loadtest)"


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
