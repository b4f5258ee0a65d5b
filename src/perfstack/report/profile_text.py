"""Terminal rendering of a profile Run's view: per-step breakdown bars and ranked findings."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfstack.model import Finding
from perfstack.records.profile import Allocator, Section, Sync
from perfstack.report.views import ProfileView, RunView

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


def render_profile(view: RunView, console: Console, verbose: bool = False) -> None:
    pv = view.profile or ProfileView(categories=[], steps=[], step_ms=None, gaps=[], ranked=[], kernels=[])
    p = pv.section
    _header(pv, console)
    _steps(pv, console, verbose)
    _lines(pv, console, verbose)
    _ops(p, console, verbose)
    if verbose:
        _kernels(p, console)
    if p.straggler:
        s = p.straggler
        console.print(Text(f"slowest rank: {s.rank} (+{s.excess_ms:.2f} ms/step outside communication; {s.cause})"))
    console.print()
    _findings(pv.ranked, console)


def _header(pv: ProfileView, console: Console) -> None:
    p = pv.section
    head = f"perfstack profile — {p.device_name or 'no GPU'}"
    if p.ranks:
        head += f", {len(p.ranks)} ranks"
    console.print(Text(head, style="bold"))
    for w in pv.warnings:
        console.print(Text(f"warning: {w}", style="yellow"))
    for n in p.notes:
        console.print(Text(f"note: {n}", style="dim"))


def _steps(pv: ProfileView, console: Console, verbose: bool) -> None:
    p = pv.section
    if not p.steps:
        return
    shown = p.steps if verbose else pv.shown_steps
    t = Table(box=None, pad_edge=False, title="per step (ms)", title_justify="left")
    for col in ("step", "wall", "GPU busy", "idle", "kernels", "syncs", "breakdown"):
        t.add_column(col, justify="right" if col not in ("breakdown",) else "left")
    for s in shown:
        t.add_row(Text(str(s.step)), f"{s.total_ms:.2f}", f"{s.busy_pct:.0f}%", f"{s.idle_ms:.2f}",
                  str(s.kernels), str(s.syncs), _bar(s.categories, s.total_ms))
    console.print(t)
    if pv.steps_note and not verbose:
        console.print(Text(f"{pv.steps_note} (-v shows them all)", style="dim"))
    legend = Text("mean: ")
    for c, v in sorted(p.breakdown_ms.items(), key=lambda kv: -kv[1]):
        legend.append(f"{c} {v:.2f}  ", style=COLORS.get(c, "white"))
    console.print(legend)


def _lines(pv: ProfileView, console: Console, verbose: bool) -> None:
    """One line each: timing, profiler overhead, phases, idle causes, launch, NCCL, MFU."""
    p = pv.section
    if pv.timing:
        console.print(Text(" · ".join(f"{k} {v}" for k, v in pv.timing)))
    if p.overhead is not None and p.overhead.note and verbose:
        console.print(Text(f"profiler overhead: {p.overhead.note}", style="dim"))
    if p.phases_ms:
        console.print(Text("GPU time by phase (ms/step): " + ", ".join(f"{k} {v:.2f}" for k, v in p.phases_ms.items())))
    if p.idle_by_reason_ms:
        console.print(Text("GPU idle by CPU activity (ms/step): "
                           + ", ".join(f"{k} {v:.2f}" for k, v in p.idle_by_reason_ms.items())))
    L = p.launch
    if L is not None:
        console.print(Text(f"launch: {L.kernels_per_step:g} kernels/step, median {_us(L.median_kernel_us)}, "
                           f"launch→start median {_us(L.launch_to_start_us.median)}; "
                           f"syncs {(p.sync or Sync()).calls_per_step:g}/step; "
                           f"allocator calls {(p.allocator or Allocator()).calls_per_step:g}/step"))
    if p.comm and p.comm.ms_per_step:
        c = p.comm
        console.print(Text(f"NCCL: {c.ms_per_step:.2f} ms/step, {c.overlap_pct:.0f}% overlapped with compute"))
    if p.mfu and verbose:
        m = p.mfu
        console.print(Text(f"MFU {100 * m.value:.1f}% of {m.peak_tflops:g} TFLOP/s {m.dtype} ({m.source})"))


def _ops(p: Section, console: Console, verbose: bool) -> None:
    if not p.ops:
        return
    ot = Table("operator", "category", "dtype", "ms/step", "TFLOP/s", "GB/s", box=None, pad_edge=False,
               title="operators by GPU time", title_justify="left")
    for r in p.ops[:15 if verbose else 8]:
        ot.add_row(Text(r.op[:50]), Text(r.category), Text(r.dtype or ""), f"{r.time_ms_per_step:.3f}",
                   _n(r.tflops), _n(r.gbps))
    console.print(ot)


def _kernels(p: Section, console: Console) -> None:
    k = Table("kernel", "cat", "count", "ms/step", box=None, pad_edge=False, title="top kernels", title_justify="left")
    for r in p.top_kernels[:10]:
        k.add_row(Text(r.name[:70]), Text(r.category), str(r.count), f"{r.time_ms_per_step:.3f}")
    console.print(k)


def _findings(findings: list[Finding], console: Console) -> None:
    if not findings:
        console.print(Text("no findings: nothing in this trace costs a measurable share of the step", style="green"))
        return
    ft = Table(box=None, pad_edge=False, title="findings, by time a fix would recover per step", title_justify="left")
    for col in ("#", "id", "severity", "recover", "%", "confidence"):
        ft.add_column(col, justify="right" if col in ("#", "recover", "%") else "left")
    for i, f in enumerate(findings, 1):
        ft.add_row(str(i), Text(f.id + (f" [{f.subject}]" if f.subject else "")), Text(f.severity.value, style=SEV[f.severity.value]),
                   f"{f.recoverable_ms or 0:.2f} ms", f"{f.recoverable_pct or 0:.0f}%", f.confidence or "—")
    console.print(ft)
    for i, f in enumerate(findings, 1):
        console.print(Text(f"\n{i}. {f.title}", style="bold"))
        console.print(Text(f"   evidence: {f.evidence}"))
        console.print(Text(f"   fix: {f.fix}"))
    console.print(Text("\nEach figure is what that fix alone would recover, replayed through a model of the CPU and "
                       "GPU timelines with the profiler's CPU overhead removed; they overlap and do not add up. "
                       "Confidence says how far a figure can be trusted; a low one is ranked last. "
                       "'perfstack explain ID' shows how each is estimated and what it assumes.", style="dim"))


def _n(v: float | None) -> str:
    return "—" if v is None else f"{v:g}"


def _us(v: float | None) -> str:
    return "—" if v is None else f"{v:g} µs"
