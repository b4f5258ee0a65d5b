"""PCIe theoretical bandwidth per generation and link width.

GB/s per direction = transfer rate (GT/s per lane) x encoding efficiency x lanes / 8 bits.

| gen | GT/s per lane | signalling | line encoding | efficiency | x16 GB/s per direction |
|---|---|---|---|---|---|
| 1 | 2.5 | NRZ | 8b/10b | 0.8 | 4.0 |
| 2 | 5.0 | NRZ | 8b/10b | 0.8 | 8.0 |
| 3 | 8.0 | NRZ | 128b/130b | 0.9846 | 15.75 |
| 4 | 16.0 | NRZ | 128b/130b | 0.9846 | 31.51 |
| 5 | 32.0 | NRZ | 128b/130b | 0.9846 | 63.02 |
| 6 | 64.0 | PAM4 | none (FLIT mode) | 1.0 | 128.0 |

"After line encoding, before protocol overhead": TLP/DLLP headers, flow control and (for Gen6)
the FLIT's CRC and FEC bytes (14 of every 256) are protocol overhead and are not subtracted.
Vendors' "x16 Gen5 = 128 GB/s" figures are this number counted in both directions.

``PRACTICAL_PINNED_FACTOR`` (0.85) is a rule of thumb, not a spec: pinned-memory DMA copies
(cudaMemcpy from page-locked host memory) typically reach about 85% of the per-direction figure
once TLP headers, max-payload size and completion traffic are paid. The project's H100 on Gen5
x16 measured ~55 GB/s pinned, 0.87 of 63.0. Pageable copies go through a staging buffer and land
far lower (~19 GB/s H2D on the same machine), so they are not covered by this factor.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PcieGeneration:
    gen: int
    gt_per_s: float  # transfers per second per lane, in GT/s
    signalling: str
    encoding: str
    efficiency: float  # payload bits per transferred bit after line encoding


PCIE_GENERATIONS: dict[int, PcieGeneration] = {
    1: PcieGeneration(1, 2.5, "NRZ", "8b/10b", 8 / 10),
    2: PcieGeneration(2, 5.0, "NRZ", "8b/10b", 8 / 10),
    3: PcieGeneration(3, 8.0, "NRZ", "128b/130b", 128 / 130),
    4: PcieGeneration(4, 16.0, "NRZ", "128b/130b", 128 / 130),
    5: PcieGeneration(5, 32.0, "NRZ", "128b/130b", 128 / 130),
    6: PcieGeneration(6, 64.0, "PAM4", "none (FLIT mode; CRC/FEC counted as protocol overhead)", 1.0),
}

VALID_WIDTHS: tuple[int, ...] = (1, 2, 4, 8, 12, 16, 32)

# Rule of thumb (not a spec): pinned H2D/D2H copies reach ~85% of pcie_gbps().
PRACTICAL_PINNED_FACTOR = 0.85


def pcie_gbps(gen: int, width: int) -> float:
    """Theoretical GB/s (1e9 bytes/s) per direction for a PCIe ``gen`` link ``width`` lanes wide,
    after line encoding and before protocol overhead. Raises ValueError for an unknown gen/width."""
    if isinstance(gen, bool) or not isinstance(gen, int) or gen not in PCIE_GENERATIONS:
        raise ValueError(f"unknown PCIe generation {gen!r}; expected one of {sorted(PCIE_GENERATIONS)}")
    if isinstance(width, bool) or not isinstance(width, int) or width not in VALID_WIDTHS:
        raise ValueError(f"invalid PCIe link width x{width}; expected one of {', '.join(f'x{w}' for w in VALID_WIDTHS)}")
    g = PCIE_GENERATIONS[gen]
    return g.gt_per_s * g.efficiency * width / 8


def pcie_practical_gbps(gen: int, width: int) -> float:
    """Rule-of-thumb ceiling for pinned DMA copies: ``PRACTICAL_PINNED_FACTOR`` x pcie_gbps()."""
    return pcie_gbps(gen, width) * PRACTICAL_PINNED_FACTOR


# GB/s per direction for the common widths, e.g. PCIE_TABLE[5][16] == 63.02 (rounded to 2 places).
PCIE_TABLE: dict[int, dict[int, float]] = {
    gen: {w: round(pcie_gbps(gen, w), 2) for w in (1, 2, 4, 8, 16)} for gen in PCIE_GENERATIONS
}
