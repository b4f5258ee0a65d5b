"""The machine as a whole: kernel release, boot command line, loaded modules, a redacted host id."""

from __future__ import annotations

import hashlib

from perfstack.probes.collector import Collector, probe


def parse_modules(text: str) -> list[str]:
    """/proc/modules: one module a line, its name first."""
    return sorted({line.split()[0] for line in text.splitlines() if line.strip()})


@probe
def system(c: Collector) -> None:
    """Sources: /proc/sys/kernel/{hostname,osrelease}, /proc/cmdline, /proc/modules, /etc/os-release.
    Shell: uname -r; cat /proc/cmdline; lsmod"""
    name = c.text("/proc/sys/kernel/hostname")
    if name is not None:
        # Only a digest leaves the machine; the hostname itself is redacted from bundles.
        c.put("system.host_id", hashlib.sha256(name.strip().encode()).hexdigest()[:12], "/proc/sys/kernel/hostname")
    c.file("system.kernel_release", "/proc/sys/kernel/osrelease")
    c.file("system.cmdline", "/proc/cmdline")
    c.file("kernel.modules", "/proc/modules", parse_modules)
    c.file("system.os_release", "/etc/os-release", parse_os_release)


def parse_os_release(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip().strip('"')
    return {k: out[k] for k in ("ID", "VERSION_ID", "PRETTY_NAME") if k in out}
