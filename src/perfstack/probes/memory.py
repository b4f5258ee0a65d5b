"""Host memory and the virtual-memory knobs that decide whether GPU-feeding buffers stay resident:
swap, huge pages, NUMA balancing, page-cache writeback, and whether an IOMMU translates DMA."""

from __future__ import annotations

import re

from perfstack.host import Unavailable
from perfstack.probes.collector import Collector, Malformed, probe

KIB = 1024
DIRTY_KNOBS = ("dirty_ratio", "dirty_background_ratio", "dirty_bytes", "dirty_background_bytes")
# Reading every IOMMU group's type would cost one read per device; the default domain type is
# system-wide, so a few groups tell the mode.
IOMMU_GROUP_SAMPLE = 4


def parse_bracketed(text: str) -> str:
    """sysfs choice files mark the active value in brackets: 'always [madvise] never'."""
    m = re.search(r"\[([^\]]+)\]", text)
    if not m:
        raise Malformed(f"missing the [active] marker: {text.strip()[:60]!r}")
    return m.group(1)


def parse_int(text: str) -> int:
    return int(text.strip())


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo: 'MemTotal:       24683656 kB' -> {'MemTotal': 24683656} (kB, or a count for
    HugePages_*). Also reads a NUMA node's meminfo ('Node 0 MemTotal:  3893024 kB')."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"^(?:Node \d+ )?([\w()]+):\s+(\d+)(?: kB)?\s*$", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    if "MemTotal" not in out:
        raise Malformed("missing the MemTotal line")
    return out


def parse_swaps(text: str) -> list[dict[str, object]]:
    """/proc/swaps: a 'Filename Type Size Used Priority' header, then one device a line (sizes in KiB;
    a space in a path is written as \\040)."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("Filename"):
        raise Malformed("missing the 'Filename Type Size Used Priority' header")
    out: list[dict[str, object]] = []
    for line in lines[1:]:
        if not line.strip():
            continue
        *name, kind, size, used, prio = line.split()
        if not name:
            raise Malformed(f"a line has fewer than 5 fields: {line.strip()[:60]!r}")
        # A deleted swap file reads '/swapfile (deleted)': keep every token before the last four.
        out.append({"name": " ".join(name).replace("\\040", " "), "type": kind, "size_kib": int(size),
                    "used_kib": int(used), "priority": int(prio)})
    return out


def _hugepage_pools(c: Collector) -> None:
    """Every pool size, not only the default one /proc/meminfo reports (1 GiB pools live here)."""
    base = "/sys/kernel/mm/hugepages"
    names = [n for n in c.listdir(base) if re.fullmatch(r"hugepages-\d+kB", n)]
    if not names:
        c.missing("mem.hugepage_pools", f"{base} absent or empty", base)
        return
    pools = []
    try:
        for name in sorted(names, key=lambda n: int(n[10:-2])):
            d = f"{base}/{name}"
            pools.append({"size_kib": int(name[10:-2]),
                          "total": c.parsed(f"{d}/nr_hugepages", parse_int),
                          "free": c.parsed(f"{d}/free_hugepages", parse_int),
                          "reserved": c.parsed(f"{d}/resv_hugepages", parse_int)})
    except Unavailable as e:
        c.missing("mem.hugepage_pools", e.reason, base)
        return
    c.put("mem.hugepage_pools", pools, base)


def _iommu(c: Collector) -> None:
    """IOMMU units in /sys/class/iommu (dmar0, ivhd0, ...) and the domain type of a few groups:
    'identity' is passthrough; 'DMA' / 'DMA-FQ' translate every device DMA."""
    try:
        units = sorted(c.host.listdir("/sys/class/iommu"))
    except Unavailable as e:
        c.missing("kernel.iommu", f"{e.reason} (kernel without IOMMU support?)", "/sys/class/iommu")
        return
    groups = sorted((g for g in c.listdir("/sys/kernel/iommu_groups") if g.isdigit()), key=int)
    types = set()
    for g in groups[:IOMMU_GROUP_SAMPLE]:
        t = c.text(f"/sys/kernel/iommu_groups/{g}/type")  # absent before Linux 5.11: mode then unknown
        if t is not None and t.strip():
            types.add(t.strip())
    c.put("kernel.iommu", {"units": units, "group_types": sorted(types)}, "/sys/class/iommu")


THP_DIRS = ("transparent_hugepage", "redhat_transparent_hugepage")


@probe
def memory(c: Collector) -> None:
    """Sources: /proc/meminfo, /proc/swaps, /proc/sys/vm/{swappiness,dirty_*}, /proc/sys/kernel/numa_balancing,
    /sys/kernel/mm/transparent_hugepage/{enabled,defrag}, /sys/kernel/mm/hugepages/*, /sys/class/iommu,
    /sys/kernel/iommu_groups/*/type.
    Shell: free -b; swapon --show; sysctl vm kernel.numa_balancing; cat /sys/kernel/mm/transparent_hugepage/enabled"""
    c.file("kernel.swappiness", "/proc/sys/vm/swappiness", parse_int)
    for knob in ("enabled", "defrag"):  # RHEL/CentOS 6 kernels name the directory redhat_transparent_hugepage
        c.file_first(f"kernel.thp_{knob}", [f"/sys/kernel/mm/{d}/{knob}" for d in THP_DIRS], parse_bracketed)
    c.file("kernel.numa_balancing", "/proc/sys/kernel/numa_balancing", parse_int)
    for knob in DIRTY_KNOBS:
        c.file(f"kernel.{knob}", f"/proc/sys/vm/{knob}", parse_int)
    c.file("swap.devices", "/proc/swaps", parse_swaps)

    keys = {"mem.total_bytes": "MemTotal", "mem.available_bytes": "MemAvailable",
            "mem.swap_total_bytes": "SwapTotal", "mem.swap_free_bytes": "SwapFree"}
    try:
        info = c.parsed("/proc/meminfo", parse_meminfo)
    except Unavailable as e:
        c.missing_all(keys, e.reason, "/proc/meminfo")
    else:
        for key, field in keys.items():
            if field in info:
                c.put(key, info[field] * KIB, "/proc/meminfo")
            else:
                c.missing(key, f"no {field} line in /proc/meminfo", "/proc/meminfo")
    _hugepage_pools(c)
    _iommu(c)
