"""The load-test part of ``perfstack diff``, in the terminal, Markdown and HTML: formats a
``records.diff.LoadtestDiff`` with the row formats of the benchmark figures' table, computes nothing.

Without -v the terminal and Markdown show, per level, the medians and the throughputs, and any other
figure (a p99) only when it moved; the HTML page shows every figure.
"""

from __future__ import annotations

from typing import Iterable

from rich.console import Console
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from perfstack.compare.loadtest import MIN_CHANGE, MIN_TAIL_CHANGE, MIN_TAIL_VALUES, WINDOWS
from perfstack.records.diff import IMPROVED, REGRESSED, LoadtestDiff, MeasurementDelta, SweepDelta
from perfstack.report import charts, html_blocks, md_blocks, text_blocks
from perfstack.report.numbers import num
from perfstack.report.html_blocks import e
from perfstack.report.md_blocks import t
from perfstack.report.views import DELTA_COLUMNS, DELTA_NUMERIC

EXPLAIN = ("Levels are matched by mode and load and re-aggregated from their request records with one SLO. "
           "A median is judged by a Mann–Whitney U test and a bootstrap interval of the medians' ratio over "
           "per-request values; a p99 by a bootstrap interval (resampling whole requests) alone, from "
           f"{MIN_TAIL_VALUES:,} values a side; throughput and goodput over {WINDOWS} equal time windows of each "
           f"level. Changes under {MIN_CHANGE:.0%} ({MIN_TAIL_CHANGE:.0%} for a p99) are called noise: a rerun of "
           "an unchanged server moves that much.")


def shown(ld: LoadtestDiff, verbose: bool) -> tuple[list[MeasurementDelta], int]:
    """The figures listed without -v (medians, throughputs, and whatever moved), and how many are left out."""
    figs = ld.figures()
    if verbose:
        return figs, 0
    keep = [f for f in figs if " p99 @ " not in f.name or f.verdict in (IMPROVED, REGRESSED)]
    return keep, len(figs) - len(keep)


def sweep_value(row: SweepDelta, side: str) -> str:
    v = row.before if side == "before" else row.after
    if v is None:
        return "none" if row.is_load else "—"
    return f"{v:g} {row.unit}" if row.is_load else num(v, row.unit)


def _levels_line(ld: LoadtestDiff) -> str:
    parts = []
    if ld.only_before:
        parts.append("only before: " + ", ".join(ld.only_before))
    if ld.only_after:
        parts.append("only after: " + ", ".join(ld.only_after))
    return "; ".join(parts)


def _slo_line(ld: LoadtestDiff) -> str:
    if not ld.slo:
        return "no SLO in either Run: goodput and the highest load meeting it are not compared"
    s = ld.slo
    parts = [f"{name} ≤ {v:g} ms" for name, v in (("TTFT", s.ttft_ms), ("TPOT", s.itl_ms), ("E2E", s.e2e_ms))
             if v is not None]
    attainment = s.attainment if s.attainment is not None else 0.9  # the load test's default, which it omits
    return f"judged against the SLO {', '.join(parts)} for {attainment:.0%} of requests"


# -- terminal ---------------------------------------------------------------------------------
def render_text(ld: LoadtestDiff, console: Console, verbose: bool = False) -> None:
    console.print(Rule(Text("Load test", style="bold"), align="left", style="dim"))
    for line in [_slo_line(ld), *ld.notes, _levels_line(ld)]:
        if line:
            console.print(Text(f"  {line}", style="dim"))
    figs, hidden = shown(ld, verbose)
    if figs:
        rows = text_blocks.delta_table(verbose, note=verbose, collapse_padding=True)
        for f in figs:
            rows.add_row(*text_blocks.delta_row(f, verbose)[: 7 if verbose else 6])
        console.print(rows)
    if hidden:
        console.print(Text(f"{hidden} p99 figures within noise or not judged are not shown; -v shows them",
                           style="dim"))
    if ld.sweep:
        sweep = Table("sweep", "before", "after", "", box=None, pad_edge=False, header_style="bold")
        for row in ld.sweep:
            sweep.add_row(Text(row.figure), sweep_value(row, "before"), sweep_value(row, "after"),
                          Text(row.change, style={"better": "green", "worse": "bold red"}.get(row.change,
                                                                                                     "dim")))
        console.print(sweep)


# -- Markdown ---------------------------------------------------------------------------------
def render_md(ld: LoadtestDiff, verbose: bool = False) -> str:
    out = ["## Load test", "\n".join(f"- {t(x)}" for x in [_slo_line(ld), *ld.notes, _levels_line(ld)] if x)]
    figs, hidden = shown(ld, verbose)
    if figs:
        out.append(md_blocks.table(DELTA_COLUMNS, (md_blocks.delta_row(f) for f in figs), right=DELTA_NUMERIC))
    if hidden:
        rest = [f for f in ld.figures() if f not in figs]
        out.append(f"<details><summary>{hidden} p99 figures within noise or not judged</summary>\n\n"
                   + md_blocks.table(DELTA_COLUMNS, (md_blocks.delta_row(f) for f in rest), right=DELTA_NUMERIC)
                   + "\n\n</details>")
    if ld.sweep:
        out.append(md_blocks.table(("sweep", "before", "after", ""), ((r.figure, sweep_value(r, "before"),
                                                                       sweep_value(r, "after"), r.change)
                                                                      for r in ld.sweep), right=(1, 2)))
    out.append(f"_{t(EXPLAIN)}_")
    return "\n\n".join(out)


# -- HTML -------------------------------------------------------------------------------------
def _rows(figs: Iterable[MeasurementDelta]) -> list[list[str]]:
    return [html_blocks.delta_row(f) for f in figs]


def render_html(ld: LoadtestDiff) -> str:
    items = "".join(f"<li>{e(x)}</li>" for x in [_slo_line(ld), *ld.notes, _levels_line(ld)] if x)
    parts = ["<h2>Load test</h2>", f'<ul class="muted">{items}</ul>']
    figs = ld.figures()
    moved = [(f.name, f.delta_pct, f.ci_low_pct, f.ci_high_pct, f.verdict) for f in figs
             if f.delta_pct is not None and " p99 @ " not in f.name]
    if moved:
        parts.append(charts.delta_chart(moved, "Load test: change of each median and throughput"))
    if figs:
        parts.append(html_blocks.table(DELTA_COLUMNS, _rows(figs), num_cols=DELTA_NUMERIC))
    if ld.sweep:
        parts.append("<h3>The sweep</h3>" + html_blocks.table(
            ("", "before", "after", ""), ((e(r.figure), e(sweep_value(r, "before")), e(sweep_value(r, "after")),
                                          e(r.change)) for r in ld.sweep), num_cols=(1, 2)))
    parts.append(f'<p class="muted">{e(EXPLAIN)}</p>')
    return "".join(parts)
