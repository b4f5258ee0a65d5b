"""The fleet's terminal report: which nodes to fix first, then the evidence by kind."""

from __future__ import annotations

import json
import re
from typing import Any

from rich.console import Console
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from perfstack.records.fleet import FleetAnalysis
from perfstack.report.fleet_view import FleetView
from perfstack.report.numbers import num

STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def inert(v: Any, n: int = 0) -> str:
    """A value from a node's Run as plain text: control characters escaped, long values cut."""
    s = v if isinstance(v, str) else json.dumps(v, default=str)
    s = CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", s)
    return s if not n or len(s) <= n else s[: n - 1] + "…"


def nodes_list(names: list[str], n: int = 6) -> str:
    shown = ", ".join(inert(x) for x in names[:n])
    return shown + (f" (+{len(names) - n} more)" if len(names) > n else "")


def _section(console: Console, title: str) -> None:
    console.print(Rule(Text(title, style="bold"), align="left", style="dim"))


def _grid(*widths: int | None) -> Table:
    t = Table.grid(padding=(0, 2))
    for w in widths:
        t.add_column(max_width=w, overflow="fold")
    return t


def render_fleet(v: FleetView, console: Console, verbose: bool = False) -> None:
    a, s = v.analysis, v.summary
    skus = "; ".join(f"{inert(k)} ×{len(v)}" for k, v in a.skus.items()) or "no node compared"
    head = f"{s['nodes']} nodes ({s['ok']} reported"
    head += f", {s['failed']} failed" if s["failed"] else ""
    head += f", {s['other_version']} on another perfstack version" if s["other_version"] else ""
    console.print(Text.assemble((v.title, "bold"), f"  {inert(v.source)}  ·  {head})  ·  {skus}"))
    _ranking(a, console, verbose)
    _drift(a, console, verbose)
    _outliers(a, console, verbose)
    _uneven(a, console, verbose)
    _comms(a, console, verbose)
    failed = [m for m in a.members if m.status != "ok"]
    if failed:
        _section(console, "Did not report")
        for m in failed:
            console.print(Text.assemble(("  " + inert(m.name), "bold"), f"  {inert(m.reason, 200)}"))
    for note in a.notes:
        console.print(Text(f"note: {inert(note)}", style="dim"))
    if v.fanout:
        console.print(Text(v.fanout, style="dim"))
    _totals(a, s, console)


def _ranking(a: FleetAnalysis, console: Console, verbose: bool) -> None:
    if not a.ranking:
        return
    _section(console, "Fix these nodes first")
    t = _grid(None, 28, None)
    for r in a.ranking if verbose else a.ranking[:20]:
        reasons = "; ".join(inert(x, 90) for x in (r.reasons if verbose else r.reasons[:4]))
        if not verbose and len(r.reasons) > 4:
            reasons += f"; +{len(r.reasons) - 4} more"
        t.add_row(Text(f" {r.severity.upper():<8}", style=STYLE[r.severity]), Text(inert(r.node), style="bold"),
                  Text(reasons))
    console.print(t)
    if not verbose and len(a.ranking) > 20:
        console.print(Text(f"  … {len(a.ranking) - 20} more nodes (-v lists them)", style="dim"))


def _drift(a: FleetAnalysis, console: Console, verbose: bool) -> None:
    if not a.drift:
        return
    _section(console, "Configuration drift")
    t = _grid(None, None, None)
    for d in a.drift if verbose else a.drift[:30]:
        odd = "; ".join(f"{nodes_list(g.nodes, 4)}: {inert(g.value, 40)}" for g in d.odd[:3])
        base = "no majority" if d.split else f"{d.baseline_count} nodes: {inert(d.baseline, 40)}"
        t.add_row(Text(inert(d.key), style="bold"), Text(odd), Text(base, style="dim"))
    console.print(t)
    if not verbose and len(a.drift) > 30:
        console.print(Text(f"  … {len(a.drift) - 30} more keys (-v lists them)", style="dim"))


def _outliers(a: FleetAnalysis, console: Console, verbose: bool) -> None:
    slow = [o for o in a.outliers if o.slow or verbose]
    if not slow:
        return
    _section(console, "Figures that stand out")
    t = _grid(None, None, None, None, None)
    for o in slow[:40] if not verbose else slow:
        where = inert(o.node) + (f" {o.subject}" if o.subject else "")
        t.add_row(Text(inert(o.figure)), Text(where, style="bold"),
                  Text(f"{num(o.value, o.unit)}", justify="right"),
                  Text(f"{o.deviation_pct:+.1f}% vs median {num(o.median, o.unit)}",
                       style="red" if o.slow else "green"),
                  Text(f"z {o.z:+.1f} · own noise {o.noise_pct:.1f}% · fleet spread {o.fleet_spread_pct:.1f}% "
                       f"· {o.points} points", style="dim"))
    console.print(t)


def _uneven(a: FleetAnalysis, console: Console, verbose: bool) -> None:
    uneven = [u for u in a.uneven if u.minority or verbose]
    if uneven:
        _section(console, "Findings on some nodes only")
        for u in uneven:
            console.print(Text.assemble(Text(f" {u.severity.upper():<8}", style=STYLE[u.severity]), " ",
                                        (inert(u.id), "bold"), f"  {inert(u.title)}  ",
                                        (f"on {len(u.nodes)} of {u.of}: {nodes_list(u.nodes)}", "dim")))
            first = u.nodes[0]
            console.print(Text(f"           {inert(first)}: {inert(u.evidence.get(first, ''), 160)}", style="dim"))
    if a.shared:
        ids = ", ".join(inert(x.id) for x in a.shared)
        console.print(Text(f"On every node (fix once, in the image or the node setup): {ids}", style="dim"))


def _comms(a: FleetAnalysis, console: Console, verbose: bool) -> None:
    """The all-reduce between machines: the fleet's figure, what stands out, each group with -v."""
    c = a.comms
    if c is None:
        return
    names = c.names
    _section(console, "All-reduce between machines")
    fleet = c.fleet_gbps
    med = c.median_gbps
    console.print(Text(f"  fleet ({len(names)} machines, {inert(c.backend)}, one rank each): "
                       + (f"busbw {fleet:.2f} GB/s" if fleet is not None else "not measured")
                       + (f"  ·  machines' median {med:.2f} GB/s" if med is not None else "")
                       + f"  ·  {inert(c.method)}, {len(c.groups)} all-reduces"))
    for s in c.suspects:
        console.print(Text(f"  {inert(s.text, 200)}", style="red"))
    for m, why in c.failed.items():
        console.print(Text(f"  {inert(names.get(m, m))}: {inert(why, 200)}", style="red"))
    if verbose:
        for g in c.groups:
            who = ", ".join(inert(names.get(m, m)) for m in g.machines)
            best = max((p.busbw_gbps for p in g.points), default=None)
            fig = inert(g.error, 120) if g.error else (f"{best:.2f} GB/s" if best is not None else "-")
            console.print(Text(f"    {inert(g.why):<6} {who}: {fig}", style="dim"))
    for note in c.notes:
        console.print(Text(f"  note: {inert(note)}", style="dim"))


def _totals(a: FleetAnalysis, s: dict[str, Any], console: Console) -> None:
    console.print()
    sev = s["by_severity"]
    console.print(Text.assemble(
        (f"{len(a.ranking)} node(s) flagged", "bold" if a.ranking else "dim"),
        f" ({sev.get('critical', 0)} critical, {sev.get('warning', 0)} warning, {sev.get('info', 0)} info)  ·  ",
        f"{s['drifted_keys']} drifted settings, {s['slow']} slow figures, {s['uneven_findings']} findings on a "
        f"minority of nodes" + (f"  ·  {a.identity_keys} per-node identities ignored" if a.identity_keys else "")))
