"""Byte units and the ways perfstack writes a number of bytes: the one home of both.

Binary units (KiB, MiB, GiB, TiB) are what the kernel, cgroups, allocators and buffer sizes count in;
decimal GB is what bandwidths and model sizes are quoted in (1 GB/s = 1e9 bytes per second, as
datasheets do). Each formatter below has one job; pick by where the text goes.
"""

from __future__ import annotations

KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40
GB = 1e9  # decimal: bandwidths (GB/s) and model and memory sizes as datasheets quote them


def size_label(n: int) -> str:
    """A buffer size as part of a name, exact: 4096 -> '4KiB', 2**30 -> '1GiB'; sizes that are not a
    whole unit keep their bytes ('1000B'), so two different sizes never share a label."""
    for unit, k in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= k and n % k == 0:
            return f"{n // k}{unit}"
    return f"{n}B"


def size_tick(n: float) -> str:
    """A size on a chart axis or in a table column: 4KiB / 256MiB / 1GiB, three significant figures
    where it is not a whole unit."""
    for unit, k in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= k:
            v = n / k
            return f"{v:.0f}{unit}" if abs(v - round(v)) < 1e-9 else f"{v:.3g}{unit}"
    return f"{n:.0f}B"


def binary_size(n: float) -> str:
    """A size in prose, in the largest binary unit it reaches: '512 MiB', '1.5 GiB', '64 KiB'."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    i = 0
    while n >= 1024 and i < len(units) - 1:
        n, i = n / 1024, i + 1
    return f"{n:.0f} {units[i]}" if n == int(n) else f"{n:.1f} {units[i]}"
