"""The mount table, from whichever of its equivalent files the host or bundle has.

/proc/self/mountinfo is preferred: it has the device number of each mount, which maps mounts to
block devices. Hand-made bundles and old tools often carry /proc/mounts (or /etc/mtab) instead;
those have the same mount points, filesystem types and options, so every fact but the device
mapping can still be read from them. Their device number is looked up from the mount's source
(/dev/nvme0n1p2 -> /sys/class/block/nvme0n1p2/dev) when the host has it.
"""

from __future__ import annotations

import re
from typing import Any

from perfstack.host import Unavailable
from perfstack.probes.collector import Collector, Malformed

# The preferred table: it has the device number of each mount
MOUNTINFO = "/proc/self/mountinfo"
# Same content in the fstab layout: SOURCE MOUNTPOINT FSTYPE OPTIONS DUMP PASS
MOUNT_LISTS = ("/proc/self/mounts", "/proc/mounts", "/etc/mtab")


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (\\040); no other
    escape is the kernel's, so a hand-made bundle cannot spell other control characters this way.
    A decoded newline stays in the fact: the fix-script builders refuse it (rules/shell.py)."""
    return re.sub(r"\\(040|011|012|134)", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[dict[str, Any]]:
    """/proc/self/mountinfo: 'ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [TAGS...] - FSTYPE SOURCE SUPEROPTS'.
    Options are the per-mount options followed by the filesystem's (rsize=, size=, ...)."""
    mounts = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split(" ")
        try:
            sep = fields.index("-", 6)
        except ValueError:
            raise Malformed(f"not a mountinfo table (line {n} has no ' - ' separator)") from None
        if len(fields) < sep + 3 or not re.fullmatch(r"\d+:\d+", fields[2]):
            raise Malformed(f"not a mountinfo table (line {n}: {line[:60]!r})")
        superopts = fields[sep + 3].split(",") if len(fields) > sep + 3 else []
        options = [o for o in fields[5].split(",") + superopts if o]
        mounts.append({"mountpoint": _unescape(fields[4]), "fstype": fields[sep + 1],
                       "source": _unescape(fields[sep + 2]), "options": list(dict.fromkeys(options)),
                       "dev": fields[2]})
    if not mounts:
        raise Malformed("empty (no mounts listed)")
    return mounts


def parse_mounts(text: str) -> list[dict[str, Any]]:
    """/proc/mounts: 'SOURCE MOUNTPOINT FSTYPE OPTIONS 0 0', octal escapes as in mountinfo."""
    mounts = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split()
        if len(fields) < 4 or not fields[1].startswith("/"):
            raise Malformed(f"not a mount table (line {n}: {line[:60]!r})")
        options = [o for o in fields[3].split(",") if o]
        mounts.append({"mountpoint": _unescape(fields[1]), "fstype": fields[2], "source": _unescape(fields[0]),
                       "options": list(dict.fromkeys(options)), "dev": None})
    if not mounts:
        raise Malformed("empty (no mounts listed)")
    return mounts


def read_mounts(c: Collector) -> tuple[list[dict[str, Any]], str]:
    """(mounts, the file they came from); raises Unavailable naming every file tried."""
    try:
        return c.parsed(MOUNTINFO, parse_mountinfo), MOUNTINFO
    except Unavailable as e:
        preferred = e.reason
    try:
        mounts, src = c.first(MOUNT_LISTS, parse_mounts)
    except Unavailable as e:
        raise Unavailable(f"{preferred}; {e.reason}") from None
    for m in mounts:
        if m["source"].startswith("/dev/"):
            m["dev"] = _device_number(c, m["source"])
    return mounts, src


def _device_number(c: Collector, source: str) -> str | None:
    name = source.rsplit("/", 1)[-1]
    text = c.text(f"/sys/class/block/{name}/dev") if name else None
    return text.strip() if text else None
