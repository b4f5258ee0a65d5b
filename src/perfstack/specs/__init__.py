"""Hardware peak tables that benchmarks, the profiler and estimates compare against.

- ``load()`` / ``lookup(name)`` / ``close_matches(name)``: the per-SKU GPU table (``gpus.json``,
  every row with its datasheet source; all compute peaks dense).
- ``lookup_or_derive(name, sm_count, clock_mhz, compute_capability)``: the table row, or peaks
  derived from SM count x clock x per-SM rate for a GPU the table does not know.
- ``pcie_gbps(gen, width)``: theoretical PCIe GB/s per direction.
- ``practical_fraction``: known practical ceilings (cuBLAS GEMM, HBM copies, pinned PCIe copies).
"""

from __future__ import annotations

from perfstack.specs.derive import PER_SM_RATES, derive, lookup_or_derive
from perfstack.specs.pcie import (
    PCIE_GENERATIONS,
    PCIE_TABLE,
    PRACTICAL_PINNED_FACTOR,
    pcie_gbps,
    pcie_practical_gbps,
)
from perfstack.specs.practical import PracticalFraction, practical_fraction
from perfstack.specs.table import (
    ARCHS,
    DTYPES,
    GpuSpec,
    SpecTableError,
    close_matches,
    load,
    lookup,
    matches,
    normalize_dtype,
)

__all__ = [
    "ARCHS",
    "DTYPES",
    "GpuSpec",
    "PCIE_GENERATIONS",
    "PCIE_TABLE",
    "PER_SM_RATES",
    "PRACTICAL_PINNED_FACTOR",
    "PracticalFraction",
    "SpecTableError",
    "close_matches",
    "derive",
    "load",
    "lookup",
    "lookup_or_derive",
    "matches",
    "normalize_dtype",
    "pcie_gbps",
    "pcie_practical_gbps",
    "practical_fraction",
]
