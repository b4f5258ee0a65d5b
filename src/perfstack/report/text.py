"""The doctor's terminal report, built with rich from the RunView (report.views), as every renderer is."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.rule import Rule
from rich.text import Text

from perfstack.model import LAYERS, CheckResult
from perfstack.report.text_blocks import STYLE, finding
from perfstack.report.views import RunView

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
            console.print(finding(f, verbose), crop=False)
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
