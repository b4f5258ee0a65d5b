"""The GPU spec table: one row per SKU in ``gpus.json``, each with its source.

Every peak is a **dense** theoretical figure from the vendor datasheet or whitepaper. Datasheets
often print Tensor Core figures "with sparsity" (2:4 structured sparsity doubles them); those are
halved in the table and the row's ``notes`` say so. FP16/BF16/FP8 are Tensor Core peaks with FP32
accumulate, the mode cuBLAS and PyTorch use by default (GeForce parts run FP16 accumulate at twice
that rate; see their notes). ``int8`` is in TOPS, every other compute field in TFLOPS.

``lookup`` matches the names NVML and ``nvidia-smi --query-gpu=name`` report, with each row's
regexes anchored at both ends, so "NVIDIA GeForce RTX 4090 D" or "NVIDIA A10G" are unknown rather
than silently taken for a neighbour. A name that matches no row, or more than one, gives None.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping

from perfstack.errors import PerfstackError

# The dtype keys a peak can be asked for, in table order. int8 is TOPS, the rest TFLOPS.
DTYPES: tuple[str, ...] = ("fp64", "fp64_tensor", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")

ARCHS: tuple[str, ...] = ("volta", "turing", "ampere", "ada", "hopper", "blackwell")

# Spellings callers use for a dtype (torch names, common aliases) -> table key.
_DTYPE_ALIASES: dict[str, str] = {
    "float64": "fp64", "double": "fp64", "f64": "fp64",
    "float32": "fp32", "float": "fp32", "f32": "fp32",
    "tensorfloat32": "tf32",
    "bfloat16": "bf16",
    "float16": "fp16", "half": "fp16", "f16": "fp16",
    "float8": "fp8", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "e4m3": "fp8", "e5m2": "fp8",
    "nvfp4": "fp4", "float4": "fp4", "float4_e2m1fn_x2": "fp4",
}


class SpecTableError(PerfstackError):
    """The packaged spec table is malformed: a bug in perfstack, not in the user's input."""

    exit_code = 4


@dataclass(frozen=True)
class GpuSpec:
    """One GPU SKU's theoretical limits. ``None`` means "not published / not applicable"."""

    id: str
    name: str
    arch: str
    compute_capability: str
    match: tuple[str, ...]
    fp64: float | None
    fp64_tensor: float | None
    fp32: float | None
    tf32: float | None
    bf16: float | None
    fp16: float | None
    fp8: float | None
    int8: float | None  # TOPS
    fp4: float | None
    hbm_gb: float | None  # memory capacity (HBM or GDDR), decimal GB as the vendor prints it
    hbm_tbps: float | None  # memory bandwidth, TB/s
    l2_mb: float | None
    sm_count: int | None
    boost_clock_mhz: int | None
    tdp_w: int | None
    nvlink_gen: int | None
    nvlink_gbps_per_gpu: float | None  # total bidirectional GB/s per GPU; None when there is no NVLink
    pcie_gen: int | None
    pcie_lanes: int | None
    memory_type: str | None
    source: str
    notes: str
    derived: bool = False  # True when computed from SM count x clock rather than read from the table

    def peak_tflops(self, dtype: str) -> float | None:
        """Dense peak for ``dtype`` (a DTYPES key or an alias such as "bfloat16", "torch.float16").

        Returns None when the SKU has no such figure; raises ValueError for an unknown dtype name,
        so a typo cannot pass as "not supported".
        """
        peak: float | None = getattr(self, normalize_dtype(dtype))
        return peak

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["match"] = list(self.match)
        return d

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> "GpuSpec":
        """Build and validate one table row; unknown, missing or mistyped fields raise SpecTableError."""
        return cls(**_validated(row))


def normalize_dtype(dtype: str) -> str:
    key = str(dtype).strip().lower()
    if key.startswith("torch."):
        key = key[len("torch."):]
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    return key


# --- validation -------------------------------------------------------------------------------

_FLOAT_FIELDS = set(DTYPES) | {"hbm_gb", "hbm_tbps", "l2_mb", "nvlink_gbps_per_gpu"}
_INT_FIELDS = {"sm_count", "boost_clock_mhz", "tdp_w", "nvlink_gen", "pcie_gen", "pcie_lanes"}
_REQUIRED_STR = {"id", "name", "arch", "compute_capability", "source"}
_TABLE_FIELDS = [f.name for f in fields(GpuSpec) if f.name != "derived"]


def _validated(row: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(row, Mapping):
        raise SpecTableError(f"spec row is {type(row).__name__}, expected an object")
    rid = row.get("id", "?")
    unknown = sorted(set(row) - set(_TABLE_FIELDS))
    if unknown:
        raise SpecTableError(f"spec row {rid!r}: unknown field(s) {', '.join(unknown)}")
    missing = [k for k in _TABLE_FIELDS if k not in row]
    if missing:
        raise SpecTableError(f"spec row {rid!r}: missing field(s) {', '.join(missing)}")

    out = {key: _field(rid, key, row[key]) for key in _TABLE_FIELDS}
    if out["arch"] not in ARCHS:
        raise SpecTableError(f"spec row {rid!r}: arch {out['arch']!r} is not one of {', '.join(ARCHS)}")
    if not re.fullmatch(r"\d+\.\d+", out["compute_capability"]):
        raise SpecTableError(f"spec row {rid!r}: compute_capability must look like '9.0'")
    if (out["nvlink_gen"] is None) != (out["nvlink_gbps_per_gpu"] is None):
        raise SpecTableError(f"spec row {rid!r}: nvlink_gen and nvlink_gbps_per_gpu must both be set or both null")
    return out


def _field(rid: Any, key: str, value: Any) -> Any:
    """One field of a spec row, checked against its kind and normalised (notes "" for null, match a tuple,
    peaks float)."""
    if key in _REQUIRED_STR:
        if not isinstance(value, str) or not value.strip():
            raise SpecTableError(f"spec row {rid!r}: {key} must be a non-empty string")
    elif key in ("notes", "memory_type"):
        if value is not None and not isinstance(value, str):
            raise SpecTableError(f"spec row {rid!r}: {key} must be a string or null")
        if key == "notes":
            value = value or ""
    elif key == "match":
        value = _match_patterns(rid, value)
    elif key in _FLOAT_FIELDS:
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise SpecTableError(f"spec row {rid!r}: {key} must be a positive number or null")
            value = float(value)
    elif key in _INT_FIELDS:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise SpecTableError(f"spec row {rid!r}: {key} must be a positive integer or null")
    return value


def _match_patterns(rid: Any, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(p, str) and p for p in value):
        raise SpecTableError(f"spec row {rid!r}: match must be a non-empty list of regex strings")
    for pattern in value:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SpecTableError(f"spec row {rid!r}: bad match regex {pattern!r}: {exc}") from None
    return tuple(value)


# --- loading and lookup -----------------------------------------------------------------------


@lru_cache(maxsize=1)
def _rows() -> tuple[GpuSpec, ...]:
    try:
        text = resources.files("perfstack.specs").joinpath("gpus.json").read_text(encoding="utf-8")
        raw = json.loads(text)
    except (OSError, ValueError) as exc:
        raise SpecTableError(f"cannot read the packaged GPU spec table gpus.json: {exc}") from None
    if not isinstance(raw, list):
        raise SpecTableError("gpus.json must hold a list of rows")
    specs = tuple(GpuSpec.from_dict(r) for r in raw)
    ids = [s.id for s in specs]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise SpecTableError(f"gpus.json: duplicate id(s) {', '.join(dupes)}")
    return specs


@lru_cache(maxsize=1)
def _compiled() -> tuple[tuple[GpuSpec, tuple[re.Pattern[str], ...]], ...]:
    return tuple((s, tuple(re.compile(p, re.IGNORECASE) for p in s.match)) for s in _rows())


def load() -> list[GpuSpec]:
    """All rows of the spec table (parsed once, cached; the list is a fresh copy each call)."""
    return list(_rows())


def _normalize_name(name: str) -> str:
    return " ".join(str(name).split()).lower()


def matches(name: str) -> list[GpuSpec]:
    """Every row whose regexes match ``name`` (normally zero or one; used by the tests for ambiguity)."""
    norm = _normalize_name(name)
    return [spec for spec, pats in _compiled() if any(p.fullmatch(norm) for p in pats)]


def lookup(name: str) -> GpuSpec | None:
    """The row for an NVML/nvidia-smi GPU name (or a table id), or None when unknown or ambiguous.

    MIG devices ("... MIG 1g.10gb") deliberately return None: a slice does not have the full
    GPU's peaks.
    """
    if not name or not str(name).strip():
        return None
    norm = _normalize_name(name)
    for spec in _rows():
        if spec.id == norm:
            return spec
    found = matches(name)
    return found[0] if len(found) == 1 else None


def close_matches(name: str, n: int = 5) -> list[str]:
    """Table ids and names that look like ``name``, for "GPU not in the spec table" hints."""
    candidates: dict[str, str] = {}
    for spec in _rows():
        candidates.setdefault(spec.id.lower(), spec.id)
        candidates.setdefault(spec.name.lower(), spec.name)
    norm = _normalize_name(name)
    hits = difflib.get_close_matches(norm, list(candidates), n=n, cutoff=0.5)
    return [candidates[h] for h in hits]
