"""What the profile rules say of a fix's recoverable time: the step it is a share of, the what-if figures, how
far a CPU-side figure rests on the profiler-overhead correction, and how numbers read in evidence. Shared by
the rule modules (``rules``, ``rules_cpu``, ``rules_repeated``, ``rules_distributed``) and the summary that corrects for the
profiler."""

from __future__ import annotations

from perfstack.profile.registry import severity_for
from perfstack.records.profile import Overhead, Section, WhatIf

# The profiler's CPU cost per recorded CPU-side event (an operator or a CUDA runtime call) with
# record_shapes=True, measured on the project's H100 host with torch 2.11 (record_validation.py
# --only calibration: 2.65 µs for nn.Linear, 2.95 for mm, 4.74 for add, per CPU-side event): what
# the CPU time of a step shrinks by without the profiler. Host-dependent; --step-ms replaces it.
PROFILER_US_PER_EVENT = 3.0
# The other end: on whole eager workloads the profiler costs more per event than on one operator in a loop.
# The validation library's CPU-bound eager traces, their step measured without the profiler, imply 3.7
# (batch-1 decode) to 6.7 µs per event (the .item() step; ResNet-50 bf16 6.5), printed by
# benchmarks/profiler_event_cost.py. A CPU-side figure that holds at this cost too does not rest on the estimate.
PROFILER_US_PER_EVENT_HIGH = 7.0


def fmt(x: float, nd: int = 2) -> str:
    return f"{x:.{nd}f}"


def recovered(p: Section, fid: str) -> tuple[float, float]:
    """(ms, pct) a fix would recover per step, corrected for the profiler's overhead."""
    w = p.whatif.get(fid) or WhatIf()
    return w.ms, w.pct


def cpu_side(p: Section, fid: str, floor_pct: float, measure: str = "") -> tuple[float, float, str, str]:
    """(ms, pct, confidence, note) of a fix that changes only the CPU side (a CUDA graph, syncs removed, the
    DataLoader or the allocator off the critical path). Measured without the profiler, the figure is high
    confidence. Where the correction is the calibrated estimate, the fix is also replayed with the CPU as fast
    as the costliest overhead measured on real workloads makes it: if the finding holds there too it is
    medium confidence; if not, the verdict rests on the estimate, and the finding claims the cautious figure,
    says so (low confidence) and how to measure it. ``floor_pct``: the share at which the rule fires."""
    w = p.whatif.get(fid) or WhatIf()
    if w.ms_fast_cpu is None or w.pct_fast_cpu is None:
        return w.ms, w.pct, "high" if (p.overhead or Overhead()).method == "measured" else "medium", ""
    span = (f"; the figure rests on the profiler's overhead, estimated: {w.pct:.0f}% of the step at "
            f"{PROFILER_US_PER_EVENT:g} µs per recorded event, {w.pct_fast_cpu:.0f}% at {PROFILER_US_PER_EVENT_HIGH:g} µs "
            "(what whole eager workloads cost)")
    if w.pct_fast_cpu >= floor_pct:
        return w.ms, w.pct, "medium", span
    return (w.ms_fast_cpu, w.pct_fast_cpu, "low",
            span + " — perfstack cannot tell whether the GPU or the CPU bounds the step without the profiler, so "
                   "it claims the lower figure; measure it: --step-ms with the step time measured without the "
                   "profiler" + (f", or perfstack try --fix {measure}" if measure else ""))


def correction_notes(p: Section, fid: str, sev: str, measure: tuple[str, ...] = ()) -> str:
    """What a finding's evidence adds about the profiler-overhead correction its figure rests on: a severity
    that differs between the profiled step and the corrected one, and a GPU-side figure that is the middle of
    a range over the CPU's unknown speed (``summary.whatifs``), with how to measure it. (A CPU-side figure
    replayed at both ends says so itself: ``cpu_side``.)"""
    w, o = p.whatif.get(fid), p.overhead or Overhead()
    if w is None:
        return ""
    notes = []
    # a fast-CPU figure without a slow one is a CPU-side fix's (summary.whatifs): it says so itself (cpu_side)
    cpu_ranged = w.ms_fast_cpu is not None and w.ms_slow_cpu is None
    if not cpu_ranged and o.method in ("measured", "estimated") and severity_for(w.ms_profiled, profiled_ms(p)) != sev:
        notes.append(f"the verdict depends on the profiler-overhead correction: {w.pct_profiled:.0f}% of the profiled "
                     f"step, {w.pct:.0f}% of the step without the profiler ({o.method})")
    step = step_ms(p)
    if w.ms_slow_cpu is not None and w.ms_fast_cpu is not None and step:
        # both ends as shares of the step the finding's own figure is a share of
        lo, hi = 100 * w.ms_slow_cpu / step, 100 * w.ms_fast_cpu / step
        # (a range narrower than a fifth of its top, or 2 points, changes no decision: not worth the words)
        if hi - lo >= max(2.0, 0.2 * hi):
            notes.append(f"the gain depends on how fast the CPU runs without the profiler, estimated here: {lo:.0f}% of "
                         f"the step at {PROFILER_US_PER_EVENT:g} µs of profiler per recorded event, {hi:.0f}% at "
                         f"{PROFILER_US_PER_EVENT_HIGH:g} µs; the figure is their middle")
    if notes and measure:
        notes[-1] += f"; measure it: perfstack try --fix {','.join(measure)}"
    return "".join(" — " + n for n in notes)


def step_ms(p: Section) -> float:
    """The step without the profiler where it was measured or estimated, else the profiled one."""
    return (p.overhead.step_ms if p.overhead else None) or profiled_ms(p)


def profiled_ms(p: Section) -> float:
    return p.step_ms or 0.0  # a summary always states its step time


def gpu_time(p: Section, ms: float) -> str:
    return f"{ms:.2f} ms of GPU time per step"
