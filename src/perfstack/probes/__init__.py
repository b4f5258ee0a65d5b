"""Probes: one module per domain, each turning host reads into facts."""

from __future__ import annotations

from perfstack.discover import import_submodules
from perfstack.host import Host
from perfstack.model import Facts
from perfstack.probes.collector import PROBES, run_probes


def load() -> None:
    """Register every probe: each module of this package registers its own with ``@probe``."""
    import_submodules(__name__)


def slow_commands() -> list[tuple[tuple[str, ...], float]]:
    """The tools that can hang on a sick machine, with the timeouts their probes give them."""
    from perfstack.probes import gpu, kernel_log, pcie
    return [(gpu.SMI, gpu.SMI_TIMEOUT), (pcie.TOPO, 10.0), (pcie.LSPCI, 10.0), (kernel_log.DMESG, 10.0)]


def collect(host: Host) -> Facts:
    load()
    start = getattr(host, "start", None)  # hosts that run tools start the slow ones side by side
    if start is not None:
        start(slow_commands())
    return run_probes(host, PROBES)
