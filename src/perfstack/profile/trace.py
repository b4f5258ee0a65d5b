"""Load a Kineto (torch.profiler) Chrome trace into compact, typed event lists.

``load(path)`` reads ``.json`` or ``.json.gz`` (what ``export_chrome_trace`` and
``tensorboard_trace_handler`` write) and returns a ``Trace``; anything that is not a readable
torch.profiler trace raises ``InputError`` naming the file.

Kineto field names used (verified against torch 2.11 traces in tests/fixtures/traces):
  steps        ``ProfilerStep#N`` (cat ``user_annotation`` or ``cpu_op``) on the CPU
  GPU work     cat ``kernel`` / ``gpu_memcpy`` / ``gpu_memset`` (older Kineto: ``Kernel``, ``Memcpy``,
               ``Memset``); ``args``: ``device``, ``stream``, ``correlation``, ``External id``, ``bytes``
  GPU spans    cat ``gpu_user_annotation``: record_function ranges (``ProfilerStep#N``,
               ``Optimizer.step#...``) drawn on the GPU timeline
  host calls   cat ``cuda_runtime`` / ``cuda_driver`` (``cudaLaunchKernel``, ``cudaGraphLaunch``, ...)
  operators    cat ``cpu_op`` with ``Input Dims`` / ``Input type`` when ``record_shapes=True``;
               ``user_annotation`` for ``enumerate(DataLoader)#...``, ``Optimizer.step#...``
  metadata     ``deviceProperties`` (GPU names, ``totalGlobalMem``), ``distributedInfo`` (rank, world size),
               ``baseTimeNanoseconds`` (the wall-clock epoch of the trace's µs timestamps)
  memory       ``[memory]`` instant events (ph ``i``, recorded with ``profile_memory=True``); ``args``:
               ``Device Type`` (1: CUDA), ``Device Id``, ``Total Allocated``, ``Total Reserved`` (bytes
               held by the caching allocator after the event): only their peaks per device are kept

How it reads a file (a 1 GB trace is a few million events, a few hundred distinct names):
  * the text (the file, or the gzip stream as it decompresses) is read a few MiB at a time and the
    event list cut after an event (``tracefile``, which also recovers damaged files): memory holds
    one batch of text and the records built so far, never the whole document;
  * each batch is decoded at once into small typed structs that keep only the fields used here
    (unknown keys such as ``grid`` and ``Input Strides`` are skipped without being built);
  * a batch with an event whose fields do not have the expected JSON types is decoded event by
    event, and that event again leniently: numbers given as strings are accepted, unusable values
    are skipped and counted in ``Trace.skipped_events`` -- one odd event never costs the rest of
    the file;
  * names and thread ids are shared between events; ``Input Dims`` / ``Input type`` are decoded once
    per distinct value, and operators with the same shapes share the same lists (read-only);
  * events become ``GpuEvent`` / ``CpuEvent`` structs that the cyclic garbage collector does not
    track, built with the collector paused;
  * a large plain file is read by two processes, half each (``traceread``), to the same result.

A trace cut short (a truncated file or gzip stream, a crashed job) keeps the events before the cut,
and ``Trace.warnings`` says so. ``NaN`` / ``Infinity`` (not JSON, but Python's json writes them)
make the event that holds them unusable, not the file. A time no clock gives (beyond 2^53 µs) in an
event the analysis reads refuses the trace, naming the event: it would turn into inf and NaN.
"""

from __future__ import annotations

import gc
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, Iterator, List, Optional

import msgspec
from msgspec import Raw

from perfstack.errors import InputError
from perfstack.profile.tracefile import _NULL, HINT, BatchKind
from perfstack.profile.tracerepair import ERRORS, generic
from perfstack.profile.traceread import read
from perfstack.profile.tracetypes import EVENT, EVENTS, MAX_TIME_US, NO_ARGS

GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset",
            "memcpy": "memcpy", "memset": "memset"}
GPU_ANNOTATION_CATS = {"gpu_user_annotation"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
OP_CATS = {"cpu_op", "operator", "user_annotation", "python_function"}
STEP_RE = re.compile(r"^ProfilerStep#(\d{1,18})$")


class GpuEvent(msgspec.Struct, gc=False):
    kind: str  # kernel | memcpy | memset | annotation (Trace.gpu_annotations)
    name: str
    ts: float  # µs
    dur: float
    device: int
    stream: int
    correlation: Optional[int]
    external_id: Optional[int]
    bytes: Optional[int]


class CpuEvent(msgspec.Struct, gc=False):
    cat: str  # runtime | op | annotation
    name: str
    ts: float
    dur: float
    tid: Any
    correlation: Optional[int] = None
    external_id: Optional[int] = None
    dims: Optional[List[Any]] = None  # Input Dims of an operator, as in the trace; shared: do not modify
    types: Optional[List[Any]] = None  # Input type of an operator; shared: do not modify
    concrete: Optional[List[Any]] = None  # Concrete Inputs (scalar and int-list arguments as strings); shared
    strides: Optional[List[Any]] = None  # Input Strides, kept for concatenations only (CONCAT_OPS); shared


@dataclass
class Step:
    name: str
    number: int
    ts: float
    dur: float


@dataclass
class Trace:
    path: str
    gpu: list[GpuEvent] = field(default_factory=list)
    runtime: list[CpuEvent] = field(default_factory=list)
    ops: list[CpuEvent] = field(default_factory=list)  # cpu_op + user annotations + python functions
    steps: list[Step] = field(default_factory=list)
    device_names: dict[int, str] = field(default_factory=dict)
    rank: int | None = None
    world_size: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # float32_matmul_precision etc. when recorded
    warnings: list[str] = field(default_factory=list)
    skipped_events: int = 0
    n_events: int = 0
    gpu_annotations: list[GpuEvent] = field(default_factory=list)  # gpu_user_annotation spans
    base_time_ns: int | None = None  # baseTimeNanoseconds: wall clock (ns since the epoch) of ts 0
    device_memory: dict[int, int] = field(default_factory=dict)  # totalGlobalMem by device (bytes)
    # the [memory] events' peaks by CUDA device (bytes); empty when recorded without profile_memory
    peak_allocated: dict[int, int] = field(default_factory=dict)
    peak_reserved: dict[int, int] = field(default_factory=dict)


class _Shapes(dict[bytes, Any]):
    """Input Dims / Input type / Concrete Inputs by their text, decoded once per distinct text (the
    first _MAX_CACHE of them kept); ``null`` (the field absent) is None."""

    def __init__(self) -> None:
        super().__init__({bytes(_NULL): None})

    def __missing__(self, key: bytes) -> Any:
        v = _shapes(generic(key))
        if len(self) < _MAX_CACHE:
            self[key] = v
        return v


# Concatenations, the only operators whose Input Strides are kept (they show a window rolled forward)
CONCAT_OPS = frozenset({"aten::cat", "aten::_cat", "aten::concat", "aten::concatenate"})

_MAX_CACHE = 1 << 18
_INF = float("inf")
_TS = attrgetter("ts")


def load(path: str | Path) -> Trace:
    """The trace at ``path`` as typed event lists; InputError when it is not a readable
    torch.profiler trace."""
    return _load(Path(path))


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused: reading and analysing a large trace build millions of objects,
    none of them part of a cycle, which it would scan again and again for nothing (a tenth of the time of
    a 1 GB trace)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _load(p: Path, lenient: bool = False) -> Trace:
    """``lenient=True`` sends every event through the forgiving per-event path (what an event with
    unexpected JSON types gets); for a well-formed trace the result is the same."""
    with collector_paused():
        build, head, n_events = read(p, lambda: _Builder(Trace(path=str(p)), lenient), None if lenient else EVENTS,
                                     (GpuEvent, CpuEvent, Step))
        build.finish()
    t: Trace = build.t
    t.n_events = n_events
    _metadata(head, t)
    kineto = bool(head.get("schemaVersion") is not None or head.get("deviceProperties") or t.steps or t.gpu
                  or t.runtime or any(e.cat == "op" for e in t.ops))
    if not kineto:
        raise InputError(f"{p} is a Chrome trace but not one from torch.profiler: it has no ProfilerStep, "
                         "cpu_op, CUDA runtime or GPU kernel events", hint=HINT)
    if not t.steps and not t.gpu and not t.ops and not t.runtime:
        raise InputError(f"{p} has an empty profiling window: no events were recorded",
                         hint="profile at least one step: schedule(wait=1, warmup=1, active=3) and call prof.step() "
                              "once per iteration")
    if t.skipped_events:
        t.warnings.append(f"{p.name}: skipped {t.skipped_events} malformed events")
    return t


def _metadata(head: dict[str, Any], t: Trace) -> None:
    props = head.get("deviceProperties")
    if isinstance(props, list):
        for i, d in enumerate(props):
            if isinstance(d, dict) and isinstance(d.get("name"), str):
                idx = _int(d.get("id"))
                t.device_names[idx if idx is not None else i] = d["name"]
                mem = _int(d.get("totalGlobalMem"))
                if mem is not None and mem > 0:
                    t.device_memory[idx if idx is not None else i] = mem
    dist = head.get("distributedInfo")
    if isinstance(dist, dict):
        t.rank, t.world_size = _int(dist.get("rank")), _int(dist.get("world_size"))
    t.base_time_ns = _int(head.get("baseTimeNanoseconds"))
    for key in ("float32_matmul_precision", "allow_tf32", "torch_version", "record_shapes"):
        if key in head and isinstance(head[key], (str, int, float, bool)):
            t.meta[key] = head[key]
    trace_meta = head.get("metadata") or head.get("perfstack")
    if isinstance(trace_meta, dict):
        for k, v in trace_meta.items():
            if isinstance(v, (str, int, float, bool)):
                t.meta[str(k)] = v


# --- values -------------------------------------------------------------------------------------

def _num(v: Any) -> float | None:
    """A finite float from a JSON number or a numeric string; None otherwise."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float, str)):
        try:
            f = float(v)
        except (ValueError, OverflowError):
            return None
        return f if -_INF < f < _INF else None
    return None


def _int(v: Any) -> int | None:
    """An int that fits in 64 bits from a JSON number or numeric string (floats truncated); None otherwise."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if -(2**63) < v < 2**63 else None
    if isinstance(v, str):
        try:
            i = int(v)
        except ValueError:
            pass
        else:
            return i if -(2**63) < i < 2**63 else None
    f = _num(v)
    return int(f) if f is not None and abs(f) < 2**63 else None


def _tid(v: Any) -> Any:
    return v if isinstance(v, (int, str, float)) and not isinstance(v, bool) else None


def _shapes(v: Any) -> list[Any] | None:
    """Input Dims / Input type as the trace has them (nested lists); a value that is not a list is None."""
    return v if isinstance(v, list) else None


def _category(cat: str) -> tuple[str, int]:
    """(kind, group) of an event category: group 0 unused, 1 GPU work, 2 GPU span, 3 runtime, 4 operator."""
    c = cat.lower()
    if c in GPU_CATS:
        return GPU_CATS[c], 1
    if c in GPU_ANNOTATION_CATS:
        return "annotation", 2
    if c in RUNTIME_CATS:
        return "runtime", 3
    if c in OP_CATS:
        return ("op" if c in ("cpu_op", "operator") else "annotation"), 4
    return "", 0


# --- events -------------------------------------------------------------------------------------

class _Builder:
    def __init__(self, t: Trace, lenient: bool) -> None:
        self.t = t
        self.lenient = lenient
        self.skipped = 0
        self.names: dict[str, str] = {}
        self.tids: dict[Any, Any] = {}
        self.cats: dict[str, tuple[str, int]] = {}
        self.shapes = _Shapes()

    def add(self, kind: BatchKind, batch: Any) -> None:
        """One batch of events from tracefile.Events, in file order."""
        if kind == "objects":
            for e in batch:
                self.loose(e)
        elif self.lenient:
            for e in batch:
                self.loose(generic(e))
        elif kind == "typed":
            self.typed(batch)
        else:
            self.raw(batch)

    def finish(self) -> None:
        t = self.t
        t.skipped_events = self.skipped
        steps = sorted(t.steps, key=_TS)
        # one window per step number (a user annotation and a cpu_op copy may both exist)
        seen: set[int] = set()
        t.steps = []
        for s in steps:
            if s.number not in seen:
                seen.add(s.number)
                t.steps.append(s)
        for lst in (t.gpu, t.gpu_annotations, t.runtime, t.ops):
            lst.sort(key=_TS)

    def raw(self, batch: list[Raw]) -> None:
        """Raw events, each decoded on its own: one the typed decoder rejects goes through the
        lenient path in its turn, after the events before it are built, so every list keeps the
        file's order."""
        dec = EVENT.decode
        done: list[Any] = []
        for r in batch:
            try:
                done.append(dec(r))
            except ERRORS:
                self.typed(done)
                done = []
                self.loose(generic(r))
        self.typed(done)

    def typed(self, events: list[Any]) -> None:
        """Decoded events, each built into its list. One loop over the batch, with no call per event
        but the struct's own: this runs for each of a large trace's millions of events, where a call
        apiece is most of the time. An event without the fields every event needs is counted as
        skipped; a ProfilerStep#N among the operators is a step window instead."""
        t = self.t
        add_runtime, add_op, add_step = t.runtime.append, t.ops.append, t.steps.append
        names, cats, tids, shapes = self.names, self.cats, self.tids, self.shapes
        noargs = NO_ARGS
        gpu: list[Any] = []
        skipped = 0
        for e in events:
            if e.ph != "X":
                if e.ph == "i" and e.name == "[memory]" and e.args is not None:
                    a = e.args
                    self.memory(a.device_type, a.device_id, a.allocated, a.reserved)
                continue
            cat = e.cat
            kind, group = cats.get(cat) or self._category(cat)
            if not group:
                continue
            name, ts, dur = e.name, e.ts, e.dur
            if name is None or ts is None or dur is None or dur < 0:
                skipped += 1
                continue
            n = names.setdefault(name, name)
            if group < 3:
                gpu.append((kind, n, e))
                continue
            a = e.args
            if a is None:
                a = noargs
            tid = e.tid
            tid = tids.setdefault(tid, tid)
            if group == 3:  # a CUDA runtime or driver call
                add_runtime(CpuEvent(kind, n, ts, dur, tid, a.correlation, a.external_id))
                continue
            if n.startswith("ProfilerStep#"):
                m = STEP_RE.match(n)
                if m:
                    add_step(Step(n, int(m.group(1)), ts, dur))
                    continue
            # Input Dims, Input type, Concrete Inputs: one list per distinct text (null: None)
            add_op(CpuEvent(kind, n, ts, dur, tid, None, a.external_id, shapes[bytes(a.dims)],
                            shapes[bytes(a.types)], shapes[bytes(a.concrete)],
                            shapes[bytes(a.strides)] if n in CONCAT_OPS else None))
        self.skipped += skipped
        self._gpu_events(gpu)

    def _category(self, cat: str | None) -> tuple[str, int]:
        if cat is None:
            return "", 0
        c = self.cats[cat] = _category(cat)
        return c

    def _gpu_events(self, rows: list[Any]) -> None:
        """GPU work or GPU spans; the device and stream fall back to the event's pid and tid, as the
        lenient path's do."""
        gpu, spans = self.t.gpu.append, self.t.gpu_annotations.append
        for kind, n, e in rows:
            a = e.args
            if a is None:
                dev = stream = corr = ext = nbytes = None
            else:
                dev, stream, corr, ext, nbytes = a.device, a.stream, a.correlation, a.external_id, a.bytes
            if dev is None:
                dev = _int(e.pid) or 0
            if stream is None:
                stream = _int(e.tid) or 0
            (spans if kind == "annotation" else gpu)(GpuEvent(kind, n, e.ts, e.dur, dev, stream, corr, ext, nbytes))

    def memory(self, device_type: int | None, device: int | None, allocated: int | None,
               reserved: int | None) -> None:
        """One [memory] event of a CUDA device (Device Type 1): the peaks of its allocator's totals."""
        if device_type != 1 or device is None:
            return
        t = self.t
        if allocated is not None and allocated > t.peak_allocated.get(device, -1):
            t.peak_allocated[device] = allocated
        if reserved is not None and reserved > t.peak_reserved.get(device, -1):
            t.peak_reserved[device] = reserved

    def loose(self, e: Any) -> None:
        """One event decoded to plain Python objects, checked field by field."""
        if not isinstance(e, dict):
            self.skipped += 1
            return
        if e.get("ph") != "X":
            args = e.get("args")
            if e.get("ph") == "i" and e.get("name") == "[memory]" and isinstance(args, dict):
                self.memory(_int(args.get("Device Type")), _int(args.get("Device Id")),
                            _int(args.get("Total Allocated")), _int(args.get("Total Reserved")))
            return
        cat = e.get("cat")
        if not isinstance(cat, str):
            return
        c = self.cats.get(cat)
        if c is None:
            c = self.cats[cat] = _category(cat)
        kind, group = c
        if not group:
            return
        name = e.get("name")
        ts, dur = _num(e.get("ts")), _num(e.get("dur"))
        if not isinstance(name, str) or ts is None or dur is None or dur < 0:
            self.skipped += 1
            return
        if abs(ts) > MAX_TIME_US or dur > MAX_TIME_US:
            raise InputError(f"trace file {self.t.path}: {cat} event {name[:200]!r} has ts {ts:g} µs, dur {dur:g} µs: "
                             f"not a time any clock gives (at most 2^53 µs, 285 years)",
                             hint="the trace is corrupt, or not torch.profiler's (its times are µs); re-export it")
        n = self.names.setdefault(name, name)
        args = e.get("args")
        if not isinstance(args, dict):
            args = {}
        t = self.t
        if group < 3:
            dev = _int(args.get("device"))
            if dev is None:
                dev = _int(e.get("pid")) or 0
            stream = _int(args.get("stream"))
            if stream is None:
                stream = _int(e.get("tid")) or 0
            (t.gpu if group == 1 else t.gpu_annotations).append(
                GpuEvent(kind, n, ts, dur, dev, stream, _int(args.get("correlation")),
                         _int(args.get("External id")), _int(args.get("bytes"))))
            return
        tid = _tid(e.get("tid"))
        if group == 3:
            t.runtime.append(CpuEvent(kind, n, ts, dur, tid, _int(args.get("correlation")),
                                      _int(args.get("External id"))))
            return
        m = STEP_RE.match(n)
        if m:
            t.steps.append(Step(n, int(m.group(1)), ts, dur))
            return
        t.ops.append(CpuEvent(kind, n, ts, dur, tid, None, _int(args.get("External id")),
                              _shapes(args.get("Input Dims")), _shapes(args.get("Input type")),
                              _shapes(args.get("Concrete Inputs")),
                              _shapes(args.get("Input Strides")) if n in CONCAT_OPS else None))
