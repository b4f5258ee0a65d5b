"""The diff's terminal report, built with rich: formats a ``compare.Diff``, computes nothing."""

from __future__ import annotations

from rich.console import Console
from rich.panel import Panel
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from perfstack.records.diff import Diff
from perfstack.report.numbers import num
from perfstack.report.loadtest_diff import render_text as loadtest_diff_text
from perfstack.report.text_blocks import VERDICT, delta_row, delta_table

STATUS = {"fixed": "green", "introduced": "bold red", "unchanged": "dim", "not checked after": "yellow",
          "not checked before": "yellow"}
SEVERITY = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def _short(v: object, n: int = 48) -> str:
    s = "—" if v is None else str(v)
    return s if len(s) <= n else s[: n - 1] + "…"


def render_diff(diff: Diff, console: Console, verbose: bool = False) -> None:
    _header(diff, console)
    _facts(diff, console)
    _findings(diff, console, verbose)
    _measurements(diff, console, verbose)
    if diff.loadtest is not None:
        loadtest_diff_text(diff.loadtest, console, verbose)
    _profile(diff, console)
    _totals(diff, console)


def _section(console: Console, title: str) -> None:
    console.print(Rule(Text(title, style="bold"), align="left", style="dim"))


def _header(diff: Diff, console: Console) -> None:
    b, a = diff.before, diff.after
    console.print(Text("perfstack diff", style="bold"))
    console.print(Text(f"  before: {b.file or b.created or ''} · {b.gpus or 'no GPU'}"))
    console.print(Text(f"  after:  {a.file or a.created or ''} · {a.gpus or 'no GPU'}"))
    if diff.kinds_differ():
        console.print(Text(f"  note: {diff.kinds_differ()}", style="yellow"))
    if not diff.hardware.same:
        lines = "\n".join(f"{k}: {_short(diff.hardware.before.value(k))} → {_short(diff.hardware.after.value(k))}"
                          for k in diff.hardware.differs)
        console.print(Panel(Text(lines), title="The hardware differs", border_style="yellow",
                            subtitle="figures marked 'hardware differs' compare the machines, not the change"))


def _facts(diff: Diff, console: Console) -> None:
    if diff.facts:
        _section(console, f"Facts that drifted ({len(diff.facts)})")
        t = Table(box=None, pad_edge=False, header_style="bold")
        t.add_column("category", no_wrap=True)
        for col in ("fact", "before", "after"):
            t.add_column(col, overflow="fold")
        for fact in diff.facts:
            t.add_row(Text(fact.category), Text(fact.key), Text(_short(fact.before)),
                      Text(_short(fact.after)))
        console.print(t)
    if diff.volatile_facts:
        console.print(Text(f"{diff.volatile_facts} volatile readings (temperatures, free memory, pressure) changed "
                           "and are not listed", style="dim"))


def _findings(diff: Diff, console: Console, verbose: bool) -> None:
    if not diff.findings:
        return
    _section(console, "Findings")
    t = Table("status", "severity", "finding", "evidence", box=None, pad_edge=False, header_style="bold")
    for f in diff.findings:
        if f.status == "unchanged" and not verbose:
            continue
        t.add_row(Text(f.status, style=STATUS[f.status]), Text(f.severity, style=SEVERITY.get(f.severity, "")),
                  Text(f.id + (f" [{f.subject}]" if f.subject else "")),
                  Text(_short(f.reason or f.evidence_after or f.evidence_before, 70)))
    unchanged = diff.summary()["findings"]["unchanged"]
    if t.row_count:
        console.print(t)
    if unchanged and not verbose:
        console.print(Text(f"{unchanged} unchanged (-v lists them)", style="dim"))


def _measurements(diff: Diff, console: Console, verbose: bool) -> None:
    if not diff.measurements:
        return
    _section(console, "Benchmarks")
    t = delta_table(verbose)
    hidden: dict[str, int] = {}
    for m in diff.measurements:
        if m.sweep and not verbose:
            hidden[m.verdict] = hidden.get(m.verdict, 0) + 1
            continue
        t.add_row(*delta_row(m, verbose))
    console.print(t)
    if hidden:
        counts = ", ".join(f"{n} {v}" for v, n in sorted(hidden.items()))
        console.print(Text(f"{sum(hidden.values())} sweep points not shown ({counts}); -v shows them",
                           style="dim"))


def _profile(diff: Diff, console: Console) -> None:
    p = diff.profile
    if not p:
        return
    _section(console, "Profile: time per step")
    t = Table("category", "before (ms)", "after (ms)", "Δ (ms)", box=None, pad_edge=False, header_style="bold")
    for r in p.categories:
        t.add_row(Text(r.category), num(r.before_ms), num(r.after_ms),
                  f"{r.delta_ms:+.2f}" if r.delta_ms is not None else "—")
    console.print(t)
    console.print(Text(f"measured recovered {num(p.measured_recovered_ms, 'ms')} per step ({p.step_basis}); "
                       f"fixed findings "
                       f"predicted {num(p.predicted_recovered_ms, 'ms')}"
                       + (f" ({', '.join(p.predicted_by)})" if p.predicted_by else "")))


def _totals(diff: Diff, console: Console) -> None:
    s = diff.summary()
    m, f = s["measurements"], s["findings"]
    console.print()
    console.print(Text.assemble(
        (f"{m['regressed']} regressed", VERDICT["regressed"] if m["regressed"] else "dim"), ", ",
        (f"{m['improved']} improved", VERDICT["improved"] if m["improved"] else "dim"), ", ",
        f"{m['within noise']} within noise, {m['not compared']} not compared",
        f"  ·  findings: {f['fixed']} fixed, {f['introduced']} introduced, {f['unchanged']} unchanged",
        f"  ·  {s['facts_drifted']} facts drifted"))
