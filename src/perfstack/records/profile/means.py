"""Means over the steps (``profile.timeline``, ``launch``, ``sync``, ``allocator``, ``comm``) and the
profiler's overhead (``profile.overhead``): where the step time goes on the CPU side and the GPU side.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from perfstack.records.base import Record


# What sets the step time (profile.analyze): the GPU's work, the CPU's, or syncs that make them take turns
Bound = Literal["gpu", "cpu", "syncs"]
# How GPU work was given its step (profile.attribute): by the op that launched it, by the GPU-side ProfilerStep
# spans, or by its timestamp within the CPU's step windows (the words the analysis quotes)
Attribution = Literal["launch", "the GPU-side ProfilerStep spans", "timestamp (the CPU step windows)"]
# Where the step without the profiler comes from (see Overhead); "" before the overhead is worked out
OverheadMethod = Literal["", "none", "measured", "estimated"]


@dataclass
class Timeline(Record):
    """The CPU and GPU timelines compared: which one sets the step time, and how far the CPU runs ahead."""

    cpu_step_ms: float = 0.0
    gpu_step_ms: float = 0.0
    bound: Optional[Bound] = None
    attribution: Literal["", Attribution] = ""  # "": not said
    cpu_ahead_ms: Optional[float] = None  # median launch-return to kernel-start delay
    unattributed_events: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class LaunchToStart(Record):
    """Launch-return to kernel-start delay (µs), measured as HTA does."""

    KEYS = {"origin": "from"}

    median: Optional[float] = None
    p90: Optional[float] = None
    n: int = 0
    origin: str = "launch return"
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Launch(Record):
    kernels_per_step: float = 0.0
    launches_per_step: float = 0.0
    graph_launches_per_step: float = 0.0
    median_kernel_us: Optional[float] = None
    short_kernel_pct: float = 0.0  # kernels under 10 µs
    launch_to_start_us: LaunchToStart = field(default_factory=LaunchToStart)
    launch_call_us: Optional[float] = None
    launch_cpu_ms_per_step: float = 0.0
    # the launches of the optimizer step's kernels (set where it has any): compiling the model leaves them eager
    optimizer_launches_per_step: Optional[float] = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Sync(Record):
    calls_per_step: float = 0.0
    wait_ms_per_step: float = 0.0
    by_name: dict[str, float] = field(default_factory=dict)  # calls per step by runtime call
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Allocator(Record):
    calls_per_step: float = 0.0
    ms_per_step: float = 0.0
    idle_ms_per_step: float = 0.0  # GPU idle caused by allocator calls
    by_name: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Comm(Record):
    """NCCL time per step; ``if_overlapped`` (summary's overlap model) only where there is NCCL time."""

    ms_per_step: float = 0.0
    exposed_ms_per_step: float = 0.0
    overlapped_ms_per_step: float = 0.0
    overlap_pct: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def with_overlap_model(self, model: dict[str, Any]) -> Comm:
        return dataclasses.replace(self, extra={**self.extra, "if_overlapped": model})


@dataclass
class Overhead(Record):
    """How much of the profiled step is the profiler (``summary.overhead``), and the CPU scale that
    removes it. ``method`` says where the step without the profiler comes from: "measured" (capture mode,
    --step-ms), "estimated" (the calibrated cost per recorded event) or "none" (no replay model: the
    figures are of the profiled step). The replay model's figures exist only where there is a model."""

    WHEN_SET = frozenset({"model_step_ms", "model_fit", "cpu_inflation", "model_unprofiled_ms", "fast_cpu_scale"})

    profiled_step_ms: Optional[float] = None
    events_per_step: float = 0.0  # recorded CPU events per step
    model_step_ms: Optional[float] = None  # the profiled trace, replayed
    model_fit: Optional[float] = None  # model_step_ms / profiled_step_ms
    method: OverheadMethod = ""
    note: str = ""
    cpu_scale: float = 1.0  # CPU time without the profiler / CPU time profiled
    cpu_inflation: Optional[float] = None  # 1 / cpu_scale
    step_ms: Optional[float] = None  # the step without the profiler
    model_unprofiled_ms: Optional[float] = None  # the trace replayed at cpu_scale
    # where cpu_scale is the calibrated estimate: the scale at the costliest overhead per event measured on
    # real workloads (recovery.PROFILER_US_PER_EVENT_HIGH), the other end of what the estimate may be
    fast_cpu_scale: Optional[float] = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if self.method == "none" and "note" in out:
            out["note"] = out.pop("note")  # where the JSON of an overhead without a replay model has it
        return out
