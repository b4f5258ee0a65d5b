"""Terminal rendering of an estimate Run: one table per section (component, value, formula).

Only formats: every number and string comes from the estimate sheet the view carries (see perfstack.estimate).
``verbose`` adds each figure's inputs and assumptions under its row.
"""

from __future__ import annotations

from typing import Any, Mapping

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfstack.estimate import catalog
from perfstack.estimate.params import count
from perfstack.estimate.quantity import fmt_value
from perfstack.records.estimates import EstimateSheet, Figure
from perfstack.report.views import RunView

SECTION_TITLES = {"params": "Parameters", "memory": "Memory per GPU", "capacity": "Capacity", "flops": "Work per phase",
                  "time": "Time (roofline bounds, then expected)", "comms": "Communication"}


def _inputs(d: dict[str, Any]) -> str:
    parts = []
    for k, v in d.items():
        if isinstance(v, float):
            v = f"{v:.4g}"
        elif isinstance(v, int) and abs(v) >= 10_000:
            v = f"{v:,}"
        parts.append(f"{k}={v}")
    return ", ".join(parts)


def _settings(est: EstimateSheet) -> str:
    s = est.settings
    if est.kind == "infer":
        txt = f"batch {s['batch']} · prompt {s['prompt']} · gen {s['gen']} · {s['dtype']}"
        if s.get("weights"):
            txt += f" · weights {s['weights']}"
        if s.get("kv_dtype"):
            txt += f" · KV {s['kv_dtype']}"
        return txt + (f" · TP {s['tp']}" if s["tp"] > 1 else "")
    txt = f"micro-batch {s['batch']} × seq {s['seq']} · {s['precision']} · {s['optimizer']}"
    if s["grad_ckpt"]:
        txt += " · grad-ckpt"
    if s["zero"]:
        txt += f" · ZeRO-{s['zero']}"
    return txt + f" · DP {s['dp']} TP {s['tp']} PP {s['pp']}"


def render_estimate(view: RunView, console: Console, verbose: bool = False) -> None:
    est = view.estimates.sheet if view.estimates else None
    if est is None:
        return
    model = est.model or {}
    console.print(Text.assemble((f"perfstack estimate {est.kind}", "bold"), "  ·  ",
                                model.get("name", "?"), "  ·  ", (est.gpu or {}).get("name", "?")))
    console.print(Text(model.get("description", ""), style="dim"))
    console.print(Text(_settings(est), style="dim"))
    for section, title in SECTION_TITLES.items():
        keys = est.section(section)
        if keys:
            console.print(_section_table(title, keys, est.working, verbose))
    regime = est.regime or {}
    if regime:
        console.print(Text("regime: " + ", ".join(f"{k} {v}" for k, v in regime.items())))
    _fit(est, console, verbose)
    for a in est.assumptions or []:
        console.print(Text(f"· {a}", style="dim"))
    if not verbose:
        console.print(Text("-v shows every figure's inputs and assumptions; --json has them all", style="dim"))


def _section_table(title: str, keys: Mapping[str, Any], working: Mapping[str, Figure], verbose: bool) -> Table:
    """One section of the sheet (memory, time, ...): each figure's value and formula, -v its inputs too."""
    t = Table("component", "value", "formula", title=title, title_justify="left", title_style="bold",
              box=None, pad_edge=False, header_style="bold")
    for key in keys:
        w = working.get(key)
        if not w:
            continue
        style = "bold" if key in ("total_bytes", "ttft_s", "itl_s", "step_time_s", "max_batch") else ""
        t.add_row(Text(w.label, style=style), Text(fmt_value(w.value, w.unit), style=style), Text(w.formula))
        if verbose and (w.inputs or w.assumptions):
            extra = "; ".join(filter(None, [_inputs(w.inputs), *w.assumptions]))
            t.add_row("", "", Text(extra, style="dim"))
    return t


def _fit(est: EstimateSheet, console: Console, verbose: bool) -> None:
    """Which GPUs of the table the model fits on: one, with tensor parallelism, or (-v) not at all."""
    fit = est.fit or []
    if est.kind == "infer" and fit:
        ones = [r.gpu for r in fit if r.gpus_needed == 1]
        multi = [f"{r.gpu}×{r.gpus_needed}" for r in fit if r.gpus_needed and r.gpus_needed > 1]
        none = [r.gpu for r in fit if not r.gpus_needed]
        console.print(Text.assemble(("fits on one: ", "bold"), ", ".join(ones) or "none"))
        if multi:
            console.print(Text.assemble(("needs tensor parallelism: ", "bold"), ", ".join(multi)))
        if none and verbose:
            console.print(Text.assemble(("does not fit (up to 64): ", "bold"), ", ".join(none)))
    elif fit:
        ok = [r.gpu for r in fit if r.fits]
        console.print(Text.assemble(("per-GPU memory fits: ", "bold"), ", ".join(ok) or "none of the table's GPUs"))


def render_models(console: Console) -> None:
    t = Table("name", "type", "parameters", "active", "source", box=None, pad_edge=False, header_style="bold")
    for name in catalog.names():
        spec = catalog.get(name)
        c = count(spec)
        t.add_row(name, spec.model_type, fmt_value(c.total, "params"),
                  fmt_value(c.active, "params") if c.active != c.total else "", spec.describe())
    console.print(t)
