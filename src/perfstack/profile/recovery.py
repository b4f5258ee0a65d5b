"""What the profile rules say of a fix's recoverable time: the step it is a share of, the what-if figures, and
how numbers read in evidence. Shared by the rule modules (``rules``, ``rules_repeated``, ``rules_distributed``)."""

from __future__ import annotations

from perfstack.profile.records import Section, WhatIf


def fmt(x: float, nd: int = 2) -> str:
    return f"{x:.{nd}f}"


def recovered(p: Section, fid: str) -> tuple[float, float]:
    """(ms, pct) a fix would recover per step, corrected for the profiler's overhead."""
    w = p.whatif.get(fid) or WhatIf()
    return w.ms, w.pct


def step_ms(p: Section) -> float:
    """The step without the profiler where it was measured or estimated, else the profiled one."""
    return (p.overhead.step_ms if p.overhead else None) or profiled_ms(p)


def profiled_ms(p: Section) -> float:
    return p.step_ms or 0.0  # a summary always states its step time


def gpu_time(p: Section, ms: float) -> str:
    return f"{ms:.2f} ms of GPU time per step"
