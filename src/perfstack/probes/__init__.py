"""Probes: one module per domain, each turning host reads into facts."""

from __future__ import annotations

import importlib

from perfstack.host import Host
from perfstack.model import Facts
from perfstack.probes.collector import PROBES, run_probes

MODULES = ("system", "memory", "cpu", "limits", "environment", "gpu", "pcie", "kernel_log", "python_env",
           "container", "storage", "network")


def load() -> None:
    for name in MODULES:
        importlib.import_module(f"perfstack.probes.{name}")


def collect(host: Host) -> Facts:
    load()
    return run_probes(host, PROBES)
