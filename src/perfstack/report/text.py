"""The doctor's terminal report, built with rich from the RunView (report.views), as every renderer is."""

from __future__ import annotations

import re
from typing import Any

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.panel import Panel
from rich.rule import Rule
from rich.text import Text

from perfstack.model import LAYERS, CheckResult, Finding
from perfstack.report.views import RunView

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


def _finding(f: Finding, verbose: bool) -> RenderableType:
    """A finding's head and body; print it with ``crop=False`` so that nothing long is cut off."""
    head = Text.assemble(_badge(f.severity.value), " ", (f.id, "bold"), "  ", f.title)
    if f.subject:
        head.append(f"  [{f.subject}]", style="dim")
    lines: list[RenderableType] = [head]
    body = [("observed", f.evidence + (f"  (read from {', '.join(f.sources)})" if f.sources else ""))]
    if f.why:
        body.append(("why", f.why))
    body.append(("fix", ("on the host: " if f.host_action else "") + f.fix))
    lines += [_Paragraph(label, value) for label, value in body]
    if verbose and f.fix_commands:
        # One command a line, never wrapped: what is on the line is what to paste into a shell.
        lines.append(Text(" " * INDENT + "commands:", style="dim"))
        lines += [Text(" " * (INDENT + 2) + cmd, overflow="ignore") for cmd in f.fix_commands]
    return Group(*lines)


def render_doctor(view: RunView, console: Console, verbose: bool = False) -> None:
    d = view.doctor
    if d is None:  # nothing was checked and nothing found
        return
    console.print(Text.assemble(("perfstack doctor", "bold"), f"  {d.source}  ·  {view.gpus}"))
    if d.bundle:
        as_captured = d.bundle.startswith(("all ", "no manifest"))
        console.print(Text(f"  bundle: {d.bundle}", style="dim" if as_captured else "yellow"))
    if d.fix_first:
        items = "\n".join(f"• {f.id}{f' [{f.subject}]' if f.subject else ''}: {f.evidence}" for f in d.fix_first)
        console.print(Panel(Text(items), title=f"Fix this first — {LAYERS[d.fix_first[0].layer]}",
                            subtitle="critical in a lower layer: fix it before tuning above it",
                            border_style="red"))
    for layer, name, fs in d.layers:
        if layer not in LAYERS or (not fs and not verbose):  # the screen lists the stack's own layers
            continue
        console.print(Rule(Text(name, style="bold"), align="left", style="dim"))
        if not fs:
            console.print(Text("  no findings", style="dim"))
        for f in fs:
            console.print(_finding(f, verbose), crop=False)
    if verbose:
        _not_checked(d.not_checked, console)
    console.print()
    console.print(_summary_line(d.summary))


def _not_checked(skipped: list[CheckResult], console: Console) -> None:
    if skipped:
        console.print(Rule(Text("Not checked", style="bold"), align="left", style="dim"))
        for c in skipped:
            console.print(Text.assemble(f"  {c.id:<28}", (f"{c.status}: {c.reason}", "dim")))


def _summary_line(s: dict[str, Any]) -> Text:
    f = s["findings"]
    st = s["status"]
    t = Text.assemble(
        (f"{f['critical']} critical", STYLE["critical"] if f["critical"] else "dim"), ", ",
        (f"{f['warning']} warning", STYLE["warning"] if f["warning"] else "dim"), ", ",
        (f"{f['info']} info", STYLE["info"] if f["info"] else "dim"),
        f"  ·  {s['checks']} checks: {st.get('passed', 0)} passed, {st.get('found', 0)} with findings",
    )
    for status, label in (("not-applicable", "not applicable"), ("not-checked", "could not be checked")):
        n = st.get(status, 0)
        if n:
            reasons = s["reasons"][status]
            top = "; ".join(f"{k}× {r}" if k > 1 else r for r, k in list(reasons.items())[:2])
            t.append(f", {n} {label} ({top}{'; …' if len(reasons) > 2 else ''})", style="dim")
    if st.get("not-applicable", 0) or st.get("not-checked", 0):
        t.append(" — -v lists them", style="dim")
    return t
