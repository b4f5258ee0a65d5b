"""The ``estimates`` section of a Run as records, read once when the Run is loaded.

Two shapes are accepted, and each has its record:

- ``EstimateSheet``: what ``perfstack estimate infer|train`` writes (``estimate/infer.py``,
  ``estimate/train.py``): the settings, sections of plain numbers in base units (``memory.total_bytes``,
  what a script reads) and, under ``working``, every figure's label, unit, formula, inputs and
  assumptions (a ``Figure``).
- ``EstimateTree``: a hand-made section, any nesting of objects whose leaves are ``{value, unit,
  formula}`` (a ``Leaf``). It is kept as a tree of typed nodes rather than forced into a sheet because
  its names are the author's own (``memory.kv_cache``, ``latency.decode_memory_bound``): the report
  finds memory stacks and latency bounds by those names, and a sheet would have to invent sections,
  units and labels the author did not write.

Both are tolerant records (``records.base.Record``): keys this perfstack does not know are kept (``extra``)
and written back in the order the Run had its keys, so that a loaded Run saves back byte for byte. A known key
of the wrong type is refused when the Run is loaded, naming it (the annotations, and ``_sheet_check`` for what
depends on the sheet's kind), so that renderers read attributes without re-checking them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Optional, Union

from perfstack.errors import InputError
from perfstack.records.base import Record, built, convert, show


@dataclass
class Figure(Record):
    """One estimated figure's working: what ``Quantity.to_dict`` writes under the sheet's ``working``."""

    label: str
    value: float | None
    unit: str  # "B", "FLOP", "s", "B/s", "FLOP/s", "tok/s", "count", "fraction", "GPUs"
    formula: str
    inputs: dict[str, Any]  # symbol -> value used
    assumptions: list[str]
    extra: dict[str, Any] = field(default_factory=dict)

SECTIONS = ("params", "memory", "capacity", "flops", "time", "comms")  # the sheet's sections of numbers


@dataclass
class FitRow(Record):
    """One GPU of the spec table in a sheet's ``fit``: its memory, and whether the model fits. An inference
    sheet's rows say how many GPUs (tensor-parallel) hold the workload (``gpus_needed``, ``fits_one``; a GPU
    without the dtype says why not), a training sheet's whether one GPU of the job holds its share (``fits``).
    A row writes the keys it was made or read with."""

    gpu: str = ""
    name: str = ""
    capacity_bytes: float | None = None
    gpus_needed: int | None = None
    per_gpu_total_bytes: float | None = None
    fits_one: bool | None = None
    reason: str | None = None
    fits: bool | None = None
    gpus_in_job: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


Kind = Literal["infer", "train"]
# The settings a sheet names, by type (estimate's InferSettings, TrainSettings), and those each kind must have
SETTINGS: dict[str, Any] = {"batch": int, "prompt": int, "gen": int, "seq": int, "tp": int, "dp": int, "pp": int,
                            "zero": int, "dtype": str, "weights": Optional[str], "kv_dtype": Optional[str],
                            "precision": str, "optimizer": str, "grad_ckpt": bool}
KIND_SETTINGS = {"infer": ("batch", "prompt", "gen", "dtype", "tp"),
                 "train": ("batch", "seq", "precision", "optimizer", "grad_ckpt", "zero", "dp", "tp", "pp")}
FIT_KEYS = {"infer": ("gpu", "gpus_needed"), "train": ("gpu", "fits")}  # what a fit row of each kind must say


def _sheet_check(d: Any, where: str) -> None:
    """What the annotations cannot say: the settings and fit rows each kind must have, and the names of the
    model and the GPU (open objects otherwise)."""
    kind = convert(Kind, d.get("kind"), f"{where}.kind")
    settings = d.get("settings")
    if "settings" not in d:
        raise InputError(f"{where}.settings is missing")
    if not isinstance(settings, dict):
        raise InputError(f"{where}.settings must be a JSON object, not {show(settings)}")
    for k in KIND_SETTINGS[kind]:
        if k not in settings:
            raise InputError(f"{where}.settings.{k} is missing")
    for k, v in settings.items():
        if k in SETTINGS:
            convert(SETTINGS[k], v, f"{where}.settings.{k}")
    fit = d.get("fit")
    for i, row in enumerate(fit if isinstance(fit, list) else []):  # (a fit of another kind: the annotation says)
        for k in FIT_KEYS[kind] if isinstance(row, dict) else ():
            if k not in row:
                raise InputError(f"{where}.fit[{i}].{k} is missing")
    for part in ("model", "gpu"):
        if part in d:
            if not isinstance(d[part], dict):
                raise InputError(f"{where}.{part} must be a JSON object, not {show(d[part])}")
            for k in ("name", "description"):
                if k in d[part]:
                    convert(str, d[part][k], f"{where}.{part}.{k}")


@dataclass
class EstimateSheet(Record):
    """What ``perfstack estimate`` writes. ``kind`` is "infer" or "train"; ``settings`` and the ``fit``
    rows hold the names of that kind's settings (InferSettings, TrainSettings) and are checked against
    them on loading; a section of numbers the estimate did not produce is None."""

    kind: Kind
    model: dict[str, Any] | None = None  # the model's shape, with name and description
    gpu: dict[str, Any] | None = None  # the hardware figures used, with name
    settings: dict[str, Any] = field(default_factory=dict)
    params: dict[str, float | None] | None = None
    memory: dict[str, float | None] | None = None
    capacity: dict[str, float | None] | None = None
    flops: dict[str, float | None] | None = None
    time: dict[str, float | None] | None = None
    comms: dict[str, float | None] | None = None
    regime: dict[str, str | None] | None = None  # phase -> compute-, memory- or launch-bound
    fit: list[FitRow] | None = None  # per GPU of the table: whether the model fits
    assumptions: list[str] | None = None
    working: dict[str, Figure] = field(default_factory=dict)  # figure key -> its working
    extra: dict[str, Any] = field(default_factory=dict)

    CHECK = _sheet_check

    @property
    def model_name(self) -> str | None:
        return _text((self.model or {}).get("name"))

    @property
    def gpu_name(self) -> str | None:
        return _text((self.gpu or {}).get("name"))

    def section(self, name: str) -> dict[str, float | None] | None:
        """A section of numbers by name ("memory", "time", ...)."""
        return getattr(self, name) if name in SECTIONS else None

    def items(self) -> list[tuple[str, Any]]:
        """Every top-level entry as the JSON has it, in its order (the report lists them so)."""
        return list(self.to_dict().items())

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> "EstimateSheet":
        """The record of a sheet an estimator just computed (its figures are not checked again), written in the
        order of ``d``'s keys."""
        known: dict[str, Any] = {"working": {k: built(Figure, w) for k, w in (d.get("working") or {}).items()}}
        if d.get("fit") is not None:
            known["fit"] = [built(FitRow, r) for r in d["fit"]]
        return built(cls, d, **known)


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) else None


@dataclass
class Leaf(Record):
    """A ``{value, unit, formula}`` leaf of a hand-made estimate. ``value`` is shown as written (a
    number, usually); ``unit`` and ``formula`` are text where present."""

    value: Any
    unit: str | None = None
    formula: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    WHEN_SET = frozenset({"unit", "formula"})


@dataclass
class EstimateTree:
    """A hand-made estimate: named nodes, each a Leaf, a nested EstimateTree, or a JSON value shown
    as it is (a list, a string, a number not in a leaf)."""

    items: dict[str, "Leaf | EstimateTree | Any"] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {k: v.to_dict() if isinstance(v, (Leaf, EstimateTree)) else v for k, v in self.items.items()}


Estimates = Union[EstimateSheet, EstimateTree, Leaf]  # what Run.estimates holds, when it holds one


def is_leaf(d: Any) -> bool:
    """A leaf is an object with a ``value`` that is not itself an object."""
    return isinstance(d, dict) and "value" in d and not isinstance(d.get("value"), dict)


def from_dict(section: Any, where: str = "estimates") -> Estimates:
    """The estimates section of a saved Run, checked once: a sheet (it has ``working``) against the
    shape ``perfstack estimate`` writes for its kind, a hand-made tree for the types of its leaves."""
    if not isinstance(section, dict):
        raise InputError(f"{where} must be a JSON object")
    if "working" in section:
        return EstimateSheet.from_dict(section, where)
    return _node(section, where)


def _node(d: dict[str, Any], where: str) -> EstimateTree | Leaf:
    if is_leaf(d):
        return Leaf.from_dict(d, where)  # unit and formula text or null
    return EstimateTree({k: _node(v, f"{where}.{k}") if isinstance(v, dict) else v for k, v in d.items()})
