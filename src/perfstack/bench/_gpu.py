"""Helpers the GPU benchmarks share: which GPU this is (facts + spec table), free-memory checks,
clock/power telemetry before and after with the notes it implies, an L2 flush, and building
Measurements from raw samples the same way everywhere.

Everything that touches torch takes the module as an argument (torch is imported lazily by each
benchmark), so the pure parts are tested on a CPU box with hand-built facts.
"""

from __future__ import annotations

import gc
import os
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from perfstack.bench import timing
from perfstack.bench.verdict import judge
from perfstack.host import nvml
from perfstack.model import Facts, Measurement
from perfstack.probes.gpu import EVENT_BITS
from perfstack.specs import lookup_or_derive, pcie_gbps, practical_fraction
from perfstack.units import GiB, KiB, MiB
from perfstack.units import size_label as size_label  # the benchmarks' name for a buffer size

KIB, MIB, GIB = KiB, MiB, GiB  # the spelling bench.collectives still reads
# Left free on top of a benchmark's own buffers: cuBLAS workspace, NCCL buffers, the allocator's rounding.
RESERVE_BYTES = 512 * MiB
# L2 size when the spec table does not know the GPU: larger than any current L2 (B200: 126 MB).
DEFAULT_L2_BYTES = 128 * MiB
# Clock-event reasons that mean the clocks were held down (gpu_idle, app clocks, sync boost do not).
LIMITING = {"sw_power_cap": "power cap", "hw_slowdown": "hardware slowdown",
            "sw_thermal_slowdown": "thermal (software)", "hw_thermal_slowdown": "thermal (hardware)",
            "hw_power_brake_slowdown": "power brake"}


# -- sizes ----------------------------------------------------------------------------------
def gbps(nbytes: int, seconds: float) -> float:
    """Bandwidth in GB/s (1e9 bytes per second), the unit every bandwidth figure uses."""
    return nbytes / seconds / 1e9


def fits(need_bytes: int, free_bytes: int | None, reserve: int = RESERVE_BYTES) -> bool:
    """Whether ``need_bytes`` of new buffers fit in the free device memory, leaving ``reserve``.
    An unknown free figure (None) is optimistic: the allocation itself will then say."""
    return free_bytes is None or need_bytes + reserve <= free_bytes


def no_room(need_bytes: int, free_bytes: int | None) -> str:
    return (f"needs {need_bytes / GiB:.2f} GiB of GPU memory (+{RESERVE_BYTES // MiB} MiB headroom), "
            f"{(free_bytes or 0) / GiB:.2f} GiB free")


def largest_fitting(candidates: list[int], buffers: int, free_bytes: int | None) -> int | None:
    """The largest per-buffer size among ``candidates`` for which ``buffers`` buffers fit."""
    for size in sorted(candidates, reverse=True):
        if fits(size * buffers, free_bytes):
            return size
    return None


def free_bytes(torch: Any, device: int) -> int | None:
    """Free device memory as the driver sees it, after handing the allocator's cache back."""
    try:
        torch.cuda.empty_cache()
        return int(torch.cuda.mem_get_info(device)[0])
    except Exception:
        return None


@contextmanager
def on_device(torch: Any, device: int) -> Iterator[None]:
    """Run a benchmark on ``device`` and give every buffer it made back to the driver afterwards."""
    try:
        with torch.cuda.device(device):
            yield
    finally:
        gc.collect()
        try:
            torch.cuda.synchronize(device)
        except Exception:
            pass
        torch.cuda.empty_cache()


# -- which GPU, and its spec ----------------------------------------------------------------
def bus_id(props: Any) -> str | None:
    """torch device properties -> '0000:19:00.0' (the form gpu.list uses), when torch says."""
    try:
        return f"{int(props.pci_domain_id):04x}:{int(props.pci_bus_id):02x}:{int(props.pci_device_id):02x}.0"
    except (AttributeError, TypeError, ValueError):
        return None


def gpu_entry(facts: Facts, device: int, bus: str | None = None) -> dict[str, Any]:
    """This CUDA device's entry in gpu.list: matched by PCI bus id where known (CUDA_VISIBLE_DEVICES
    renumbers devices, NVML does not), else by position. {} when the doctor saw no GPUs."""
    gpus = facts.value("gpu.list") or []
    if bus:
        for g in gpus:
            if isinstance(g, dict) and g.get("pci_bus_id") == bus:
                return g
    return gpus[device] if 0 <= device < len(gpus) and isinstance(gpus[device], dict) else {}


def device_entry(torch: Any, facts: Facts, device: int) -> dict[str, Any]:
    """gpu.list's entry for this device, with the name, SM count and compute capability torch
    reports filled in where the doctor had nothing."""
    try:
        props = torch.cuda.get_device_properties(device)
    except Exception:
        props = None
    entry = dict(gpu_entry(facts, device, bus_id(props) if props is not None else None))
    if props is not None:
        if not entry.get("name"):
            entry["name"] = getattr(props, "name", None)
        entry.setdefault("sm_count", getattr(props, "multi_processor_count", None))
        if not entry.get("compute_capability") and hasattr(props, "major"):
            entry["compute_capability"] = f"{props.major}.{props.minor}"
    return entry


def spec_for(entry: dict[str, Any] | str | None) -> Any:
    """The spec table's row for this GPU, else peaks derived from SM count × max clock (flagged
    ``derived``), else None (unknown SKU, or no spec table)."""
    if isinstance(entry, str) or entry is None:
        entry = {"name": entry}
    name = entry.get("name")
    if not name:
        return None
    try:
        return lookup_or_derive(name, entry.get("sm_count"), entry.get("sm_clock_max_mhz"),
                                entry.get("compute_capability"))
    except Exception:
        return None


def spec_notes(spec: Any, entry: dict[str, Any]) -> list[str]:
    if spec is None:
        return [f"{entry.get('name') or 'this GPU'} is not in the spec table: no peak to compare with"]
    if getattr(spec, "derived", False):
        return [f"{entry.get('name')} is not in the spec table: peak derived from SM count × max clock"]
    return []


def spec_value(spec: Any, field: str) -> Any:
    return getattr(spec, field, None) if spec is not None else None


def peak_tflops(spec: Any, dtype: str) -> float | None:
    v = spec.peak_tflops(dtype) if spec is not None else None
    return float(v) if v else None


def practical(key: str) -> float | None:
    """The known practical ceiling (fraction of peak) for ``key`` ("gemm_bf16", "hbm_copy", ...)."""
    v = practical_fraction.get(key)
    return float(v) if v is not None else None


def pcie_peak(gen: int | None, width: int | None) -> float | None:
    """GB/s per direction of a PCIe link."""
    try:
        return pcie_gbps(gen, width) if gen and width else None
    except ValueError:  # an odd width a virtual device reports
        return None


def pcie_link(entry: dict[str, Any]) -> dict[str, int | None]:
    """The link's max and current generation and width: NVML/nvidia-smi fields, sysfs as fallback.
    pcie_gen_max is NVML's system max (the lower of host and GPU), the link's real ceiling."""
    def first(*keys: str) -> int | None:
        return next((entry[k] for k in keys if isinstance(entry.get(k), int) and entry[k] > 0), None)
    return {"gen_max": first("pcie_gen_max", "sysfs_pcie_gen_max", "pcie_gen_gpu_max"),
            "width_max": first("pcie_width_max", "sysfs_pcie_width_max"),
            "gen": first("pcie_gen", "sysfs_pcie_gen"), "width": first("pcie_width", "sysfs_pcie_width")}


def link_notes(link: dict[str, int | None]) -> list[str]:
    gen, width, gmax, wmax = link["gen"], link["width"], link["gen_max"], link["width_max"]
    if gen and gmax and width and wmax and (gen < gmax or width < wmax):
        return [f"the link was at Gen{gen} x{width} when probed (max Gen{gmax} x{wmax}); GPUs lower the link "
                "speed at idle, so this matters only if the measured bandwidth is low too"]
    return []


def source(spec: Any, what: str) -> str:
    """Where a peak came from, for the report: the spec row's name and its own source."""
    if spec is None:
        return ""
    cite = getattr(spec, "source", "") or ""
    return f"{getattr(spec, 'name', 'spec')} {what}" + (f" ({cite})" if cite else "")


def add_notes(measurements: list[Measurement], notes: list[str], headline_only: bool = True) -> None:
    for m in measurements:
        if m.status == "ok" and not (headline_only and m.params.get("sweep")):
            m.notes += [n for n in notes if n not in m.notes]


def l2_bytes(spec: Any) -> int:
    mb = spec_value(spec, "l2_mb")
    return int(mb * 1e6) if isinstance(mb, (int, float)) and mb > 0 else DEFAULT_L2_BYTES


class L2Flush:
    """Writes a buffer twice the L2 size, evicting whatever the previous repetition left there."""

    def __init__(self, torch: Any, device: int, l2: int) -> None:
        self.buf = torch.empty(2 * l2 // 4, dtype=torch.float32, device=f"cuda:{device}")

    def __call__(self) -> None:
        self.buf.fill_(1.0)


# -- telemetry ------------------------------------------------------------------------------
def telemetry(index: int) -> dict[str, Any]:
    return nvml.telemetry(index)


def limiting_reasons(mask: Any) -> list[str]:
    if not isinstance(mask, int):
        return []
    return [LIMITING[n] for b, n in enumerate(EVENT_BITS) if mask & (1 << b) and n in LIMITING]


def telemetry_notes(before: dict[str, Any], after: dict[str, Any], own_processes: int = 1) -> list[str]:
    """Clock limits seen after the run, a hot GPU, and other processes using the GPU.

    ``own_processes`` is how many processes of this benchmark hold a CUDA context on the GPU. NVML
    lists host PIDs, which inside a container differ from ours, so other users are counted, not named.
    """
    notes: list[str] = []
    reasons = limiting_reasons(after.get("clocks_event_reasons"))
    if reasons:
        clock = after.get("sm_clock_mhz")
        notes.append(f"clocks limited at the end of the run by {', '.join(reasons)}"
                     + (f" (SM {clock} MHz)" if isinstance(clock, int) else ""))
    pids = [p for tel in (before, after) for p in (tel.get("compute_pids") or [])]
    others = set(pids) - {os.getpid()}
    n_others = max(len(set(pids)) - own_processes, 0) if os.getpid() not in pids else len(others)
    if n_others:
        notes.append(f"GPU busy: {n_others} other process(es) had a CUDA context on this GPU during the run; "
                     "figures may be low")
    return notes


@contextmanager
def sampled(index: int, own_processes: int = 1) -> Iterator[dict[str, Any]]:
    """Telemetry before and after the block; ``tel["notes"]`` holds what it implies once it ends."""
    tel: dict[str, Any] = {"before": telemetry(index)}
    try:
        yield tel
    finally:
        tel["after"] = telemetry(index)
        tel["notes"] = telemetry_notes(tel["before"], tel["after"], own_processes)


# -- measurements ---------------------------------------------------------------------------
def measurement(bench: str, name: str, samples: list[float], to_value: Callable[[float], float], unit: str,
                params: dict[str, Any], notes: list[str] | None = None) -> Measurement:
    """A Measurement whose value is ``to_value(median seconds)``, with raw samples and spread.
    Telemetry is attached by ``finish`` once the block that measured it has ended."""
    stats = timing.summarize(samples)
    m = Measurement(bench=bench, name=name, value=to_value(stats["median"]) if stats else None, unit=unit,
                    params=params, samples=list(samples), stats=stats, method_version=1)
    m.notes = list(notes or []) + timing.spread_notes(stats)
    return m


def finish(measurements: list[Measurement], tel: dict[str, Any]) -> list[Measurement]:
    """Attach the block's telemetry (taken after the measurements were built) to each of them."""
    capped = "power cap" in limiting_reasons(tel.get("after", {}).get("clocks_event_reasons"))
    for m in measurements:
        if m.status == "ok":
            m.telemetry = {"before": tel.get("before", {}), "after": tel.get("after", {})}
            m.notes += [n for n in tel.get("notes", []) if n not in m.notes]
            if capped and (note := capped_note(m)):
                m.notes.append(note)
    return measurements


CAP_STEP = 0.05  # fastest sample this much above the median: the clocks dropped during the run


def capped_note(m: Measurement) -> str:
    """What a figure measured against the power cap gave before the cap lowered the clocks. A GPU at its
    cap runs a GEMM at full clocks for its first samples and slower once the cap bites (an H100's TF32
    GEMM ~410 TFLOP/s, then ~355), so a run's median depends on how long it ran and how warm the GPU
    was: two runs' medians differed by 7-17% while their fastest samples agreed within 0.2-4%."""
    if not m.samples or not m.value or m.unit not in ("TFLOP/s", "GB/s"):
        return ""
    st = timing.summarize(m.samples)
    if not st["min"] or st["median"] / st["min"] - 1 < CAP_STEP:
        return ""
    fast = m.value * st["median"] / st["min"]
    return (f"power cap bit during the run: fastest sample {fast:.4g} {m.unit}, median {m.value:.4g}; "
            "medians of capped runs depend on how warm the GPU was, so compare fastest samples too")


def skip(bench: str, name: str, reason: str, unit: str = "", params: dict[str, Any] | None = None) -> Measurement:
    return Measurement(bench=bench, name=name, value=None, unit=unit, params=params or {}, status="skipped",
                       reason=reason)


def error(bench: str, name: str, reason: str, unit: str = "", params: dict[str, Any] | None = None) -> Measurement:
    return Measurement(bench=bench, name=name, value=None, unit=unit, params=params or {}, status="error",
                       reason=reason[:500])


def judged(m: Measurement, peak: float | None, source: str, expected: float | None) -> Measurement:
    return judge(m, peak, source, expected) if m.status == "ok" else m


def is_oom(e: BaseException) -> bool:
    return "out of memory" in str(e).lower() or type(e).__name__ == "OutOfMemoryError"
