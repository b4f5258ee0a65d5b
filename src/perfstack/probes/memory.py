"""Host memory and the virtual-memory knobs that decide whether GPU-feeding buffers stay resident."""

from __future__ import annotations

import re

from perfstack.probes.collector import Collector, Malformed, probe


def parse_bracketed(text: str) -> str:
    """sysfs choice files mark the active value in brackets: 'always [madvise] never'."""
    m = re.search(r"\[([^\]]+)\]", text)
    if not m:
        raise Malformed(f"missing the [active] marker: {text.strip()[:60]!r}")
    return m.group(1)


def parse_int(text: str) -> int:
    return int(text.strip())


@probe
def memory(c: Collector) -> None:
    """Sources: /proc/sys/vm/swappiness, /sys/kernel/mm/transparent_hugepage/{enabled,defrag}.
    Shell: sysctl vm.swappiness; cat /sys/kernel/mm/transparent_hugepage/enabled"""
    c.file("kernel.swappiness", "/proc/sys/vm/swappiness", parse_int)
    c.file("kernel.thp_enabled", "/sys/kernel/mm/transparent_hugepage/enabled", parse_bracketed)
    c.file("kernel.thp_defrag", "/sys/kernel/mm/transparent_hugepage/defrag", parse_bracketed)
