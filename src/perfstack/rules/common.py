"""Helpers several layers' checks share: which GPUs and NUMA nodes there are, and sizes in words."""

from __future__ import annotations

from typing import Any

from perfstack.model import Facts, NotApplicable, NotChecked
from perfstack.units import binary_size


def gpu_list(f: Facts) -> list[dict[str, Any]]:
    """The GPUs; NotApplicable when the driver says there are none or could not be asked."""
    count = f.value("gpu.count")
    if count is None:
        fact = f.get("gpu.count")
        if fact is None:
            raise NotChecked("gpu.count was not collected")
        raise NotApplicable(f"no NVIDIA driver/GPU found: {fact.reason}")
    if count == 0:
        raise NotApplicable("no NVIDIA GPU")
    return f.need("gpu.list")


def cpu_nodes(f: Facts) -> list[dict[str, Any]]:
    """The NUMA nodes that have CPUs (GPU HBM on Grace Hopper and CXL memory show as CPU-less
    nodes); NotApplicable with fewer than two."""
    nodes = [n for n in f.need("numa.nodes") if n["cpus"]]
    if len(nodes) < 2:
        raise NotApplicable("one NUMA node with CPUs")
    return nodes


size = binary_size  # the rules' short name for a size in evidence: '512 MiB', '1.5 GiB'
