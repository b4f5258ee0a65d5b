"""The load test's terminal report: who was tested, one row per load level, the sweep's verdict, why."""

from __future__ import annotations

import math
from typing import Optional

from rich.console import Console
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from perfstack.loadtest.record import Dist, Level, LoadTest
from perfstack.model import Run
from perfstack.report.text import _finding


def load_label(lv: Level) -> str:
    if lv.mode == "concurrency":
        return f"{lv.load:g} streams"
    return "all at once" if math.isinf(lv.load) else f"{lv.load:g}/s"


def ms(d: Optional[Dist], which: str) -> str:
    if d is None:
        return "—"
    v = getattr(d, which)
    return f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"


def level_rows(lt: LoadTest) -> list[list[str]]:
    """The level table as strings (shared by the Markdown and HTML renderers)."""
    rows = []
    for lv in lt.levels:
        s = lv.summary
        good = f"{s.slo_attainment:.0%}" if s.slo_attainment is not None else "—"
        rows.append([load_label(lv) + (" (partial)" if lv.interrupted else ""),
                     f"{s.completed}" + (f" +{s.failed}✗" if s.failed else ""),
                     f"{s.request_throughput:,.2f}", f"{s.output_throughput:,.0f}",
                     f"{ms(s.ttft, 'median')}/{ms(s.ttft, 'p99')}", f"{ms(s.tpot, 'median')}/{ms(s.tpot, 'p99')}",
                     f"{ms(s.itl, 'median')}/{ms(s.itl, 'p99')}", ms(s.e2e, "median"), good])
    return rows


HEADERS = ["load", "done", "req/s", "out tok/s", "TTFT p50/p99 ms", "TPOT p50/p99 ms", "ITL p50/p99 ms",
           "E2E p50 ms", "met SLO"]


def headline(lt: LoadTest) -> str:
    ident = lt.server
    who = ident.get("version") or ident.get("server") or ""
    return f"{lt.url}  ·  {lt.model}  ·  /v1/{'chat/completions' if lt.api == 'chat' else 'completions'}" + (
        f"  ·  {who}" if who else "")


def workload_line(lt: LoadTest) -> str:
    w = lt.workload
    if w.get("kind") == "file":
        shape = f"{w.get('requests')} prompts from {w.get('file')}"
    else:
        spread = f" ±{w.get('spread', 0):.0%}" if w.get("spread") else ""
        shape = f"synthetic {w.get('input_len')}{spread} in → {w.get('output_len')}{spread} out tokens"
        if w.get("shared_prefix"):
            shape += f", {w['shared_prefix']}-token shared prefix"
    slo = ""
    if lt.slo is not None:
        parts = [f"{k}≤{v:g} ms" for k, v in (("TTFT", lt.slo.ttft_ms), ("TPOT", lt.slo.itl_ms), ("E2E", lt.slo.e2e_ms))
                 if v is not None]
        slo = f"  ·  SLO {', '.join(parts)} for {lt.slo.attainment:.0%} of requests"
    return shape + ("" if w.get("ignore_eos") else ", lengths chosen by the model") + slo


def sweep_line(lt: LoadTest) -> str:
    sw = lt.sweep
    if not sw:
        return ""
    unit = " streams" if sw.get("mode") == "concurrency" else " req/s"
    parts = []
    if sw.get("knee") is not None:
        parts.append(f"knee at {sw['knee']:g}{unit} ({sw.get('knee_output_throughput', 0):,.0f} tok/s, "
                     f"best {sw.get('best_output_throughput', 0):,.0f})")
    if "max_load_meeting_slo" in sw:
        m = sw["max_load_meeting_slo"]
        parts.append(f"highest load meeting the SLO: {m:g}{unit}" if m is not None else "no load tried met the SLO")
    if sw.get("stopped"):
        parts.append(f"stopped: {sw['stopped']}")
    return "  ·  ".join(parts)


def render_loadtest(run: Run, console: Console, verbose: bool = False) -> None:
    lt = run.loadtest
    if lt is None:
        raise ValueError("render_loadtest takes a load-test Run")
    console.print(Text.assemble(("perfstack loadtest", "bold"), "  ", headline(lt)), markup=False)
    console.print(Text(workload_line(lt), style="dim"))
    t = Table(*HEADERS, box=None, pad_edge=False, header_style="bold")
    for row in level_rows(lt):
        t.add_row(*(Text(c) for c in row))
    # a pipe or a file gets the whole table: cut cells lose figures
    console.print(t, width=console.width if console.is_terminal else max(console.width, 140))
    line = sweep_line(lt)
    if line:
        console.print(Text(line))
    for lv in lt.levels:
        c = lv.client
        if verbose and c is not None:
            procs = f" in {c.processes} processes (busiest shown)" if c.processes > 1 else ""
            console.print(Text(f"  client at {load_label(lv)}{procs}: {c.cpu_fraction:.0%} CPU, timer lag p99 "
                               f"{c.loop_lag_p99_ms:.2f} ms, {c.cpu_us_per_chunk:.0f} µs CPU per chunk", style="dim"))
    for n in lt.notes:
        console.print(Text(f"note: {n}", style="dim"))
    console.print(Rule(Text("Why", style="bold"), align="left", style="dim"))
    if not run.findings:
        console.print(Text("  no findings", style="dim"))
    for f in run.findings:
        console.print(_finding(f, verbose))
