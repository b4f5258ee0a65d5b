"""The bench's terminal table: value, peak, % of peak and verdict for every figure."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfstack.model import Measurement
from perfstack.report.views import RunView

VERDICT_STYLE = {"good": "green", "below expected": "yellow", "low": "bold red", "skipped": "dim", "error": "red"}


def _figure(v: float | None) -> str:
    """A measured value for the table: three significant digits or so, thousands separated, '—' for none."""
    if v is None:
        return "—"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.1f}" if abs(v) >= 10 else f"{v:,.2f}"


def _row(m: Measurement) -> list[Text | str]:
    if m.status != "ok":
        return [Text(m.bench), Text(m.name), "—", "—", "—", Text(m.status, style=VERDICT_STYLE.get(m.status, "")), Text(m.reason)]
    pct = f"{m.fraction:.0%}" if m.fraction is not None else "—"
    if m.expected_fraction and m.fraction is not None:
        pct += f" (≈{m.expected_fraction:.0%} typical)"
    notes = "; ".join(m.notes)
    spread = m.stats.get("cv")
    if spread is not None and m.stats.get("n", 0) > 1:
        notes = f"±{spread:.1%} over {int(m.stats['n'])} runs" + (f"; {notes}" if notes else "")
    # Text, not str: a str cell is read as rich markup, and these strings come from the Run
    return [Text(m.bench), Text(m.name), Text(f"{_figure(m.value)} {m.unit}"),
            Text(f"{_figure(m.peak)} {m.unit}") if m.peak else "—", pct,
            Text(m.verdict, style=VERDICT_STYLE.get(m.verdict, "")), Text(notes)]


HEADERS = ("bench", "figure", "measured", "peak / ref", "% of peak", "verdict", "notes")
NOTES_MIN = 30  # narrower than this, a note wraps to a line per word or two: notes go under the table


def _width(cell: Text | str) -> int:
    return cell.cell_len if isinstance(cell, Text) else len(cell)


def render_measurements(view: RunView, console: Console, verbose: bool = False) -> None:
    ms = [m for m in (view.bench.measurements if view.bench else []) if verbose or not m.params.get("sweep")]
    rows = [_row(m) for m in ms]
    widest = [max([len(h)] + [_width(r[i]) for r in rows]) for i, h in enumerate(HEADERS[:-1])]
    if sum(widest) + 2 * len(widest) + NOTES_MIN <= console.width:
        t = Table(*HEADERS, box=None, pad_edge=False, header_style="bold")
        for row in rows:
            t.add_row(*row)
        console.print(t)
    else:
        # Narrow: each figure on one line with its name whole, and the notes under the table, each as
        # wide as the screen. The bench column goes where every name starts with its bench's name.
        first = 0 if any(m.name.split(".")[0] != m.bench for m in ms) else 1
        t = Table(*HEADERS[first:-1], box=None, pad_edge=False, header_style="bold")
        name = t.columns[1 - first]  # names whole (an outlandish one, past 32 columns, folds)
        name.min_width, name.overflow = min(widest[1], 32), "fold"
        for row in rows:
            t.add_row(*row[first:-1])
        console.print(t)
        for m, row in zip(ms, rows):
            if _width(row[-1]):
                console.print(Text.assemble((m.name, "bold"), ": ", row[-1]))
    hidden = view.bench.sweep_points if view.bench else 0
    if hidden and not verbose:
        console.print(Text(f"{hidden} sweep points not shown (-v shows them; --json has every raw sample)", style="dim"))


def render_bench(view: RunView, console: Console, verbose: bool = False, findings: bool = True) -> None:
    """perfstack bench's screen: the figures, then (``findings``) what the rules found in them, briefly.
    The report leaves the findings to its doctor section, which lists them in full."""
    console.print(Text.assemble(("perfstack bench", "bold"), f"  ·  {view.gpus}"))
    render_measurements(view, console, verbose)
    for f in (view.doctor.findings if view.doctor and findings else []):
        console.print(Text.assemble((f" {f.severity.value.upper()} ", "bold"), (f.id, "bold"), f"  {f.evidence}"))
        console.print(Text(f"   fix: {f.fix}", style="dim"))
