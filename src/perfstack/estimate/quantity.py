"""One estimated number with its working: value, unit, formula, inputs and assumptions.

Every figure ``perfstack estimate`` prints is a ``Quantity`` so that the table and the JSON can show
how it was obtained, in the notation of the papers (N, L, d, H_q, H_kv, d_h, F, V, B, S, b_w, ...).
Values are kept in base units: bytes, FLOP, seconds, bytes/s, FLOP/s, tokens/s, counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from perfstack.units import GB, GiB, MiB


@dataclass(frozen=True)
class Quantity:
    key: str  # JSON key, with its unit: "weights_bytes", "itl_s", "step_flops"
    label: str  # what a person reads in the table: "weights", "ITL lower bound"
    value: float
    unit: str  # "B", "FLOP", "s", "B/s", "FLOP/s", "tok/s", "count", "fraction", "GPUs"
    formula: str  # "N · b_w", readable, paper notation
    inputs: Mapping[str, Any] = field(default_factory=dict)  # symbol -> value used
    assumptions: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "value": self.value,
            "unit": self.unit,
            "formula": self.formula,
            "inputs": dict(self.inputs),
            "assumptions": list(self.assumptions),
        }


def q(key: str, label: str, value: float, unit: str, formula: str,
      inputs: Mapping[str, Any] | None = None, assumptions: Iterable[str] = ()) -> Quantity:
    """Shorthand constructor; integers stay integers so byte counts read exactly in the JSON."""
    if unit in ("B", "count", "FLOP", "params") and isinstance(value, float) and value == value and abs(value) < 1e300:
        value = int(round(value))
    return Quantity(key, label, value, unit, formula, dict(inputs or {}), tuple(assumptions))


def fmt_value(value: float | None, unit: str) -> str:
    """A human form of a value: bytes as GB (and GiB), seconds as ms/s, FLOP as TFLOP/PFLOP."""
    if value is None:
        return "—"
    if unit in _FORMATS:
        return _FORMATS[unit](value)
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f} {unit}".strip()
    return f"{value:,.0f} {unit}".strip()


def _bytes(value: float) -> str:
    if abs(value) >= 1e8:
        return f"{value / GB:,.2f} GB ({value / GiB:,.2f} GiB)"
    if abs(value) >= 1e6:
        return f"{value / 1e6:,.1f} MB ({value / MiB:,.1f} MiB)"
    if abs(value) >= 1e4:
        return f"{value / 1e3:,.1f} kB ({value / 1024:,.1f} KiB)"
    return f"{value:,.0f} B"


def _seconds(value: float) -> str:
    if value < 1e-3:
        return f"{value * 1e6:,.1f} µs"
    if value < 1:
        return f"{value * 1e3:,.2f} ms"
    return f"{value:,.2f} s"


def _flop(value: float) -> str:
    for scale, name in ((1e18, "EFLOP"), (1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP")):
        if abs(value) >= scale:
            return f"{value / scale:,.2f} {name}"
    return f"{value:,.0f} FLOP"


def _params(value: float) -> str:
    return f"{value / 1e9:,.3f} B" if abs(value) >= 1e9 else f"{value / 1e6:,.2f} M"


_FORMATS: dict[str, Callable[[float], str]] = {
    "B": _bytes, "s": _seconds, "FLOP": _flop, "params": _params,
    "FLOP/s": lambda v: f"{v / 1e12:,.1f} TFLOP/s",
    "B/s": lambda v: f"{v / 1e9:,.0f} GB/s",
    "tok/s": lambda v: f"{v:,.0f} tok/s",
    "fraction": lambda v: f"{v:.1%}",
    "FLOP/B": lambda v: f"{v:,.1f} FLOP/B",
    "count": lambda v: f"{v:,}",
}


class Sheet:
    """An ordered collection of Quantities, grouped into sections, that becomes the JSON ``estimates``.

    ``values()`` gives ``{section: {key: value}}`` (what a script reads: ``memory.total_bytes``);
    ``working()`` gives ``{key: {label, value, unit, formula, inputs, assumptions}}``.
    """

    def __init__(self) -> None:
        self.sections: dict[str, list[Quantity]] = {}

    def add(self, section: str, *items: Quantity) -> None:
        self.sections.setdefault(section, []).extend(items)

    def get(self, key: str) -> Quantity:
        for items in self.sections.values():
            for it in items:
                if it.key == key:
                    return it
        raise KeyError(key)

    def values(self) -> dict[str, dict[str, Any]]:
        return {s: {it.key: it.value for it in items} for s, items in self.sections.items()}

    def working(self) -> dict[str, dict[str, Any]]:
        return {it.key: it.to_dict() for items in self.sections.values() for it in items}
