"""One step of a profile: its GPU row and CPU-side counts (``profile.steps``), and the idle gaps in it
(``profile.idle_gaps``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from perfstack.records.base import Record


@dataclass
class GpuStep:
    """A step as the GPU timeline sees it (the ``steps`` pass): its time, busy and idle, exclusive
    category times, idle by cause, kernels and NCCL time. (Defaults: what a loaded row lacks.)"""

    step: int = 0
    total_ms: float = 0.0
    cpu_ms: float = 0.0
    gpu_ms: float = 0.0
    busy_ms: float = 0.0
    busy_pct: float = 0.0
    idle_ms: float = 0.0
    categories: dict[str, float] = field(default_factory=dict)
    idle_by_reason_ms: dict[str, float] = field(default_factory=dict)
    kernels: int = 0
    comm_ms: float = 0.0
    comm_exposed_ms: float = 0.0
    comm_overlapped_ms: float = 0.0


@dataclass
class CpuCounts:
    """A step's CPU-side counts (the ``cpu counts`` pass): launches, syncs, allocator calls, data
    waits and the number of recorded CPU events (the profiler's overhead grows with it)."""

    launches: int = 0
    graph_launches: int = 0
    syncs: int = 0
    alloc_calls: int = 0
    cpu_events: int = 0
    launch_cpu_ms: float = 0.0
    sync_wait_ms: float = 0.0
    alloc_ms: float = 0.0
    data_wait_ms: float = 0.0
    launch_call_us: float = 0.0  # mean duration of one launch call


@dataclass
class Step(CpuCounts, GpuStep, Record):
    """One row of ``profile.steps``: the GPU view of the step (``GpuStep``'s fields), then its CPU-side
    counts (``CpuCounts``'), in that order (a dataclass takes its bases' fields from the last base first)."""

    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def join(cls, gpu: GpuStep, cpu: CpuCounts) -> Step:
        return cls(**dataclasses.asdict(gpu), **dataclasses.asdict(cpu))


@dataclass
class IdleGap(Record):
    """An interval of a step's GPU period with nothing running, at least ``analyze.GAP_LIST_US`` long;
    ``reason`` comes from the launch of the event that ends it."""

    start_ms: float = 0.0  # from the first step's CPU start
    duration_ms: float = 0.0
    step: Optional[int] = None
    reason: str = ""
    before: str = ""  # the kernel that ran last before the gap
    after: str = ""  # the kernel that ends it
    extra: dict[str, Any] = field(default_factory=dict)
