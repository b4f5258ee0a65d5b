"""What a load test's reports show, computed once from the Run for every format, the terminal's included.

The headline, the workload, the level table and the sweep's verdict; the latency-against-throughput
curves of a sweep (one point per level, x its output throughput; the knee, the highest load meeting the
SLO and the SLO's objectives marked); what the server's metrics endpoint said per level, the errors by
kind and the client's own load. The renderers (text, Markdown, HTML) only format a ``LoadtestView``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

from perfstack.loadtest.metrics import figure
from perfstack.loadtest.sweep import tput
from perfstack.records.loadtest import Dist, Level, LoadTest
from perfstack.model import Finding, Run

X_LABEL = "output throughput (tokens/s)"
META_KEYS = ("command", "created", "source", "tool_version", "python", "elapsed_s")


def load_label(lv: Level) -> str:
    if lv.mode == "concurrency":
        return f"{lv.load:g} streams"
    if lv.mode == "trace":
        return f"trace ×{lv.load:g}"
    return "all at once" if math.isinf(lv.load) else f"{lv.load:g}/s"


def in_load_order(levels: list[Level]) -> list[Level]:
    """Levels by load, a rate sweep's capacity probe first (a bisection adds loads out of order)."""
    return sorted(levels, key=lambda lv: (not lv.probe, lv.load))


def ms(d: Optional[Dist], which: str) -> str:
    if d is None:
        return "—"
    v = getattr(d, which)
    return f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"


def level_rows(lt: LoadTest) -> list[list[str]]:
    """The level table as strings."""
    rows = []
    for lv in in_load_order(lt.levels):
        s = lv.summary
        good = f"{s.slo_attainment:.0%}" if s.slo_attainment is not None else "—"
        rows.append([load_label(lv) + (" (capacity probe)" if lv.probe else "") + (" (partial)" if lv.interrupted else ""),
                     f"{s.completed}" + (f" +{s.failed}✗" if s.failed else ""),
                     f"{s.request_throughput:,.2f}", f"{s.output_throughput:,.0f}",
                     f"{ms(s.ttft, 'median')}/{ms(s.ttft, 'p99')}", f"{ms(s.tpot, 'median')}/{ms(s.tpot, 'p99')}",
                     f"{ms(s.itl, 'median')}/{ms(s.itl, 'p99')}", ms(s.e2e, "median"), good])
    return rows


HEADERS = ["load", "done", "req/s", "out tok/s", "TTFT p50/p99 ms", "TPOT p50/p99 ms", "ITL p50/p99 ms",
           "E2E p50 ms", "met SLO"]


REPEAT_HEADERS = ["load", "runs", "out tok/s", "TTFT p50 ms", "TPOT p50 ms", "ITL p50 ms", "E2E p50 ms", "interval"]
REPEAT_FIGURES = (("output_throughput", "{:,.0f}"), ("ttft.median", None), ("tpot.median", None),
                  ("itl.median", None), ("e2e.median", None))


def _num(v: float, spec: Optional[str]) -> str:
    if spec:
        return spec.format(v)
    return f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"


def repeat_rows(lt: LoadTest) -> list[list[str]]:
    """Levels run several times: each figure's median over the runs and its interval across them."""
    rows = []
    for lv in in_load_order(lt.levels):
        if lv.repeats < 2 or not lv.ci:
            continue
        cells = [load_label(lv), str(lv.repeats)]
        for key, spec in REPEAT_FIGURES:
            mid = figure(lv.summary, key)
            ci = lv.ci.get(key)
            if mid is None:
                cells.append("—")
            else:
                cells.append(_num(mid, spec) + (f" ({_num(ci[0], spec)}–{_num(ci[1], spec)})" if ci and len(ci) == 2 else ""))
        cells.append(f"{lv.ci_coverage:.0%}" if lv.ci_coverage is not None else "—")
        rows.append(cells)
    return rows


def headline(lt: LoadTest) -> str:
    ident = lt.server
    who = ident.get("version") or ident.get("server") or ""
    return f"{lt.url}  ·  {lt.model}  ·  /v1/{'chat/completions' if lt.api == 'chat' else 'completions'}" + (
        f"  ·  {who}" if who else "")


def workload_line(lt: LoadTest) -> str:
    w = lt.workload
    if w.get("kind") == "file":
        shape = f"{w.get('entries')} prompts from {w.get('file')}"
    elif w.get("kind") == "trace":
        shape = f"trace {w.get('file')}: {w.get('entries')} requests over {w.get('span_s', 0):,.1f} s"
    else:
        spread = f" ±{w.get('spread', 0):.0%}" if w.get("spread") else ""
        shape = f"synthetic {w.get('input_len')}{spread} in → {w.get('output_len')}{spread} out tokens"
        if w.get("shared_prefix"):
            many = w.get("prefixes", 1)
            shape += f", {w['shared_prefix']}-token shared prefix" + (f" (one of {many})" if many > 1 else "")
        if w.get("turns"):
            shape += f", conversations of {w['turns']} turns (history resent each turn)"
    if w.get("ramp_s"):
        shape += f", load ramped up over {w['ramp_s']:g} s"
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
    if sw.get("capacity_req_s") is not None:
        parts.append(f"capacity {sw['capacity_req_s']:,.3g} req/s while the server was full")
    per_s = "req/s" if lt.api == "embeddings" else "tok/s"
    if sw.get("knee") is not None:
        parts.append(f"knee at {sw['knee']:g}{unit} ({sw.get('knee_output_throughput', 0):,.0f} {per_s}, "
                     f"best {sw.get('best_output_throughput', 0):,.0f})")
    elif sw.get("knee_not_reached"):
        parts.append(f"knee not reached: {sw['knee_not_reached']}; best {sw.get('best_output_throughput', 0):,.0f} "
                     f"{per_s}")
    if "max_load_meeting_slo" in sw:
        m = sw["max_load_meeting_slo"]
        if m is None:
            parts.append("no load tried met the SLO")
        else:
            extra = []
            if sw.get("confidence_at_max") is not None:
                extra.append(f"{sw['confidence_at_max']:.0%} confident it does")
            if sw.get("min_load_missing_slo") is not None:
                extra.append(f"{sw['min_load_missing_slo']:g}{unit} missed it")
            parts.append(f"highest load meeting the SLO: {m:g}{unit}" + (f" ({'; '.join(extra)})" if extra else ""))
    if sw.get("stopped") and not sw.get("knee_not_reached"):
        parts.append(sw["stopped"] if sw["stopped"].startswith("stopped") else f"stopped: {sw['stopped']}")
    return "  ·  ".join(parts)


@dataclass
class Curve:
    title: str
    y_label: str
    series: list[tuple[str, list[tuple[float, float, str]], bool]]  # (name, [(tok/s, ms, level)], dashed)
    hlines: list[tuple[str, float]]  # (label, ms): the SLO's objective
    vlines: list[tuple[str, float]]  # (label, tok/s): the knee, the highest load meeting the SLO
    kind: str
    x_label: str = X_LABEL  # requests/s where nothing is generated (embeddings)


@dataclass
class LoadtestView:
    title: str
    headline: str
    workload: str
    headers: list[str]
    rows: list[list[str]]
    sweep: str
    notes: list[str]
    findings: list[Finding]
    curves: list[Curve] = field(default_factory=list)
    server: list[list[str]] = field(default_factory=list)  # per level: load, running, waiting, KV, preemptions
    errors: list[list[str]] = field(default_factory=list)  # per level with failures: load, kind, count, detail
    client: list[list[str]] = field(default_factory=list)  # per level: load, CPU, timer lag p99, CPU per chunk
    repeats: list[list[str]] = field(default_factory=list)  # repeated levels: median (interval) per figure
    meta: list[tuple[str, str]] = field(default_factory=list)
    interrupted: bool = False


def _series(levels: list[Level], name: str, dist: str, stat: str, dashed: bool) -> tuple[str, list[Any], bool]:
    pts = []
    for lv in levels:
        d = getattr(lv.summary, dist)
        if d is not None:
            pts.append((tput(lv), getattr(d, stat), load_label(lv)))
    return name, pts, dashed


def _marks(lt: LoadTest, levels: list[Level]) -> list[tuple[str, float]]:
    at = {lv.load: lv for lv in levels}
    out = []
    knee = lt.sweep.get("knee")
    if knee in at:
        out.append((f"knee: {load_label(at[knee])}", tput(at[knee])))
    best = lt.sweep.get("max_load_meeting_slo")
    if best in at and best != knee:
        out.append((f"highest meeting the SLO: {load_label(at[best])}", tput(at[best])))
    return out


def curves(lt: LoadTest) -> list[Curve]:
    """Latency against throughput, one point per level, in load order; none for a single level."""
    # the capacity probe is no load on the curve: its line would fold back from it
    levels = in_load_order([lv for lv in lt.levels if lv.summary.completed and not lv.probe])
    if len(levels) < 2:
        return []
    marks = _marks(lt, levels)
    slo = lt.slo
    ttft_ref = [(f"SLO TTFT ≤ {slo.ttft_ms:g} ms", slo.ttft_ms)] if slo is not None and slo.ttft_ms else []
    tpot_ref = [(f"SLO TPOT ≤ {slo.itl_ms:g} ms", slo.itl_ms)] if slo is not None and slo.itl_ms else []
    x_label = "requests/s" if lt.api == "embeddings" else X_LABEL
    return [
        Curve("Time to first token against throughput", "TTFT (ms)",
              [_series(levels, "TTFT p50", "ttft", "median", False), _series(levels, "TTFT p99", "ttft", "p99", True)],
              ttft_ref, marks, "loadtest-ttft", x_label),
        Curve("Time per output token and inter-token gaps against throughput", "ms",
              [_series(levels, "TPOT p50", "tpot", "median", False), _series(levels, "TPOT p99", "tpot", "p99", True),
               _series(levels, "ITL p50", "itl", "median", False), _series(levels, "ITL p99", "itl", "p99", True)],
              tpot_ref, marks, "loadtest-tpot", x_label),
    ]


def _fmt(v: Optional[float], spec: str = "g") -> str:
    return "—" if v is None else format(v, spec)


def server_rows(lt: LoadTest) -> list[list[str]]:
    rows = []
    for lv in in_load_order(lt.levels):
        if not lv.server:
            continue
        peak = lambda attr: max((getattr(s, attr) for s in lv.server if getattr(s, attr) is not None),  # noqa: E731
                                default=None)
        pre = [s.preemptions for s in lv.server if s.preemptions is not None]
        kv = peak("kv_usage")
        rows.append([load_label(lv), _fmt(peak("running")), _fmt(peak("waiting")),
                     "—" if kv is None else f"{kv:.0%}", _fmt(pre[-1] - pre[0] if pre else None)])
    return rows


def error_rows(lt: LoadTest) -> list[list[str]]:
    rows = []
    for lv in in_load_order(lt.levels):
        for kind, n in sorted(lv.summary.errors.items()):
            detail = next((r.detail for r in lv.requests if not r.warmup and (r.error or "no-text") == kind
                           and r.detail), "")
            rows.append([load_label(lv), kind, str(n), detail])
    return rows


def client_rows(lt: LoadTest) -> list[list[str]]:
    return [[load_label(lv), f"{c.cpu_fraction:.0%}", f"{c.loop_lag_p99_ms:.2f} ms", f"{c.cpu_us_per_chunk:.0f} µs",
             str(c.processes)] for lv in in_load_order(lt.levels) if (c := lv.client) is not None]


def loadtest_view(run: Run) -> Optional[LoadtestView]:
    """The view of a load-test Run, or None when the Run holds no load test."""
    return None if run.loadtest is None else view_of(run.loadtest, run)


def view_of(lt: LoadTest, run: Run) -> LoadtestView:
    """The view of ``lt``, the load test ``run`` holds (its findings and metadata are the Run's)."""
    return LoadtestView(
        title="perfstack loadtest", headline=headline(lt), workload=workload_line(lt), headers=list(HEADERS),
        rows=level_rows(lt), sweep=sweep_line(lt), notes=list(lt.notes), findings=list(run.findings),
        curves=curves(lt), server=server_rows(lt), errors=error_rows(lt), client=client_rows(lt),
        repeats=repeat_rows(lt),
        meta=run.meta.shown(META_KEYS),
        interrupted=lt.interrupted)
