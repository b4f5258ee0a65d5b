"""The load test's terminal report: who was tested, one row per load level, the sweep's verdict, why.

It formats the ``LoadtestView`` the Markdown and HTML reports format (``loadtest_view``)."""

from __future__ import annotations

from rich.console import Console
from rich.rule import Rule
from rich.text import Text

from perfstack.report.loadtest_view import REPEAT_HEADERS, LoadtestView
from perfstack.report.text_blocks import figures_table, finding


def render_loadtest(v: LoadtestView, console: Console, verbose: bool = False) -> None:
    console.print(Text.assemble((v.title, "bold"), "  ", v.headline), markup=False)
    console.print(Text(v.workload, style="dim"))
    # a pipe or a file gets the whole table on one line per level
    width = console.width if console.is_terminal else max(console.width, 140)
    console.print(figures_table(v.headers, v.rows, width), width=width)
    if v.repeats:
        console.print(Text("Median over the runs (interval across them; how often such an interval holds the "
                           "true median):", style="bold"))
        console.print(figures_table(REPEAT_HEADERS, v.repeats, width), width=width)
    if v.sweep:
        console.print(Text(v.sweep))
    for load, cpu, lag, per_chunk, procs in v.client if verbose else []:
        many = f" in {procs} processes (busiest shown)" if int(procs) > 1 else ""
        console.print(Text(f"  client at {load}{many}: {cpu} CPU, timer lag p99 {lag}, {per_chunk} CPU per chunk",
                           style="dim"))
    for n in v.notes:
        console.print(Text(f"note: {n}", style="dim"))
    console.print(Rule(Text("Why", style="bold"), align="left", style="dim"))
    if not v.findings:
        console.print(Text("  no findings", style="dim"))
    for f in v.findings:
        console.print(finding(f, verbose))
