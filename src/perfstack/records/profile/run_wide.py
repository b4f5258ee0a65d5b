"""What belongs to the run as a whole rather than to one trace: every rank's row (``profile.ranks``) and
the straggler among them (``profile.straggler``) where there are several ranks, and the GPU telemetry
sampled during a capture (``profile.telemetry``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from perfstack.records.base import Record
from perfstack.records.profile.means import Comm


@dataclass
class RankRow(Record):
    """One row of ``profile.ranks``: what a rank's own summary says of its step (``summary.RANK_FIELDS``)."""

    rank: int = 0
    file: str = ""  # the rank's trace
    step_ms: float = 0.0
    busy_pct: float = 0.0
    idle_ms: float = 0.0
    compute_ms: float = 0.0  # GPU time per step outside idle, communication and CPU-only steps
    breakdown_ms: dict[str, float] = field(default_factory=dict)
    idle_by_reason_ms: dict[str, float] = field(default_factory=dict)
    comm: Comm = field(default_factory=Comm)
    device_name: Optional[str] = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Straggler(Record):
    """The rank whose non-communication time per step is the longest, against the others' median
    (``excess_ms``, profiled), and what of that excess rests on something the profiler's overhead cannot
    explain (``profile/straggler.py``): more GPU work than the others (kernels, copies; NCCL and idle left
    out) and CPU-caused idle beyond the profiler's own CPU time in that rank's step. ``verdict``: 'gpu
    work' or 'wait' (the larger, where both), or 'cannot tell' (also read from a Run without one)."""

    REQUIRED = ("rank", "excess_ms", "cause")

    rank: int = 0
    non_comm_ms: float = 0.0
    others_median_ms: float = 0.0
    excess_ms: float = 0.0
    cause: str = ""
    gpu_work_ms: float = 0.0  # the rank's GPU work per step
    others_gpu_work_ms: float = 0.0  # the other ranks' median
    wait_ms: float = 0.0  # CPU-caused idle beyond the others' median
    profiler_ms: float = 0.0  # the profiler's CPU time in the rank's step (what it adds to that idle at most)
    input_ratio: Optional[float] = None  # the rank's host-to-device bytes per step over the others' median
    recoverable_ms: float = 0.0  # extra GPU work + the wait beyond the profiler's time
    verdict: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Telemetry(Record):
    """The NVML samples of a capture, summarized for the throttling rule (``telemetry.telemetry_summary``):
    how many there were and were taken with the GPU busy, the share of those throttled and why, and the
    SM clock when throttled against the highest seen (or the SKU's boost clock)."""

    samples: int = 0
    busy_samples: int = 0
    throttled_pct: float = 0.0
    reasons: list[str] = field(default_factory=list)
    throttled_clock_mhz: float = 0.0
    max_clock_mhz: float = 0.0
    max_temperature_c: Optional[float] = None
    max_power_w: Optional[float] = None
    extra: dict[str, Any] = field(default_factory=dict)
