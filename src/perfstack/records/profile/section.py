"""The whole profile section as its readers see it (the report's views, diff, the terminal report and
the profile rules), and ``load``, the one way to read a Run's section."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from perfstack.records.base import Record
from perfstack.records.profile.kernels import Compiled, GemmRow, KernelClass, MemcpyRow, Mfu, OpRow, TopKernel
from perfstack.records.profile.means import Allocator, Comm, Launch, Overhead, Sync, Timeline
from perfstack.records.profile.run_wide import RankRow, Straggler, Telemetry
from perfstack.records.profile.steps import IdleGap, Step
from perfstack.records.profile.waste import WasteFound, WhatIf


@dataclass
class Section(Record):
    """A profile section (a saved Run's, or a summary the rules evaluate) as its producers build it and
    its readers use it: the report's views, diff, the terminal report and the profile rules. The pieces
    that have a record (the modules beside this one) are typed. Absent fields take their defaults. A
    loaded Run holds one (``Run.profile``, read by ``load``) and writes back the JSON it was read from.

    The fields are in the order a profile Run's JSON holds them (``analyze``'s, then the efficiency pass's,
    then ``summary``'s), so ``to_dict`` of a summary writes the JSON the Run always held; the ones only a
    multi-rank or captured run has are written only when set."""

    WHEN_SET = frozenset({"mean_step_ms", "ranks", "straggler", "files", "telemetry", "unprofiled"})

    # the trace and its device (analyze)
    file: str = ""  # the trace the summary is of
    rank: Optional[int] = None
    world_size: Optional[int] = None
    device: Optional[int] = None  # the analysed device (the one with the most GPU time)
    device_name: Optional[str] = None
    other_devices: list[int] = field(default_factory=list)
    # the steps and the means over them (analyze)
    n_steps: int = 0
    steps: list[Step] = field(default_factory=list)
    step_ms: Optional[float] = None
    mean_step_ms: Optional[float] = None  # what some Runs name the step time
    busy_ms: float = 0.0  # GPU busy per step
    idle_ms: float = 0.0
    busy_pct: float = 0.0
    timeline: Optional[Timeline] = None
    breakdown_ms: dict[str, float] = field(default_factory=dict)  # mean time per step by category
    idle_by_reason_ms: dict[str, float] = field(default_factory=dict)
    idle_gaps: list[IdleGap] = field(default_factory=list)  # the longest (analyze.MAX_GAPS)
    n_idle_gaps: int = 0
    launch: Optional[Launch] = None
    sync: Optional[Sync] = None
    allocator: Optional[Allocator] = None
    data_wait_ms: float = 0.0  # the DataLoader's __next__ on the main thread, per step
    data_wait_idle_ms: float = 0.0  # GPU idle while it ran
    comm: Optional[Comm] = None
    compute_ms: float = 0.0  # GPU time per step in categories other than idle, communication and CPU
    precision: Optional[str] = None  # torch's float32_matmul_precision, where the trace records it
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    events_per_step: float = 0.0  # recorded CPU events (the profiler's overhead grows with them)
    # kernels and operators (the efficiency pass)
    top_kernels: list[TopKernel] = field(default_factory=list)
    ops: list[OpRow] = field(default_factory=list)
    gemms: list[GemmRow] = field(default_factory=list)  # GEMM classes: dtype, Tensor Cores, shapes
    memcpy: list[MemcpyRow] = field(default_factory=list)  # copies by direction and memory
    phases_ms: dict[str, float] = field(default_factory=dict)
    compiled: Optional[Compiled] = None  # torch.compile regions and compile time per step
    gpu_spec: Optional[str] = None  # the spec-table row the peaks come from
    kernel_classes: list[KernelClass] = field(default_factory=list)
    # the summary's passes
    overhead: Optional[Overhead] = None
    waste: WasteFound = field(default_factory=WasteFound)  # by finding id: what the waste pass measured
    whatif: dict[str, WhatIf] = field(default_factory=dict)  # by finding id, or fix id (a fix replayed whole)
    gemm_flops_per_step: float = 0.0
    model_tflops: Optional[float] = None
    mfu: Optional[Mfu] = None
    # what a run of several ranks, or a capture, adds
    ranks: Optional[list[RankRow]] = None  # one per rank of a multi-rank trace set
    straggler: Optional[Straggler] = None
    files: Optional[list[str]] = None
    telemetry: Optional[Telemetry] = None  # the NVML samples' throttle statistics (capture mode)
    unprofiled: Optional[dict[str, Any]] = None  # the step time measured without the profiler (capture.UNPROFILED_KEYS)
    extra: dict[str, Any] = field(default_factory=dict)

    def is_empty(self) -> bool:
        """Whether the section holds nothing (a Run saved with an empty ``profile`` object)."""
        return not self.to_dict()

    def breakdown(self) -> dict[str, float] | None:
        """Mean time per step by category (ms): ``breakdown_ms`` when present, else the mean of the
        steps' categories; None without steps."""
        if self.breakdown_ms:
            return {k: float(v) for k, v in self.breakdown_ms.items()}
        if not self.steps:
            return None
        cats: dict[str, float] = {}
        for s in self.steps:
            for k, v in s.categories.items():
                cats[k] = cats.get(k, 0.0) + float(v)
        return {k: v / len(self.steps) for k, v in cats.items()}

    def step_time(self, breakdown: dict[str, float] | None) -> float | None:
        """The mean step time (ms) the section states, else the mean of its steps' totals, else the sum of
        ``breakdown``; None without any of them."""
        for stated in (self.step_ms, self.mean_step_ms):
            if stated is not None:
                return float(stated)
        if self.steps:
            return statistics.fmean(float(s.total_ms) for s in self.steps)
        return sum(breakdown.values()) if breakdown else None

    def unprofiled_step_ms(self) -> float | None:
        """The step time measured without the profiler (capture mode, --step-ms), or None."""
        o = self.overhead
        if o is not None and o.method == "measured" and o.step_ms is not None:
            return float(o.step_ms)
        return None


def load(profile: Any) -> Section | None:
    """The one way to read a Run's profile section (``Run.from_dict`` calls it): typed, or None where the
    Run has none. The section is checked against its records' annotations (exit 2 naming the field), so a
    reader trusts the types."""
    return Section.from_dict(profile, "profile") if isinstance(profile, Mapping) else None
