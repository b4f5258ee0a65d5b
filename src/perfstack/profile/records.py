"""The typed records of a profile: what each analysis pass produces, and how it is written to a Run.

``analyze`` and ``summary`` build these; ``to_dict`` writes exactly the JSON a profile Run has always
held (field order, names and values), so Runs saved before load unchanged and the JSON schema of the
``profile`` section does not move. ``from_dict`` reads one back from a loaded Run: the fields are
checked by the same checks ``Run.from_dict`` applies to the whole section (``sections.py``, the one
validation path: a wrong type is exit 2 naming the field), a field that is absent takes its default,
and fields this version does not know are kept in ``extra`` and written back, so a round trip is
lossless. A field the check does not cover that holds a value of the wrong kind (a string where a number
belongs, a list where an object does) takes its default, so no reader meets a type it did not ask for.

Times are milliseconds per step unless the name says otherwise (``_us``: microseconds). Annotations use
``Optional`` rather than ``X | None``: ``from_dict`` reads them at run time, on every supported Python.
"""

from __future__ import annotations

import dataclasses
import statistics
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Optional, TypeVar

from perfstack import sections

R = TypeVar("R", bound="Record")


@dataclass
class Record:
    """A piece of the profile section. Subclasses name their JSON check (``CHECK``) and, where a JSON
    key is not a Python name, the key (``KEYS``: field name -> key)."""

    CHECK: ClassVar[sections.Check] = sections.obj({})
    KEYS: ClassVar[dict[str, str]] = {}
    WHEN_SET: ClassVar[frozenset[str]] = frozenset()  # fields written only when not None (absent keys stay absent)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name == "extra" or (f.name in self.WHEN_SET and getattr(self, f.name) is None):
                continue
            out[self.KEYS.get(f.name, f.name)] = _plain(getattr(self, f.name))
        out.update(getattr(self, "extra", {}))
        return out

    @classmethod
    def from_dict(cls: type[R], d: Any, where: str) -> R:
        cls.CHECK(d, where)
        hints = typing.get_type_hints(cls)
        names = {cls.KEYS.get(f.name, f.name): f.name for f in dataclasses.fields(cls) if f.name != "extra"}
        args: dict[str, Any] = {}
        for key, name in names.items():
            if key in d and _fits(hints[name], d[key]):
                args[name] = _typed(hints[name], d[key], f"{where}.{key}")
        extra = {k: v for k, v in d.items() if k not in names}
        if "extra" in {f.name for f in dataclasses.fields(cls)}:
            args["extra"] = extra
        return cls(**args)


def _plain(v: Any) -> Any:
    if isinstance(v, Record):
        return v.to_dict()
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _typed(hint: Any, v: Any, where: str) -> Any:
    """``v`` as the annotation ``hint`` asks where that is a record (or a list or optional one)."""
    if _is_record(hint):
        return hint.from_dict(v, where)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list and args and _is_record(args[0]):
        return [args[0].from_dict(x, f"{where}[{i}]") for i, x in enumerate(v)]
    if origin is dict and len(args) == 2 and _is_record(args[1]):  # by key; an entry that is no object is dropped
        return {k: args[1].from_dict(x, f"{where}.{k}") for k, x in v.items() if isinstance(x, dict)}
    if origin is typing.Union and v is not None:
        recs = [a for a in args if _is_record(a)]
        if recs:
            return recs[0].from_dict(v, where)
    return v


def _fits(hint: Any, v: Any) -> bool:
    """Whether ``v`` is of the kind the annotation ``hint`` names (a JSON number for int and float, an
    object for a record or a dict, ...); a field given a value that is not takes its default."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        return any(_fits(a, v) for a in args)
    if hint is type(None):
        return v is None
    if hint in (int, float):
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if hint is str:
        return isinstance(v, str)
    if origin is dict or _is_record(hint):
        return isinstance(v, dict)
    if origin is list:
        return isinstance(v, list)
    return True  # Any, Mapping[str, Any]: as the JSON holds it


def _is_record(hint: Any) -> bool:
    # A parametrized builtin (dict[str, Any]) passes isinstance(..., type) before Python 3.11, and
    # issubclass then raises: only a plain class can be a record.
    return isinstance(hint, type) and typing.get_origin(hint) is None and issubclass(hint, Record)


# -- one step ---------------------------------------------------------------------------------------

@dataclass
class GpuStep:
    """A step as the GPU timeline sees it (the ``steps`` pass): its time, busy and idle, exclusive
    category times, idle by cause, kernels and NCCL time."""

    step: int
    total_ms: float
    cpu_ms: float
    gpu_ms: float
    busy_ms: float
    busy_pct: float
    idle_ms: float
    categories: dict[str, float]
    idle_by_reason_ms: dict[str, float]
    kernels: int
    comm_ms: float
    comm_exposed_ms: float
    comm_overlapped_ms: float


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
class Step(Record):
    """One row of ``profile.steps``: the GPU view of the step, then its CPU-side counts."""

    CHECK = sections.STEP

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
    launches: int = 0
    graph_launches: int = 0
    syncs: int = 0
    alloc_calls: int = 0
    cpu_events: int = 0
    launch_cpu_ms: float = 0.0
    sync_wait_ms: float = 0.0
    alloc_ms: float = 0.0
    data_wait_ms: float = 0.0
    launch_call_us: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def join(cls, gpu: GpuStep, cpu: CpuCounts) -> Step:
        return cls(**dataclasses.asdict(gpu), **dataclasses.asdict(cpu))


@dataclass
class IdleGap(Record):
    """An interval of a step's GPU period with nothing running, at least ``analyze.GAP_LIST_US`` long;
    ``reason`` comes from the launch of the event that ends it."""

    CHECK = sections.IDLE_GAP

    start_ms: float = 0.0  # from the first step's CPU start
    duration_ms: float = 0.0
    step: Optional[int] = None
    reason: str = ""
    before: str = ""  # the kernel that ran last before the gap
    after: str = ""  # the kernel that ends it
    extra: dict[str, Any] = field(default_factory=dict)


# -- means over the steps -----------------------------------------------------------------------------

@dataclass
class Timeline(Record):
    """The CPU and GPU timelines compared: which one sets the step time, and how far the CPU runs ahead."""

    CHECK = sections.TIMELINE

    cpu_step_ms: float = 0.0
    gpu_step_ms: float = 0.0
    bound: Optional[str] = None  # "gpu" | "cpu" | "syncs"
    attribution: str = ""  # how GPU work was attributed to steps: "launch" | "gpu annotations" | "timestamps"
    cpu_ahead_ms: Optional[float] = None  # median launch-return to kernel-start delay
    unattributed_events: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class LaunchToStart(Record):
    """Launch-return to kernel-start delay (µs), measured as HTA does."""

    CHECK = sections.obj({"median": sections.NUM_})
    KEYS = {"origin": "from"}

    median: Optional[float] = None
    p90: Optional[float] = None
    n: int = 0
    origin: str = "launch return"
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Launch(Record):
    CHECK = sections.LAUNCH

    kernels_per_step: float = 0.0
    launches_per_step: float = 0.0
    graph_launches_per_step: float = 0.0
    median_kernel_us: Optional[float] = None
    short_kernel_pct: float = 0.0  # kernels under 10 µs
    launch_to_start_us: LaunchToStart = field(default_factory=LaunchToStart)
    launch_call_us: Optional[float] = None
    launch_cpu_ms_per_step: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Sync(Record):
    CHECK = sections.SYNC

    calls_per_step: float = 0.0
    wait_ms_per_step: float = 0.0
    by_name: dict[str, float] = field(default_factory=dict)  # calls per step by runtime call
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Allocator(Record):
    CHECK = sections.ALLOCATOR

    calls_per_step: float = 0.0
    ms_per_step: float = 0.0
    idle_ms_per_step: float = 0.0  # GPU idle caused by allocator calls
    by_name: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Comm(Record):
    """NCCL time per step; ``if_overlapped`` (summary's overlap model) only where there is NCCL time."""

    CHECK = sections.COMM

    ms_per_step: float = 0.0
    exposed_ms_per_step: float = 0.0
    overlapped_ms_per_step: float = 0.0
    overlap_pct: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def with_overlap_model(self, model: dict[str, Any]) -> Comm:
        return dataclasses.replace(self, extra={**self.extra, "if_overlapped": model})


@dataclass
class Mfu(Record):
    CHECK = sections.MFU

    value: float = 0.0
    source: str = ""
    peak_tflops: Optional[float] = None
    dtype: Optional[str] = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Straggler(Record):
    """The rank whose non-communication time per step is the longest, against the others' median."""

    CHECK = sections.STRAGGLER

    rank: int = 0
    non_comm_ms: float = 0.0
    others_median_ms: float = 0.0
    excess_ms: float = 0.0
    cause: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Overhead(Record):
    """How much of the profiled step is the profiler (``summary.overhead``), and the CPU scale that
    removes it. ``method`` says where the step without the profiler comes from: "measured" (capture mode,
    --step-ms), "estimated" (the calibrated cost per recorded event) or "none" (no replay model: the
    figures are of the profiled step). The replay model's figures exist only where there is a model."""

    CHECK = sections.OVERHEAD
    WHEN_SET = frozenset({"model_step_ms", "model_fit", "cpu_inflation", "model_unprofiled_ms"})

    profiled_step_ms: Optional[float] = None
    events_per_step: float = 0.0  # recorded CPU events per step
    model_step_ms: Optional[float] = None  # the profiled trace, replayed
    model_fit: Optional[float] = None  # model_step_ms / profiled_step_ms
    method: str = ""
    note: str = ""
    cpu_scale: float = 1.0  # CPU time without the profiler / CPU time profiled
    cpu_inflation: Optional[float] = None  # 1 / cpu_scale
    step_ms: Optional[float] = None  # the step without the profiler
    model_unprofiled_ms: Optional[float] = None  # the trace replayed at cpu_scale
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class OpRow(Record):
    """One row of ``profile.ops``: an operator's kernels of one category and dtype, per step, with what
    they achieved and their share of the SKU's peaks (``efficiency.against_peaks``)."""

    CHECK = sections.OP
    WHEN_SET = frozenset({"bound"})

    op: str = ""  # the launching operator, "(no operator)" where none is known
    category: str = ""
    dtype: Optional[str] = None
    calls_per_step: float = 0.0
    kernels_per_step: float = 0.0
    time_ms_per_step: float = 0.0
    flops_per_step: float = 0.0
    bytes_per_step: float = 0.0
    tflops: Optional[float] = None
    gbps: Optional[float] = None
    pct_of_peak: Optional[float] = None
    pct_of_hbm: Optional[float] = None
    bound: Optional[str] = None  # "compute" | "memory", where the intensity says
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class TopKernel(Record):
    """One row of ``profile.top_kernels``: a kernel name's launches and GPU time per step."""

    CHECK = sections.TOP_KERNEL

    name: str = ""  # shortened (classify.short_name)
    category: str = ""
    count: int = 0  # launches over the profiled steps
    time_ms_per_step: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class KernelClass(Record):
    """One row of ``profile.kernel_classes`` (the roofline's points): a GEMM class (category, dtype, Tensor
    Cores) or a category of the other kernels, with its time, FLOPs and bytes per step."""

    CHECK = sections.KERNEL_CLASS
    KEYS = {"kclass": "class"}
    WHEN_SET = frozenset({"name", "kclass", "intensity", "peak_tflops", "gbps"})

    name: Optional[str] = None
    kclass: Optional[str] = None  # what a Run may name the class by where it has no name
    time_ms: Optional[float] = None
    flops: Optional[float] = None
    bytes: Optional[float] = None
    intensity: Optional[float] = None  # FLOP per byte
    tflops: Optional[float] = None
    peak_tflops: Optional[float] = None  # GEMM classes: the SKU's peak for their dtype
    gbps: Optional[float] = None  # the other kernels
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class WhatIf(Record):
    """A candidate fix replayed (``summary.whatifs``): the time it recovers per step and its share of the
    step, without the profiler (the corrected CPU speed) and as profiled."""

    ms: float = 0.0
    pct: float = 0.0
    ms_profiled: float = 0.0
    pct_profiled: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


# The five records above are how readers see those pieces; summary.py and efficiency.py still build
# them as JSON objects (to_dict writes the same keys, in the order they write them).

# -- the whole section, as its readers see it -----------------------------------------------------

@dataclass
class Section(Record):
    """A profile section (a saved Run's, or a summary the rules evaluate) as its readers use it: the
    report's views, diff, the terminal report and the profile rules. The pieces that have a record
    above are typed, the rest is as the JSON holds it (validated by the same check). Absent fields take
    their defaults. Get one with ``load``; the Run keeps the JSON itself, so --json writes what was read."""

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
    ranks: list[Any] = field(default_factory=list)  # one JSON object per rank of a multi-rank trace set
    straggler: Optional[Straggler] = None
    # What the profile rules read besides the pieces above (summary.py writes them; a loaded Run's are not
    # checked, as no report reads them):
    file: str = ""  # the trace the summary is of
    busy_ms: float = 0.0  # GPU busy per step
    busy_pct: float = 0.0
    data_wait_ms: float = 0.0  # the DataLoader's __next__ on the main thread, per step
    data_wait_idle_ms: float = 0.0  # GPU idle while it ran
    waste: dict[str, Any] = field(default_factory=dict)  # by finding id: what the waste pass measured
    whatif: dict[str, WhatIf] = field(default_factory=dict)  # by finding id
    compiled: Optional[Mapping[str, Any]] = None  # torch.compile regions and compile time per step
    telemetry: Optional[Mapping[str, Any]] = None  # the NVML samples' throttle statistics (capture mode)
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
