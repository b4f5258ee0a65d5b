"""The estimates section of a report: memory stacks against the GPU's capacity, latency bounds, and
every estimated figure with its formula, from what ``perfstack estimate`` writes (a sheet: sections
of numbers in base units with their working under ``working``, an EstimateSheet) or a hand-made tree
of {value, unit, formula} leaves (an EstimateTree); see perfstack.records.estimates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from perfstack.records.estimates import EstimateSheet, EstimateTree, Leaf
from perfstack.model import Run

BYTE_UNITS = {"b": 1e-9, "bytes": 1e-9, "kb": 1e-6, "mb": 1e-3, "gb": 1.0, "tb": 1e3, "kib": 2**10 / 1e9,
              "mib": 2**20 / 1e9, "gib": 2**30 / 1e9, "tib": 2**40 / 1e9}  # -> GB
TIME_UNITS = {"s": 1e3, "ms": 1.0, "us": 1e-3, "µs": 1e-3, "ns": 1e-6}  # -> ms
_NOT_SEGMENT = re.compile(r"total|capacity|available|free|limit|budget", re.I)


@dataclass
class EstimateRow:
    path: str
    value: Any
    unit: str = ""
    formula: str = ""
    label: str = ""


@dataclass
class EstimateView:
    memory: list[tuple[str, list[tuple[str, float]]]]  # (which, [(component, GB)])
    memory_totals: list[tuple[str, float, float | None]]  # (which, GB, fraction of capacity)
    capacity: tuple[str, float] | None  # (label, GB)
    latency: list[tuple[str, float, float, str]]  # (bound, ms, value, unit as estimated)
    rows: list[EstimateRow]
    total: tuple[str, float] | None = None  # the estimate's own peak total (GB), when the components overlap
    sheet: EstimateSheet | None = None  # the sheet perfstack estimate wrote (its own terminal table), else None
    what: str = ""  # which model, settings and GPU the sheet describes ("" for a hand-made tree)


def _bytes_to_gb(value: float, unit: str) -> float | None:
    k = BYTE_UNITS.get(unit.strip().lower())
    return value * k if k is not None else None


def _time_to_ms(value: float, unit: str) -> float | None:
    k = TIME_UNITS.get(unit.strip())
    return value * k if k is not None else None


def _gpu(run: Run) -> tuple[str | None, float | None]:
    """The Run's first GPU: name and memory in GB, from the facts."""
    for g in run.facts.value("gpu.list") or []:
        if isinstance(g, dict) and g.get("name"):
            mem = g.get("memory_total_bytes")
            return str(g["name"]), (mem / 1e9 if isinstance(mem, (int, float)) and mem else None)
    return None, None


# -- estimates --------------------------------------------------------------------------------
def estimate_rows(node: Any, path: str = "") -> list[EstimateRow]:
    if isinstance(node, Leaf):
        return [EstimateRow(path, node.value, node.unit or "", node.formula or "")]
    if isinstance(node, EstimateTree):
        out = []
        for k, v in node.items.items():
            out += estimate_rows(v, f"{path}.{k}" if path else str(k))
        return out
    if isinstance(node, list):
        return [EstimateRow(path, ", ".join(str(x) for x in node))]
    return [EstimateRow(path, node)]


def _memory_stacks(node: Any, path: str = "") -> list[tuple[str, list[tuple[str, float]], dict[str, float]]]:
    """Every dict under a key naming memory whose leaves are sizes: (path, components in GB, totals in GB)."""
    found: list[tuple[str, list[tuple[str, float]], dict[str, float]]] = []
    if not isinstance(node, EstimateTree):
        return found
    segs: list[tuple[str, float]] = []
    totals: dict[str, float] = {}
    for k, v in node.items.items():
        if isinstance(v, Leaf) and isinstance(v.value, (int, float)):
            gb = _bytes_to_gb(float(v.value), v.unit or "")
            if gb is None:
                continue
            if _NOT_SEGMENT.search(str(k)):
                totals[str(k)] = gb
            else:
                segs.append((str(k), gb))
    if segs and re.search(r"mem", path, re.I):
        found.append((path or "memory", segs, totals))
    for k, v in node.items.items():
        found += _memory_stacks(v, f"{path}.{k}" if path else str(k))
    return found


def _latencies(node: Any, path: str = "") -> list[tuple[str, float, float, str]]:
    out: list[tuple[str, float, float, str]] = []
    if not isinstance(node, EstimateTree):
        return out
    for k, v in node.items.items():
        p = f"{path}.{k}" if path else str(k)
        timed = re.search(r"latency|time|bound", f"{path}.{k}", re.I)
        if isinstance(v, Leaf) and isinstance(v.value, (int, float)) and timed:
            ms = _time_to_ms(float(v.value), v.unit or "")
            if ms is not None:
                out.append((p, ms, float(v.value), v.unit or ""))
        else:
            out += _latencies(v, p)
    return out


# Memory entries of an estimate sheet that are not parts of the peak: totals, peaks, per-token rates and
# the alternatives a phase or an option did not pick (activations with/without checkpointing, ...).
_NOT_A_PART = re.compile(r"total|peak|per_token|no_ckpt|ckpt_bytes|optimizer_temp|capacity|headroom", re.I)


def _sheet_memory(e: EstimateSheet) -> tuple[list[tuple[str, float]], float | None]:
    """(components in GB, the estimate's total in GB) from an estimate sheet's ``memory`` section."""
    memory, working = e.memory or {}, e.working
    peak = working.get("peak_allocated_bytes")
    phase = peak.inputs.get("phase") if peak else None
    skip = {"decode": "activations_bytes", "prefill": "decode_working_bytes"}.get(str(phase), "decode_working_bytes")
    segs = []
    for k, v in memory.items():
        w = working.get(k)
        unit = w.unit if w else "B" if k.endswith("_bytes") else ""
        if k == skip or _NOT_A_PART.search(k) or not isinstance(v, (int, float)) or v <= 0:
            continue
        gb = _bytes_to_gb(float(v), unit)
        if gb is not None:
            segs.append(((w.label if w else "") or k, gb))
    total = memory.get("total_bytes")
    return segs, float(total) / 1e9 if isinstance(total, (int, float)) else None


def _sheet_view(e: EstimateSheet) -> tuple[list[EstimateRow], list[tuple[str, float, float, str]]]:
    """Rows (section.key with label, value, unit, formula) and time bounds from an estimate sheet:
    sections of plain numbers whose working (label, unit, formula) is under ``working``; its other
    objects (model, gpu, ...) give a row of their description or name."""
    working = e.working
    rows: list[EstimateRow] = []
    times: list[tuple[str, float, float, str]] = []
    for section, values in e.items():
        if section == "working" or not isinstance(values, Mapping):
            continue
        keyed = [k for k in values if k in working]
        if not keyed:
            label = values.get("description") or values.get("name") or values.get("id")
            if label:
                rows.append(EstimateRow(section, label))
            continue
        for k in keyed:
            w = working[k]
            rows.append(EstimateRow(f"{section}.{k}", values[k], w.unit, w.formula, w.label))
            ms = _time_to_ms(float(values[k]), w.unit) if isinstance(values[k], (int, float)) else None
            if ms is not None and section in ("time", "latency"):
                times.append((w.label or k, ms, float(values[k]), w.unit))
    return rows, times


def _what(e: EstimateSheet) -> str:
    """'llama-3-8b · infer · batch 1 · prompt 1024 · gen 128 · dtype bf16 · tp 1 · on NVIDIA H200 SXM 141GB'."""
    settings = " · ".join(f"{k} {v}" for k, v in e.settings.items() if v is not None and v is not False)
    parts = [e.model_name or "a model given by its shape", e.kind, settings,
             f"on {e.gpu_name}" if e.gpu_name else ""]
    return " · ".join(p for p in parts if p)


def estimate_view(run: Run, spec: Any) -> EstimateView | None:
    e = run.estimates
    if e is None or (isinstance(e, EstimateTree) and not e.items):
        return None
    if isinstance(e, EstimateSheet):  # the estimate sheet perfstack estimate writes
        view, total_gb = _sheet_estimate(e)
        view.sheet = e
        view.what = _what(e)
    else:  # a hand-made tree of {value, unit, formula} leaves
        view, total_gb = _any_estimate(e), None
    if view.capacity is None:
        view.capacity = _gpu_capacity(run, spec)
    for p, segs in view.memory:
        t = total_gb if total_gb is not None else sum(v for _, v in segs)
        view.memory_totals.append((p, t, t / view.capacity[1] if view.capacity else None))
    return view


def _sheet_estimate(e: EstimateSheet) -> tuple[EstimateView, float | None]:
    """The view of an estimate sheet, and the sheet's own memory total (GB) when it states one."""
    segs, total_gb = _sheet_memory(e)
    capacity: tuple[str, float] | None = None
    cap = (e.capacity or {}).get("gpu_capacity_bytes")
    if isinstance(cap, (int, float)) and cap:
        name = (e.gpu or {}).get("name")
        capacity = (f"{name or 'GPU'} capacity", float(cap) / 1e9)
    total = None
    if total_gb is not None and segs and abs(sum(v for _, v in segs) - total_gb) > 0.01 * total_gb:
        total = ("estimated peak total", total_gb)  # the parts overlap in time: the peak is not their sum
    rows, lat = _sheet_view(e)
    return EstimateView(memory=[("per GPU", segs)] if segs else [], memory_totals=[], capacity=capacity,
                        latency=lat, rows=rows, total=total), total_gb


def _any_estimate(e: EstimateTree | Leaf) -> EstimateView:
    stacks = _memory_stacks(e)
    capacity: tuple[str, float] | None = None
    for _, _, stack_totals in stacks:
        for k, v in stack_totals.items():
            if re.search(r"capacity|available|limit", k, re.I):
                capacity = (k.replace("_", " "), v)
    return EstimateView(memory=[(p, segs) for p, segs, _ in stacks], memory_totals=[], capacity=capacity,
                        latency=_latencies(e), rows=estimate_rows(e))


def _gpu_capacity(run: Run, spec: Any) -> tuple[str, float] | None:
    """The GPU's memory as the Run recorded it, else the spec table's."""
    name, mem = _gpu(run)
    if mem:
        return (f"{name or 'GPU'} memory", mem)
    if spec is not None and getattr(spec, "hbm_gb", None):
        return (f"{spec.name} memory (spec)", float(spec.hbm_gb))
    return None
