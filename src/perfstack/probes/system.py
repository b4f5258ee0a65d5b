"""The machine as a whole: kernel release, boot command line, loaded modules, a redacted host id."""

from __future__ import annotations

import hashlib

from perfstack.probes.collector import Collector, Malformed, probe


def parse_modules(text: str) -> list[str]:
    """/proc/modules: one module a line, its name first."""
    return sorted({line.split()[0] for line in text.splitlines() if line.strip()})


@probe
def system(c: Collector) -> None:
    """Sources: /proc/sys/kernel/{hostname,osrelease} (else /etc/hostname, /proc/version), /proc/cmdline,
    /proc/modules, /etc/os-release (else /usr/lib/os-release).
    Shell: uname -r; cat /proc/cmdline; lsmod"""
    for path in HOSTNAME_FILES:
        name = c.text(path)
        if name is not None and name.strip():
            # Only a digest leaves the machine; the hostname itself is redacted from bundles.
            c.put("system.host_id", hashlib.sha256(name.strip().encode()).hexdigest()[:12], path)
            break
    c.file_first("system.kernel_release", KERNEL_RELEASE_FILES, parse_kernel_release)
    c.file("system.cmdline", "/proc/cmdline")
    c.file("kernel.modules", "/proc/modules", parse_modules)
    c.file_first("system.os_release", OS_RELEASE_FILES, parse_os_release)


# Equivalent files, preferred first: hand-made bundles often carry only one of them.
HOSTNAME_FILES = ("/proc/sys/kernel/hostname", "/etc/hostname")
KERNEL_RELEASE_FILES = ("/proc/sys/kernel/osrelease", "/proc/version")
OS_RELEASE_FILES = ("/etc/os-release", "/usr/lib/os-release")  # os-release(5): the second is the fallback


def parse_kernel_release(text: str) -> str:
    """osrelease ('6.8.0-45-generic') or /proc/version ('Linux version 6.8.0-45-generic (...) ...')."""
    words = text.split()
    if words[:2] == ["Linux", "version"] and len(words) > 2:
        return words[2]
    if len(words) != 1:
        raise Malformed(f"not a kernel release: {text.strip()[:60]!r}")
    return words[0]


def parse_os_release(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip().strip('"')
    return {k: out[k] for k in ("ID", "VERSION_ID", "PRETTY_NAME") if k in out}
