"""How the reports write a number: three significant digits with thousands separated, a value in base units
in the unit a reader expects, a fraction as a percentage; '—' where there is none. Shared by every renderer
(terminal, Markdown, HTML and the charts)."""

from __future__ import annotations

import math
from typing import Any


def num(v: float | None, unit: str = "") -> str:
    """3 significant digits, thousands separated; '—' for None."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,} {unit}".rstrip() if unit else f"{v:,}"
    a = abs(v)
    if a >= 100:
        s = f"{v:,.0f}"
    elif a >= 10:
        s = f"{v:,.1f}"
    elif a >= 1 or a == 0:
        s = f"{v:,.2f}"
    else:
        s = f"{v:.3g}"
    return f"{s} {unit}".rstrip() if unit else s


def human(v: Any, unit: str) -> str:
    """A value in base units (bytes, seconds, FLOP, per second) in the unit a reader expects."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return "—" if v is None else str(v)
    if unit == "s":
        return num(v * 1e3, "ms") if abs(v) < 1 else num(v, "s")
    if unit == "fraction":
        return pct(v, 1)
    scale = {"B": (1e9, "GB"), "FLOP": (1e12, "TFLOP"), "FLOP/s": (1e12, "TFLOP/s"), "B/s": (1e9, "GB/s")}.get(unit)
    if scale and abs(v) >= scale[0] / 1e3:
        return num(v / scale[0], scale[1])
    return num(v, unit)


def pct(f: float | None, digits: int = 0) -> str:
    return "—" if f is None else f"{f * 100:.{digits}f}%"
