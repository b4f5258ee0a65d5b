"""The terminal and Markdown-free text view of a fleet diff (``fleet.compare.FleetDiff``)."""

from __future__ import annotations

from rich.console import Console
from rich.rule import Rule
from rich.text import Text

from perfstack.fleet.compare import FleetDiff
from perfstack.report.numbers import num
from perfstack.report.fleet_text import STYLE, inert, nodes_list


def _section(console: Console, title: str) -> None:
    console.print(Rule(Text(title, style="bold"), align="left", style="dim"))


def _nodes(d: FleetDiff, console: Console) -> None:
    if d.nodes_added or d.nodes_removed:
        _section(console, "Nodes")
        if d.nodes_added:
            console.print(f"  joined: {nodes_list(d.nodes_added, 12)}", markup=False)
        if d.nodes_removed:
            console.print(f"  gone: {nodes_list(d.nodes_removed, 12)}", markup=False)
    if d.newly_flagged or d.no_longer_flagged:
        _section(console, "Flagged nodes")
        for r in d.newly_flagged:
            console.print(Text.assemble(Text(" NEW      ", style=STYLE[r["severity"]]), (inert(r["node"]), "bold"),
                                        "  " + "; ".join(inert(x, 80) for x in r["reasons"][:3])))
        for r in d.no_longer_flagged:
            console.print(Text.assemble(Text(" CLEARED  ", style="green"), (inert(r["node"]), "bold"),
                                        ("  was: " + "; ".join(inert(x, 80) for x in r["reasons"][:3]), "dim")))


def _changes(d: FleetDiff, console: Console) -> None:
    for title, new, gone, fmt in (
        ("Drift", d.drift_new, d.drift_gone, lambda x: f"{x['key']} on {x['node']} = {inert(x['value'], 40)}"),
        ("Figures that stand out", d.outliers_new, d.outliers_gone,
         lambda x: f"{x['figure']} on {x['node']}{' ' + x['subject'] if x['subject'] else ''} "
                   f"{x['deviation_pct']:+.1f}%"),
        ("Findings on a minority of nodes", d.findings_new, d.findings_gone,
         lambda x: f"{x['id']} on {x['node']} ({x['severity']})"),
    ):
        if new or gone:
            _section(console, title)
            for x in new:
                console.print(Text.assemble(Text("  + ", style="red"), inert(fmt(x))))
            for x in gone:
                console.print(Text.assemble(Text("  - ", style="green"), inert(fmt(x))))


def _comms(d: FleetDiff, console: Console) -> None:
    if not (d.comms or d.comms_suspects_new or d.comms_suspects_gone):
        return
    _section(console, "All-reduce between machines")
    for c in d.comms:
        who = "the fleet" if c["subject"] == "fleet" else inert(c["subject"])
        console.print(f"  {who}: {num(c['before'], 'GB/s')} → {num(c['after'], 'GB/s')} "
                      f"({c['change_pct']:+.1f}%)", markup=False)
    for x in d.comms_suspects_new:
        console.print(Text.assemble(Text("  + ", style="red"), inert(f"{x['kind']}: {x['text']}", 160)))
    for x in d.comms_suspects_gone:
        console.print(Text.assemble(Text("  - ", style="green"), inert(f"{x['kind']}: {x['text']}", 160)))


def _medians(d: FleetDiff, console: Console) -> None:
    if d.medians:
        _section(console, "SKU medians that moved")
        for m in d.medians:
            console.print(f"  {inert(m['sku'])} {inert(m['figure'])}: {num(m['before'], m['unit'])} → "
                          f"{num(m['after'], m['unit'])} ({m['change_pct']:+.1f}%)", markup=False)


def render_fleet_diff(d: FleetDiff, before: str, after: str, console: Console) -> None:
    console.print(Text.assemble(("perfstack diff (fleet)", "bold"), f"  {inert(before)} → {inert(after)}"))
    if d.empty():
        console.print(Text("nothing changed: the same nodes, flagged for the same reasons", style="dim"))
        return
    for part in (_nodes, _changes, _comms, _medians):
        part(d, console)
