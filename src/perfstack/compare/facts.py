"""Which facts drifted between two Runs, and whether the two Runs saw the same hardware.

Facts are flattened to leaves first (``env.CUDA_VERSION``, ``gpu.list[0].power_limit_w``,
``python.packages.numpy``), so a drift names the one value that changed. Readings that change from
one minute to the next (temperatures, free memory, pressure stall averages) are *volatile*: they are
counted, not reported as drift.
"""

from __future__ import annotations

import re
from typing import Any

from perfstack.model import Facts
from perfstack.records.diff import FactDrift, Hardware, HardwareDiff

MAX_DEPTH = 3
# Fields that identify an element of a list of records, so lists are compared element by element.
ID_FIELDS = ("index", "name", "mountpoint", "id", "pci_bus_id")

# Fact-key prefix -> the drift category a reader looks for.
CATEGORIES = {
    "driver": "driver", "gpu": "driver & GPU", "kernel": "kernel parameters", "system": "kernel parameters",
    "limits": "kernel parameters", "swap": "kernel parameters", "cpu": "CPU", "mem": "memory", "numa": "memory",
    "env": "environment", "nccl": "environment", "python": "libraries", "container": "container",
    "cgroup": "container", "proc": "container", "pcie": "PCIe / topology", "storage": "storage",
    "network": "network", "kernel_log": "kernel log",
}

VOLATILE = [re.compile(p) for p in (
    r"^psi\.", r"^mem\.available_bytes$", r"^cgroup\.(memory_current_bytes|memory_working_set_bytes|pids_current)$",
    r"^cgroup\.cpu_stat\.", r"^cgroup\.path$", r"^kernel_log\.oldest_s$", r"^proc\.vm_swap_bytes$", r"^bench\.",
    r"^gpu\.list\[[^]]+\]\.(power_draw_w|temperature_c|sm_clock_mhz|utilization_gpu|clocks_event_reasons|"
    r"compute_processes|ecc_volatile_\w+)$",
    r"^storage\.mounts\[[^]]+\]\.dev$",
)]

# The parts of the machine a benchmark figure depends on; two Runs differing in one of these cannot
# compare the figures that depend on it as "the same machine, changed software".
HARDWARE_KEYS = {
    "gpu": ("gpu.count", "gpu.models"),
    "cpu": ("cpu.model", "cpu.logical_count", "numa.node_count"),
    "memory": ("mem.total_gib",),
    "storage": ("storage.devices",),
}


ELEMENT = re.compile(r"^(.*?\[[^]]+\])")


def category(key: str) -> str:
    head = key.split(".", 1)[0].split("[", 1)[0]
    return CATEGORIES.get(head, head)


def is_volatile(key: str) -> bool:
    return any(p.search(key) for p in VOLATILE)


def _item_id(item: dict[str, Any], i: int) -> str:
    for f in ID_FIELDS:
        if f in item and isinstance(item[f], (str, int)):
            return str(item[f])
    return str(i)


def flatten(key: str, value: Any, depth: int = 0) -> dict[str, Any]:
    """A fact value as {leaf key: scalar or list of scalars}."""
    if depth < MAX_DEPTH and isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(f"{key}.{k}", v, depth + 1))
        return out
    if depth < MAX_DEPTH and isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        out = {}
        for i, item in enumerate(value):
            out.update(flatten(f"{key}[{_item_id(item, i)}]", item, depth + 1))
        return out
    return {key: value}


def leaves(facts: Facts) -> dict[str, Any]:
    """Every available fact flattened; an unavailable fact is one leaf holding its reason."""
    out: dict[str, Any] = {}
    for key, fact in facts.items():
        if fact.available:
            out.update(flatten(key, fact.value))
        else:
            out[key] = f"(not available: {fact.reason})" if fact.reason else "(not available)"
    return out


def drift(before: Facts, after: Facts) -> tuple[list[FactDrift], int]:
    """(drifted leaves, number of volatile leaves that changed). Each drift is
    {key, category, before, after}; a leaf present on one side only has None on the other."""
    a, b = leaves(before), leaves(after)
    out: list[FactDrift] = []
    volatile = 0
    done: set[str] = set()
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key), b.get(key)
        if va == vb:
            continue
        whole = _one_sided_element(key, a, b)
        if whole:  # a GPU, disk or interface present on one side only: one row, not one per field
            if whole not in done:
                done.add(whole)
                out.append(FactDrift(key=whole, category=category(whole), before="present" if key in a else None,
                                     after="present" if key in b else None))
            continue
        if is_volatile(key):
            volatile += 1
            continue
        out.append(FactDrift(key=key, category=category(key), before=va, after=vb))
    return out, volatile


def _one_sided_element(key: str, a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """The list element (``gpu.list[1]``) ``key`` belongs to, when that element exists on one side only."""
    m = ELEMENT.match(key)
    if not m:
        return None
    prefix = m.group(1)
    def has(side: dict[str, Any]) -> bool:
        return any(k == prefix or k.startswith(prefix + ".") for k in side)
    return prefix if has(a) != has(b) else None


def hardware(facts: Facts) -> dict[str, Any]:
    """The hardware identity of a Run: what benchmark figures are bound to."""
    gpus = facts.value("gpu.list") or []
    names = [g.get("name") for g in gpus if isinstance(g, dict)]
    total = facts.value("mem.total_bytes")
    disks = facts.value("storage.block_devices") or []
    return {
        "gpu.count": facts.value("gpu.count", len(names)),
        "gpu.models": sorted({n for n in names if n}),
        "cpu.model": facts.value("cpu.model"),
        "cpu.logical_count": facts.value("cpu.logical_count"),
        "numa.node_count": len(facts.value("numa.nodes") or []) or None,
        "mem.total_gib": round(total / 2**30) if isinstance(total, (int, float)) else None,
        "storage.devices": sorted(f"{d.get('name')}:{d.get('kind')}" for d in disks if isinstance(d, dict)),
    }


def hardware_diff(before: Facts, after: Facts) -> HardwareDiff:
    """{same, before, after, differs: [keys], components: [gpu|cpu|memory|storage that differ]}.
    A key unknown on either side (older Run, missing probe) is not counted as a difference."""
    hb, ha = hardware(before), hardware(after)
    differs = [k for k in hb if hb[k] not in (None, []) and ha[k] not in (None, []) and hb[k] != ha[k]]
    components = [c for c, keys in HARDWARE_KEYS.items() if any(k in differs for k in keys)]
    return HardwareDiff(same=not differs, before=_identity(hb), after=_identity(ha), differs=differs,
                        components=components)


def _identity(h: dict[str, Any]) -> Hardware:
    names = {key: name for name, key in Hardware.KEYS.items()}
    return Hardware(**{names[k]: v for k, v in h.items()})
