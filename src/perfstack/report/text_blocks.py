"""The building blocks of every terminal report perfstack prints (the doctor's, the load test's, the diff's):
a finding with its wrapped paragraphs, and the before/after table of judged figures with its rows."""

from __future__ import annotations

import re

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from perfstack.records.diff import MeasurementDelta
from perfstack.model import Finding
from perfstack.report.numbers import num

STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def _badge(sev: str) -> Text:
    return Text(f" {sev.upper():<8}", style=STYLE[sev])


INDENT = 11  # where a finding's body starts, under its id


class _Paragraph:
    """``label: value`` under a finding, wrapped at spaces to the console's width. A word longer than a
    line (a path, an option string, a command's argument) is never split: it runs past the edge, so it
    can be copied whole."""

    def __init__(self, label: str, value: str) -> None:
        self.text = Text.assemble((f"{label}: ", "dim"), value)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(20, options.max_width - INDENT)
        for part in self.text.split("\n", allow_blank=True):
            breaks, col = [], 0
            for word in re.finditer(r"\S+\s*", part.plain):
                if col and col + cell_len(word.group().rstrip()) > width:
                    breaks.append(word.start())
                    col = 0
                col += cell_len(word.group())
            for line in part.divide(breaks):
                line.rstrip()
                yield Text(" " * INDENT, overflow="ignore").append_text(line)


def finding(f: Finding, verbose: bool) -> RenderableType:
    """A finding's head and body; print it with ``crop=False`` so that nothing long is cut off."""
    head = Text.assemble(_badge(f.severity.value), " ", (f.id, "bold"), "  ", f.title)
    if f.subject:
        head.append(f"  [{f.subject}]", style="dim")
    lines: list[RenderableType] = [head]
    body = [("observed", f.evidence + (f"  (read from {', '.join(dict.fromkeys(f.sources))})" if f.sources else ""))]
    if f.why:
        body.append(("why", f.why))
    body.append(("fix", ("on the host: " if f.host_action else "") + f.fix))
    lines += [_Paragraph(label, value) for label, value in body]
    if verbose and f.fix_commands:
        # One command a line, never wrapped: what is on the line is what to paste into a shell.
        lines.append(Text(" " * INDENT + "commands:", style="dim"))
        lines += [Text(" " * (INDENT + 2) + cmd, overflow="ignore") for cmd in f.fix_commands]
    return Group(*lines)


VERDICT = {"improved": "green", "regressed": "bold red", "within noise": "dim"}


def delta_row(m: MeasurementDelta, verbose: bool) -> list[Text]:
    change = f"{m.delta_pct:+.1f}%" if m.delta_pct is not None else "—"
    ci = (f"{m.ci_low_pct:+.1f}…{m.ci_high_pct:+.1f}%" if m.ci_low_pct is not None and m.ci_high_pct is not None
          else "—")
    verdict = Text(m.verdict, style=VERDICT.get(m.verdict, "yellow"))
    if m.hardware_bound:
        verdict.append(" ⚠ hw", style="yellow")
    row = [Text(m.name), Text(num(m.before, m.unit)), Text(num(m.after, m.unit)), Text(change), Text(ci), verdict]
    if verbose:
        row.append(Text(f"{m.p_value:.2g}" if m.p_value is not None else "—"))
    return row + [Text(m.note, style="dim")]


def delta_table(verbose: bool, note: bool = True, collapse_padding: bool = False) -> Table:
    """The empty table of before/after figures whose rows ``delta_row`` makes (benchmarks, load tests)."""
    t = Table(box=None, pad_edge=False, header_style="bold", collapse_padding=collapse_padding)
    t.add_column("figure", no_wrap=True)
    for col in ("before", "after", "change", "95% interval"):
        t.add_column(col, justify="right", no_wrap=True)
    t.add_column("verdict", no_wrap=True)
    if verbose:
        t.add_column("p", justify="right")
    if note:
        t.add_column("note")
    return t


def figures_table(headers: list[str], rows: list[list[str]], width: int) -> Table:
    """A table of figures whose cells are never cut at ``width`` columns. Where every header and cell fits
    on one line, each column is as wide as its widest; where not, each column after the first is as
    wide as its widest cell (or its header's longest word), the header wrapping at its spaces, and the
    first, the row's name, wraps where the width runs out. A figure cut to '346/1,1…' says nothing."""
    widest = [max([len(h)] + [len(r[i]) for r in rows if i < len(r)]) for i, h in enumerate(headers)]
    fits = sum(widest) + 2 * (len(headers) - 1) <= width
    t = Table(box=None, pad_edge=False, header_style="bold")
    for i, h in enumerate(headers):
        if fits or i == 0:
            t.add_column(h)
        else:
            cells = max((len(r[i]) for r in rows if i < len(r)), default=0)
            t.add_column(h, width=max([cells] + [len(w) for w in h.split()]))
    for row in rows:
        t.add_row(*(Text(c) for c in row))
    return t
