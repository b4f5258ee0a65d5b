"""The ``profile`` and ``estimates`` sections of a saved Run, checked against the shapes perfstack writes.

Findings and measurements are dataclasses (fields.py); these two sections are the JSON that
``perfstack profile`` and ``perfstack estimate`` write, read back by the report, the Markdown and HTML
renderers and diff. ``Run.from_dict`` checks them once (the profile through its typed records,
``perfstack.records.profile``, which check it against ``PROFILE``; the estimates through ``estimates``), so a
Run with ``"total_ms": "12"`` in a step or a string where the estimate sheet has a number is refused
on loading, naming the field (exit 2), instead of failing in a renderer. Every field a reader of a
saved Run uses is typed here (the report, Markdown, HTML, diff and the profile's own terminal report,
which read the profile as the Run's ``records.Section``); a field may be absent (readers
treat absence as "not measured"), and fields no such reader uses pass as they are.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from perfstack.errors import InputError
from perfstack.fields import KINDS, _number, _show

Check = Callable[[Any, str], None]  # raises InputError naming ``where`` (e.g. "profile.steps[3].total_ms")


def _kind(test: Callable[[Any], bool], must: str) -> Check:
    def check(v: Any, where: str) -> None:
        if not test(v):
            raise InputError(f"{where} must be {must}, not {_show(v)}")
    return check


NUM = _kind(_number, "a number")
NUM_ = _kind(lambda v: v is None or _number(v), "a number or null")
INT = _kind(KINDS["int"][0], "an integer")
INT_ = _kind(lambda v: v is None or KINDS["int"][0](v), "an integer or null")
TEXT = _kind(KINDS["str"][0], "a string")
TEXT_ = _kind(lambda v: v is None or isinstance(v, str), "a string or null")
BOOL = _kind(KINDS["bool"][0], "true or false")


def obj(fields: Mapping[str, Check], required: tuple[str, ...] = (), nullable: bool = False) -> Check:
    """A JSON object whose named fields, where present, pass their checks; ``required`` ones must be there."""
    def check(v: Any, where: str) -> None:
        if v is None and nullable:
            return
        if not isinstance(v, dict):
            raise InputError(f"{where} must be a JSON object{' or null' if nullable else ''}, not {_show(v)}")
        for k in required:
            if k not in v:
                raise InputError(f"{where}.{k} is missing")
        for k, c in fields.items():
            if k in v:
                c(v[k], f"{where}.{k}")
    return check


def list_of(item: Check) -> Check:
    def check(v: Any, where: str) -> None:
        if not isinstance(v, list):
            raise InputError(f"{where} must be a list, not {_show(v)}")
        for i, x in enumerate(v):
            item(x, f"{where}[{i}]")
    return check


def map_of(value: Check) -> Check:
    """A JSON object of any keys, each value passing ``value`` (ms by category, ...)."""
    def check(v: Any, where: str) -> None:
        if not isinstance(v, dict):
            raise InputError(f"{where} must be a JSON object, not {_show(v)}")
        for k, x in v.items():
            value(x, f"{where}.{k}")
    return check


def _numbers(*names: str) -> dict[str, Check]:
    return {n: NUM_ for n in names}


# -- profile (perfstack.profile.summary) ---------------------------------------------------------
# The pieces are named so that the profile's typed records (perfstack.records.profile) check a piece
# they read back with the same check as the whole section: one validation path.
MS = map_of(NUM)  # milliseconds by category, phase or idle reason

STEP = obj({"step": INT, "total_ms": NUM, "busy_pct": NUM, "idle_ms": NUM, "kernels": INT, "syncs": INT,
            "categories": MS})
IDLE_GAP = obj({"step": INT_, "start_ms": NUM, "duration_ms": NUM, "before": TEXT, "after": TEXT, "reason": TEXT})
TIMELINE = obj({"bound": TEXT_, "cpu_ahead_ms": NUM_})
LAUNCH = obj({"launch_to_start_us": obj({"median": NUM_}), **_numbers("kernels_per_step", "median_kernel_us")})
SYNC = obj({"calls_per_step": NUM})
ALLOCATOR = obj({"calls_per_step": NUM})
COMM = obj(_numbers("ms_per_step", "overlap_pct"))
MFU = obj({"value": NUM, "peak_tflops": NUM_, "dtype": TEXT_, "source": TEXT}, ("value",), nullable=True)
STRAGGLER = obj({"rank": INT, "cause": TEXT, "excess_ms": NUM}, ("rank", "excess_ms", "cause"), nullable=True)
OP = obj({"op": TEXT, "category": TEXT, "dtype": TEXT_,
          **_numbers("time_ms_per_step", "tflops", "gbps", "pct_of_peak", "pct_of_hbm")})
KERNEL_CLASS = obj({"name": TEXT, "class": TEXT, **_numbers("time_ms", "flops", "bytes", "intensity", "tflops")})
TOP_KERNEL = obj({"name": TEXT, "category": TEXT, "count": INT, "time_ms_per_step": NUM})
OVERHEAD = obj({"method": TEXT, "note": TEXT, **_numbers("profiled_step_ms", "cpu_inflation", "step_ms")})

PROFILE = obj({
    "device_name": TEXT_, "notes": list_of(TEXT), "warnings": list_of(TEXT),
    **_numbers("step_ms", "mean_step_ms"),
    "steps": list_of(STEP),
    "breakdown_ms": MS, "idle_by_reason_ms": MS, "phases_ms": MS,
    "idle_gaps": list_of(IDLE_GAP),
    "kernel_classes": list_of(KERNEL_CLASS),
    "ops": list_of(OP),
    "top_kernels": list_of(TOP_KERNEL),
    "launch": LAUNCH,
    "sync": SYNC,
    "allocator": ALLOCATOR,
    "comm": COMM,
    "mfu": MFU,
    "overhead": OVERHEAD,
    "timeline": TIMELINE,
    "ranks": list_of(obj({})),
    "straggler": STRAGGLER,
})


# -- estimates (perfstack.estimate: the sheet) ------------------------------------------------------
WORKING = obj({"label": TEXT, "value": NUM_, "unit": TEXT, "formula": TEXT, "inputs": map_of(lambda v, w: None),
               "assumptions": list_of(TEXT)}, ("label", "value", "unit", "formula", "inputs", "assumptions"))
INFER_SETTINGS = ("batch", "prompt", "gen", "dtype", "tp")
TRAIN_SETTINGS = ("batch", "seq", "precision", "optimizer", "grad_ckpt", "zero", "dp", "tp", "pp")
SETTINGS = {"batch": INT, "prompt": INT, "gen": INT, "seq": INT, "tp": INT, "dp": INT, "pp": INT, "zero": INT,
            "dtype": TEXT, "weights": TEXT_, "kv_dtype": TEXT_, "precision": TEXT, "optimizer": TEXT,
            "grad_ckpt": BOOL}
FIT = {"gpu": TEXT, "name": TEXT, "gpus_needed": INT_, "fits": BOOL}
SHEET = {"model": obj({"name": TEXT, "description": TEXT}), "gpu": obj({"name": TEXT}),
         "working": map_of(WORKING), "regime": map_of(TEXT_), "assumptions": list_of(TEXT),
         **{s: map_of(NUM_) for s in ("params", "memory", "capacity", "flops", "time", "comms")}}


def estimates(section: Any, where: str = "estimates") -> Any:
    """The estimates section, unchanged. The sheet ``perfstack estimate`` writes (it has ``working``) is
    checked against its shape for its kind; any other nesting is read by the report without assumptions."""
    if not isinstance(section, dict) or "working" not in section:
        return section
    kind = section.get("kind")
    if kind not in ("infer", "train"):
        raise InputError(f"{where}.kind must be one of infer, train, not {_show(kind)}")
    obj({**SHEET, "settings": obj(SETTINGS, INFER_SETTINGS if kind == "infer" else TRAIN_SETTINGS),
         "fit": list_of(obj(FIT, ("gpu", "gpus_needed") if kind == "infer" else ("gpu", "fits")))},
        ("settings",))(section, where)
    return section
