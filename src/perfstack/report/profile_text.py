"""Terminal rendering of a profile Run: per-step breakdown bars and ranked findings."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfstack.model import Run
from perfstack.report.views import profile_timing

COLORS = {"gemm": "green", "conv": "green4", "attention": "cyan", "elementwise": "blue", "copy": "bright_blue",
          "optimizer": "magenta", "memcpy": "yellow", "memset": "yellow", "comm": "red", "other": "white",
          "idle": "grey50", "cpu": "white"}
SEV = {"critical": "bold red", "warning": "yellow", "info": "dim"}


def _bar(cats: dict[str, float], total: float, width: int = 40) -> Text:
    t = Text()
    if not total:
        return t
    for c, v in cats.items():
        n = int(round(width * v / total))
        if n:
            t.append(("█" if c != "idle" else "░") * n, style=COLORS.get(c, "white"))
    return t


def render_profile(run: Run, console: Console, verbose: bool = False) -> None:
    p = run.profile or {}
    _header(run, p, console)
    _steps(p, console)
    _lines(p, console, verbose)
    _ops(p, console, verbose)
    if verbose:
        _kernels(p, console)
    if p.get("straggler"):
        s = p["straggler"]
        console.print(Text(f"slowest rank: {s['rank']} (+{s['excess_ms']:.2f} ms/step outside communication; {s['cause']})"))
    console.print()
    _findings(run, console)


def _header(run: Run, p: dict[str, Any], console: Console) -> None:
    head = f"perfstack profile — {p.get('device_name') or 'no GPU'}"
    if p.get("ranks"):
        head += f", {len(p['ranks'])} ranks"
    console.print(Text(head, style="bold"))
    for w in run.meta.get("warnings", []):
        console.print(Text(f"warning: {w}", style="yellow"))
    for n in p.get("notes", []):
        console.print(Text(f"note: {n}", style="dim"))


def _steps(p: dict[str, Any], console: Console) -> None:
    steps = p.get("steps") or []
    if not steps:
        return
    t = Table(box=None, pad_edge=False, title="per step (ms)", title_justify="left")
    for col in ("step", "wall", "GPU busy", "idle", "kernels", "syncs", "breakdown"):
        t.add_column(col, justify="right" if col not in ("breakdown",) else "left")
    for s in steps:
        t.add_row(Text(str(s["step"])), f"{s['total_ms']:.2f}", f"{s['busy_pct']:.0f}%", f"{s['idle_ms']:.2f}",
                  str(s["kernels"]), str(s["syncs"]), _bar(s["categories"], s["total_ms"]))
    console.print(t)
    mean = p.get("breakdown_ms") or {}
    legend = Text("mean: ")
    for c, v in sorted(mean.items(), key=lambda kv: -kv[1]):
        legend.append(f"{c} {v:.2f}  ", style=COLORS.get(c, "white"))
    console.print(legend)


def _lines(p: dict[str, Any], console: Console, verbose: bool) -> None:
    """One line each: timing, profiler overhead, phases, idle causes, launch, NCCL, MFU."""
    timing = profile_timing(p)
    if timing:
        console.print(Text(" · ".join(f"{k} {v}" for k, v in timing)))
    o = p.get("overhead") or {}
    if o.get("note") and verbose:
        console.print(Text(f"profiler overhead: {o['note']}", style="dim"))
    phases = p.get("phases_ms") or {}
    if phases:
        console.print(Text("GPU time by phase (ms/step): " + ", ".join(f"{k} {v:.2f}" for k, v in phases.items())))
    idle = p.get("idle_by_reason_ms") or {}
    if idle:
        console.print(Text("GPU idle by CPU activity (ms/step): " + ", ".join(f"{k} {v:.2f}" for k, v in idle.items())))
    L = p.get("launch") or {}
    if L:
        lts = L.get("launch_to_start_us") or {}
        console.print(Text(f"launch: {L.get('kernels_per_step', 0):g} kernels/step, median {_us(L.get('median_kernel_us'))}, "
                           f"launch→start median {_us(lts.get('median'))}; syncs {p['sync']['calls_per_step']:g}/step; "
                           f"allocator calls {p['allocator']['calls_per_step']:g}/step"))
    if p.get("comm", {}).get("ms_per_step"):
        c = p["comm"]
        console.print(Text(f"NCCL: {c['ms_per_step']:.2f} ms/step, {c['overlap_pct']:.0f}% overlapped with compute"))
    if p.get("mfu") and verbose:
        console.print(Text(f"MFU {100 * p['mfu']['value']:.1f}% of {p['mfu']['peak_tflops']:g} TFLOP/s "
                           f"{p['mfu']['dtype']} ({p['mfu']['source']})"))


def _ops(p: dict[str, Any], console: Console, verbose: bool) -> None:
    ops = p.get("ops") or []
    if not ops:
        return
    ot = Table("operator", "category", "dtype", "ms/step", "TFLOP/s", "GB/s", box=None, pad_edge=False,
               title="operators by GPU time", title_justify="left")
    for r in ops[:15 if verbose else 8]:
        ot.add_row(Text(str(r["op"])[:50]), Text(str(r["category"])), Text(str(r.get("dtype") or "")), f"{r['time_ms_per_step']:.3f}",
                   _n(r.get("tflops")), _n(r.get("gbps")))
    console.print(ot)


def _kernels(p: dict[str, Any], console: Console) -> None:
    k = Table("kernel", "cat", "count", "ms/step", box=None, pad_edge=False, title="top kernels", title_justify="left")
    for r in p.get("top_kernels", [])[:10]:
        k.add_row(Text(r["name"][:70]), Text(str(r["category"])), str(r["count"]), f"{r['time_ms_per_step']:.3f}")
    console.print(k)


def _findings(run: Run, console: Console) -> None:
    if not run.findings:
        console.print(Text("no findings: nothing in this trace costs a measurable share of the step", style="green"))
        return
    ft = Table(box=None, pad_edge=False, title="findings, by time a fix would recover per step", title_justify="left")
    for col in ("#", "id", "severity", "recover", "%"):
        ft.add_column(col, justify="right" if col in ("#", "recover", "%") else "left")
    for i, f in enumerate(run.findings, 1):
        ft.add_row(str(i), Text(f.id + (f" [{f.subject}]" if f.subject else "")), Text(f.severity.value, style=SEV[f.severity.value]),
                   f"{f.recoverable_ms or 0:.2f} ms", f"{f.recoverable_pct or 0:.0f}%")
    console.print(ft)
    for i, f in enumerate(run.findings, 1):
        console.print(Text(f"\n{i}. {f.title}", style="bold"))
        console.print(Text(f"   evidence: {f.evidence}"))
        console.print(Text(f"   fix: {f.fix}"))
    console.print(Text("\nEach figure is what that fix alone would recover, replayed through a model of the CPU and "
                       "GPU timelines with the profiler's CPU overhead removed; they overlap and do not add up. "
                       "'perfstack explain ID' shows how each is estimated.", style="dim"))


def _n(v: float | None) -> str:
    return "—" if v is None else f"{v:g}"


def _us(v: float | None) -> str:
    return "—" if v is None else f"{v:g} µs"
