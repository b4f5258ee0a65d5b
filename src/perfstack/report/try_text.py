"""The terminal report of a trial: one table of arms, then the notes and what to apply."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfstack.report.try_view import HEAD, TryView

STYLE = {"works": "bold green", "slower": "bold red", "failed": "red", "not applied": "yellow",
         "no measurable gain": "dim", "baseline": "bold"}


def render_try(v: TryView, out: Console, verbose: bool = False) -> None:
    out.print(Text.assemble(("perfstack try  ", "bold"), (v.command, ""), ("  ·  " + v.gpu, "dim")))
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    for i, h in enumerate(HEAD):
        table.add_column(h, justify="right" if i in (1, 2, 3, 4, 7, 8) else "left", no_wrap=i in (0, 1, 2, 3, 5))
    for r in v.rows:
        cells: list[str | Text] = list(r.cells())
        cells[5] = Text(r.verdict, style=STYLE.get(r.verdict, ""))
        table.add_row(*cells)
    out.print(table)
    for r in v.rows:
        if r.note and (verbose or r.verdict in ("failed", "not applied", "no measurable gain", "baseline")):
            out.print(Text.assemble((f"{r.id}: ", "bold"), (r.note, "")), soft_wrap=False)
    out.print(Text(f"noise: {v.noise}", style="dim"))
    out.print(Text(f"how: {v.how}", style="dim"))
    for n in v.notes:
        out.print(Text(n))
    if v.interrupted:
        out.print(Text("interrupted: the table holds what was measured before Ctrl-C", style="yellow"))
    if v.best:
        out.print(Text.assemble(("apply: ", "bold green"), (", ".join(v.best), "")))
    else:
        out.print(Text("no fix measured a gain that keeps the numbers; nothing to apply", style="dim"))
