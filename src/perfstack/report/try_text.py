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
    cols = list(range(len(HEAD)))
    rows = [r.cells() for r in v.rows]
    cols = [i for i in cols if i in (0, 1, 2, 5) or any(c[i] not in ("—", "") for c in rows)]  # columns with news
    if out.width < 110 and not verbose:  # narrow: the timing, the verdict and the numerics first
        cols = [i for i in cols if HEAD[i] not in ("peak mem", "1st step")]
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    for i in cols:
        table.add_column(HEAD[i], justify="right" if i in (1, 2, 3, 4, 7, 8) else "left", no_wrap=i in (0, 1, 2, 3, 5))
    for r, cells in zip(v.rows, rows):
        shown: list[str | Text] = [Text(r.verdict, style=STYLE.get(r.verdict, "")) if i == 5 else cells[i] for i in cols]
        table.add_row(*shown)
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
