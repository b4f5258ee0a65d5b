"""Storage: the block devices, mounts and NVMe links the data path to the GPUs sits on."""

from __future__ import annotations

import re
from typing import Any, Callable, TypeVar

from perfstack.host import Unavailable
from perfstack.probes.collector import Collector, Malformed, probe
from perfstack.probes.memory import parse_int
from perfstack.probes.mounts import MOUNTINFO, read_mounts

T = TypeVar("T")

# Kernel bookkeeping filesystems: never where data or checkpoints live.
PSEUDO_FS = frozenset({
    "proc", "sysfs", "cgroup", "cgroup2", "devpts", "mqueue", "debugfs", "tracefs", "securityfs", "pstore",
    "bpf", "configfs", "fusectl", "hugetlbfs", "autofs", "binfmt_misc", "devtmpfs", "rpc_pipefs", "nsfs",
    "efivarfs", "selinuxfs",
})

# Devices with no queue of their own worth tuning (loop files, RAM disks, device-mapper stacks);
# device-mapper and md stacks are still followed to the disks under them.
SKIPPED_DEVICE = re.compile(r"^(loop|ram|zram|dm-|nbd|sr|fd)\d*")
STACKED_DEVICE = re.compile(r"^(dm-|md)\d+")


def parse_scheduler(text: str) -> str:
    """queue/scheduler: '[none] mq-deadline kyber bfq' (active in brackets), or a lone 'none'."""
    m = re.search(r"\[([^\]]+)\]", text)
    if m:
        return m.group(1)
    words = text.split()
    if len(words) == 1:
        return words[0]
    raise Malformed(f"missing the [active] marker: {text.strip()[:60]!r}")


def parse_flag(text: str) -> bool:
    value = text.strip()
    if value not in ("0", "1"):
        raise Malformed(f"not a 0/1 flag: {value[:20]!r}")
    return value == "1"


def parse_link_speed(text: str) -> float | None:
    """current_link_speed: '16.0 GT/s PCIe' (newer kernels) or '8 GT/s'; 'Unknown' when not trained."""
    m = re.match(r"\s*([\d.]+)\s*GT/s", text)
    if m:
        return float(m.group(1))
    if text.strip().lower().startswith("unknown"):
        return None
    raise Malformed(f"not a PCIe link speed: {text.strip()[:40]!r}")


def _read(c: Collector, path: str, parse: Callable[[str], T]) -> T | None:
    """One attribute of a device; None when the kernel does not offer it (the field says 'unknown')."""
    try:
        return c.parsed(path, parse)
    except Unavailable:
        return None


def _device_numbers(c: Collector, name: str) -> tuple[set[str], dict[str, str]]:
    """The MAJ:MIN numbers of a disk and of its partitions (partition name -> number)."""
    own = _read(c, f"/sys/block/{name}/dev", str.strip)
    parts = {}
    for entry in c.listdir(f"/sys/block/{name}"):
        if entry.startswith(name) and entry != name:
            number = _read(c, f"/sys/block/{name}/{entry}/dev", str.strip)
            if number:
                parts[entry] = number
    return ({own} if own else set()) | set(parts.values()), parts


def _mountpoints(c: Collector, names: list[str], mounts: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Mount points per disk, following LVM/dm and md stacks down through their 'slaves'."""
    by_dev: dict[str, list[str]] = {}
    for m in mounts:
        if m["fstype"] != "swap":
            by_dev.setdefault(m["dev"], []).append(m["mountpoint"])
    disk_of: dict[str, str] = {}
    out: dict[str, list[str]] = {}
    for name in names:
        numbers, parts = _device_numbers(c, name)
        disk_of.update({p: name for p in parts})
        disk_of[name] = name
        out[name] = sorted({mp for n in numbers for mp in by_dev.get(n, [])})
    for name in names:
        if not STACKED_DEVICE.match(name):
            continue
        above = out.get(name, [])
        for lower in c.listdir(f"/sys/block/{name}/slaves"):
            disk = disk_of.get(lower)
            if disk and disk != name:
                out[disk] = sorted(set(out[disk]) | set(above))
    return out


def _kind(name: str) -> str:
    for prefix, kind in (("nvme", "nvme"), ("vd", "virtio"), ("xvd", "virtio"), ("mmcblk", "mmc"), ("md", "md")):
        if name.startswith(prefix):
            return kind
    return "scsi"


@probe
def storage(c: Collector) -> None:
    """Sources: /proc/self/mountinfo; /sys/block/<dev>/{dev,queue/{scheduler,rotational,read_ahead_kb,
    wbt_lat_usec},slaves}; /sys/class/nvme/nvme*/device/{current,max}_link_{speed,width}.
    Shell: findmnt; lsblk -o NAME,ROTA,SCHED,RA,MOUNTPOINT; cat /sys/block/nvme0n1/queue/scheduler"""
    mounts: list[dict[str, Any]] | None = None
    try:
        table, src = read_mounts(c)  # mountinfo, else /proc/mounts (hand-made bundles)
        mounts = [m for m in table if m["fstype"] not in PSEUDO_FS]
        c.put("storage.mounts", mounts, src)
    except Unavailable as e:
        c.missing("storage.mounts", e.reason, MOUNTINFO)

    names = c.listdir("/sys/block")
    if not names:
        c.missing("storage.block_devices", "/sys/block not readable", "/sys/block")
    else:
        where = _mountpoints(c, names, mounts) if mounts is not None else {}
        devices = []
        for name in names:
            if SKIPPED_DEVICE.match(name):
                continue
            q = f"/sys/block/{name}/queue"
            devices.append({
                "name": name, "kind": _kind(name),
                "rotational": _read(c, f"{q}/rotational", parse_flag),
                "scheduler": _read(c, f"{q}/scheduler", parse_scheduler),
                "read_ahead_kb": _read(c, f"{q}/read_ahead_kb", parse_int),
                "wbt_lat_usec": _read(c, f"{q}/wbt_lat_usec", parse_int),
                # None: the mount table could not be read, so nothing is known about use.
                "mountpoints": where.get(name) if mounts is not None else None,
            })
        c.put("storage.block_devices", devices, "/sys/block")

    links = []
    for ctrl in c.listdir("/sys/class/nvme"):
        d = f"/sys/class/nvme/{ctrl}/device"
        link = {"controller": ctrl,
                "current_gts": _read(c, f"{d}/current_link_speed", parse_link_speed),
                "max_gts": _read(c, f"{d}/max_link_speed", parse_link_speed),
                "current_width": _read(c, f"{d}/current_link_width", parse_int),
                "max_width": _read(c, f"{d}/max_link_width", parse_int)}
        # NVMe over fabrics controllers have no PCIe link: nothing to compare.
        if link["current_gts"] is not None or link["current_width"] is not None:
            links.append(link)
    c.put("storage.nvme_links", links, "/sys/class/nvme")
