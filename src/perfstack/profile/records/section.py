"""The whole profile section as its readers see it (the report's views, diff, the terminal report and
the profile rules), and ``load``, the one way to read a Run's section."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from perfstack import sections
from perfstack.profile.records.base import Record
from perfstack.profile.records.kernels import Compiled, KernelClass, Mfu, OpRow, TopKernel
from perfstack.profile.records.means import Allocator, Comm, Launch, Overhead, Sync, Timeline
from perfstack.profile.records.run_wide import RankRow, Straggler, Telemetry
from perfstack.profile.records.steps import IdleGap, Step
from perfstack.profile.records.waste import WasteFound, WhatIf


@dataclass
class Section(Record):
    """A profile section (a saved Run's, or a summary the rules evaluate) as its readers use it: the
    report's views, diff, the terminal report and the profile rules. The pieces that have a record (the
    modules beside this one) are typed, the rest is as the JSON holds it (validated by the same check).
    Absent fields take their defaults. Get one with ``load``; the Run keeps the JSON itself, so --json writes what was read."""

    CHECK = sections.PROFILE

    device_name: Optional[str] = None
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    step_ms: Optional[float] = None
    mean_step_ms: Optional[float] = None
    steps: list[Step] = field(default_factory=list)
    breakdown_ms: dict[str, float] = field(default_factory=dict)  # mean time per step by category
    idle_by_reason_ms: dict[str, float] = field(default_factory=dict)
    phases_ms: dict[str, float] = field(default_factory=dict)
    idle_gaps: list[IdleGap] = field(default_factory=list)
    kernel_classes: list[KernelClass] = field(default_factory=list)
    ops: list[OpRow] = field(default_factory=list)
    top_kernels: list[TopKernel] = field(default_factory=list)
    launch: Optional[Launch] = None
    sync: Optional[Sync] = None
    allocator: Optional[Allocator] = None
    comm: Optional[Comm] = None
    mfu: Optional[Mfu] = None
    overhead: Optional[Overhead] = None
    timeline: Optional[Timeline] = None
    ranks: list[RankRow] = field(default_factory=list)  # one per rank of a multi-rank trace set
    straggler: Optional[Straggler] = None
    # What the profile rules read besides the pieces above (summary.py writes them; a loaded Run's are not
    # checked, as no report reads them):
    file: str = ""  # the trace the summary is of
    busy_ms: float = 0.0  # GPU busy per step
    busy_pct: float = 0.0
    data_wait_ms: float = 0.0  # the DataLoader's __next__ on the main thread, per step
    data_wait_idle_ms: float = 0.0  # GPU idle while it ran
    waste: WasteFound = field(default_factory=WasteFound)  # by finding id: what the waste pass measured
    whatif: dict[str, WhatIf] = field(default_factory=dict)  # by finding id
    compiled: Optional[Compiled] = None  # torch.compile regions and compile time per step
    telemetry: Optional[Telemetry] = None  # the NVML samples' throttle statistics (capture mode)
    extra: dict[str, Any] = field(default_factory=dict)

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
    """The one way to read a Run's profile section: typed, or None where the Run has none. The section
    is checked as ``Run.from_dict`` checks it (exit 2 naming the field), so a reader trusts the types."""
    return Section.from_dict(profile, "profile") if isinstance(profile, Mapping) else None
