"""Load a Kineto (torch.profiler) Chrome trace into compact, typed event lists.

``load(path)`` reads ``.json`` or ``.json.gz`` (what ``export_chrome_trace`` and
``tensorboard_trace_handler`` write) and returns a ``Trace``; anything that is not a readable
torch.profiler trace raises ``InputError`` naming the file. Pure standard library.

Kineto field names used (verified against torch 2.11 traces in tests/fixtures/traces):
  steps        ``ProfilerStep#N`` (cat ``user_annotation`` or ``cpu_op``) on the CPU
  GPU work     cat ``kernel`` / ``gpu_memcpy`` / ``gpu_memset`` (older Kineto: ``Kernel``, ``Memcpy``,
               ``Memset``); ``args``: ``device``, ``stream``, ``correlation``, ``External id``, ``bytes``
  host calls   cat ``cuda_runtime`` / ``cuda_driver`` (``cudaLaunchKernel``, ``cudaGraphLaunch``, ...)
  operators    cat ``cpu_op`` with ``Input Dims`` / ``Input type`` when ``record_shapes=True``;
               ``user_annotation`` for ``enumerate(DataLoader)#...``, ``Optimizer.step#...``
  metadata     ``deviceProperties`` (GPU names), ``distributedInfo`` (rank, world size)

A trace cut short (a truncated file, a crashed job) is salvaged event by event: what parsed is
kept and ``Trace.warnings`` says so. Malformed individual events are skipped and counted.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfstack.errors import InputError

GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset",
            "memcpy": "memcpy", "memset": "memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
OP_CATS = {"cpu_op", "operator", "user_annotation", "python_function"}
STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
HINT = "perfstack reads torch.profiler (Kineto) Chrome traces: prof.export_chrome_trace(path) or " \
       "torch.profiler.tensorboard_trace_handler(dir) write them"


@dataclass(slots=True)
class GpuEvent:
    kind: str  # kernel | memcpy | memset
    name: str
    ts: float  # µs
    dur: float
    device: int
    stream: int
    correlation: int | None
    external_id: int | None
    bytes: int | None


@dataclass(slots=True)
class CpuEvent:
    cat: str  # runtime | op | annotation
    name: str
    ts: float
    dur: float
    tid: Any
    correlation: int | None = None
    external_id: int | None = None
    dims: list | None = None
    types: list | None = None


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


def _read_bytes(p: Path) -> tuple[bytes, list[str]]:
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise InputError(f"trace file {p} does not exist") from None
    except IsADirectoryError:
        raise InputError(f"{p} is a directory, not a trace file",
                         hint="give the .pt.trace.json(.gz) files inside it, e.g. DIR/*.pt.trace.json*") from None
    except OSError as e:
        raise InputError(f"cannot read trace file {p}: {e.strerror or e}") from None
    warnings: list[str] = []
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw), warnings
        except (EOFError, OSError, zlib.error):
            # truncated gzip: keep what decompresses
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                data = d.decompress(raw)
            except zlib.error as e:
                raise InputError(f"trace file {p} is a corrupt gzip file ({e})") from None
            if not data:
                raise InputError(f"trace file {p} is a truncated gzip file with nothing readable") from None
            warnings.append(f"{p.name}: gzip stream is truncated; analysed the part that was readable")
            return data, warnings
    if p.name.endswith(".gz"):
        raise InputError(f"trace file {p} ends in .gz but is not gzip-compressed",
                         hint="rename it to .json if it is plain JSON, or re-export the trace")
    return raw, warnings


def _salvage(text: str) -> dict | None:
    """Events of a Chrome trace cut short, parsed one by one up to the cut."""
    m = re.search(r'"traceEvents"\s*:\s*\[', text)
    if not m or not text.lstrip().startswith("{"):
        return None
    dec = json.JSONDecoder()
    events, i, n = [], m.end(), len(text)
    while i < n:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            break
        try:
            obj, i = dec.raw_decode(text, i)
        except ValueError:
            break
        events.append(obj)
    head: dict = {}
    # metadata that precedes traceEvents (deviceProperties, distributedInfo) — best effort
    pre = text[:m.start()].rstrip().rstrip(",") + "}"
    try:
        head = json.loads(pre) if pre.startswith("{") else {}
    except ValueError:
        head = {}
    head = head if isinstance(head, dict) else {}
    head["traceEvents"] = events
    return head


def _parse_json(p: Path, data: bytes, warnings: list[str]) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError(f"trace file {p} is nested too deeply to be a trace") from None
    except ValueError as e:
        salvaged = _salvage(text)
        if salvaged is not None and salvaged["traceEvents"]:
            warnings.append(f"{p.name} is not valid JSON ({getattr(e, 'msg', e)} at line {getattr(e, 'lineno', '?')}): "
                            f"the file looks truncated; analysed the {len(salvaged['traceEvents'])} events before the cut")
            return salvaged
        line = getattr(e, "lineno", None)
        raise InputError(f"trace file {p} is not valid JSON" + (f" (line {line}: {e.msg})" if line else ""),
                         hint=HINT) from None


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        f = float(v)
        return f if f == f and abs(f) != float("inf") else None
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return None
        return f if f == f and abs(f) != float("inf") else None
    return None


def _int(v: Any) -> int | None:
    f = _num(v)
    return int(f) if f is not None and abs(f) < 2**63 else None


def load(path: str | Path) -> Trace:
    p = Path(path)
    data, warnings = _read_bytes(p)
    if not data.strip():
        raise InputError(f"trace file {p} is empty", hint=HINT)
    doc = _parse_json(p, data, warnings)
    del data
    if isinstance(doc, list):  # the Chrome "JSON array" form
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        kind = "nsys export" if isinstance(doc, dict) and any(str(k).lower().startswith(("nsys", "cupti", "target")) for k in doc) \
            else "Chrome trace"
        raise InputError(f"{p} is not a {kind} with traceEvents", hint=HINT)
    t = Trace(path=str(p), warnings=warnings)
    _metadata(doc, t)
    _events(doc["traceEvents"], t)
    kineto = bool(doc.get("schemaVersion") is not None or doc.get("deviceProperties") or t.steps or t.gpu or t.runtime
                  or any(e.cat == "op" for e in t.ops))
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


def _metadata(doc: dict, t: Trace) -> None:
    props = doc.get("deviceProperties")
    if isinstance(props, list):
        for i, d in enumerate(props):
            if isinstance(d, dict) and isinstance(d.get("name"), str):
                idx = _int(d.get("id"))
                t.device_names[idx if idx is not None else i] = d["name"]
    dist = doc.get("distributedInfo")
    if isinstance(dist, dict):
        t.rank, t.world_size = _int(dist.get("rank")), _int(dist.get("world_size"))
    for key in ("float32_matmul_precision", "allow_tf32", "torch_version", "record_shapes"):
        if key in doc and isinstance(doc[key], (str, int, float, bool)):
            t.meta[key] = doc[key]
    trace_meta = doc.get("metadata") or doc.get("perfstack")
    if isinstance(trace_meta, dict):
        for k, v in trace_meta.items():
            if isinstance(v, (str, int, float, bool)):
                t.meta[str(k)] = v


def _events(events: list, t: Trace) -> None:
    gpu, runtime, ops, steps = t.gpu, t.runtime, t.ops, t.steps
    skipped = 0
    for e in events:
        if not isinstance(e, dict):
            skipped += 1
            continue
        if e.get("ph") != "X":
            continue
        cat = e.get("cat")
        if not isinstance(cat, str):
            continue
        name = e.get("name")
        ts, dur = _num(e.get("ts")), _num(e.get("dur"))
        if not isinstance(name, str) or ts is None or dur is None or dur < 0:
            skipped += 1
            continue
        args = e.get("args")
        if not isinstance(args, dict):
            args = {}
        lcat = cat.lower()
        kind = GPU_CATS.get(lcat)
        if kind is not None:
            dev = _int(args.get("device"))
            if dev is None:
                dev = _int(e.get("pid")) or 0
            stream = _int(args.get("stream"))
            if stream is None:
                stream = _int(e.get("tid")) or 0
            gpu.append(GpuEvent(kind, name, ts, dur, dev, stream, _int(args.get("correlation")),
                                _int(args.get("External id")), _int(args.get("bytes"))))
        elif lcat in RUNTIME_CATS:
            runtime.append(CpuEvent("runtime", name, ts, dur, e.get("tid"), _int(args.get("correlation")),
                                    _int(args.get("External id"))))
        elif lcat in OP_CATS:
            m = STEP_RE.match(name)
            if m:
                steps.append(Step(name, int(m.group(1)), ts, dur))
                continue
            dims, types = args.get("Input Dims"), args.get("Input type")
            ops.append(CpuEvent("op" if lcat in ("cpu_op", "operator") else "annotation", name, ts, dur, e.get("tid"),
                                None, _int(args.get("External id")),
                                dims if isinstance(dims, list) else None, types if isinstance(types, list) else None))
    t.skipped_events = skipped
    t.n_events = len(events)
    steps.sort(key=lambda s: s.ts)
    # one window per step number (a user annotation and a cpu_op copy may both exist)
    seen: set[int] = set()
    t.steps = [s for s in steps if not (s.number in seen or seen.add(s.number))]
    gpu.sort(key=lambda g: g.ts)
    runtime.sort(key=lambda r: r.ts)
    ops.sort(key=lambda o: o.ts)
