"""The checks of values read from outside, in words a refusal can quote.

A Run's records check themselves against their annotations (``records.base``); what is left here is the
older, text-keyed form: ``typed`` checks a fact of a loaded Run (``Run.from_dict``), and ``KINDS``, ``one_of``
and ``_show`` are the words ``sections`` (the shapes the profile and estimate sections must have) refuses in.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

from perfstack.errors import InputError


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _text(v: Any) -> bool:
    return isinstance(v, str)


def _list_of(ok: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and all(ok(x) for x in v)


def _dict_of(ok: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, dict) and all(isinstance(k, str) and ok(x) for k, x in v.items())


# annotation (as written in model.py) -> (test, what the message says it must be)
KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "str": (_text, "a string"),
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "float | None": (lambda v: v is None or _number(v), "a number or null"),
    "str | None": (lambda v: v is None or _text(v), "a string or null"),
    "list[str] | None": (lambda v: v is None or _list_of(_text)(v), "a list of strings or null"),
    "dict[str, Any] | None": (lambda v: v is None or _dict_of(lambda x: True)(v), "an object or null"),
    "list[str]": (_list_of(_text), "a list of strings"),
    "list[float]": (_list_of(_number), "a list of numbers"),
    "dict[str, float]": (_dict_of(lambda x: x is None or _number(x)), "an object of numbers"),
    "dict[str, Any]": (_dict_of(lambda x: True), "an object"),
    "float": (_number, "a number"),
    "dict[str, str]": (_dict_of(_text), "an object of strings"),
    "dict[str, list[str]]": (_dict_of(_list_of(_text)), "an object of lists of strings"),
    "list[dict[str, Any]]": (_list_of(_dict_of(lambda x: True)), "a list of objects"),
    "list[dict[str, Any]] | None": (lambda v: v is None or _list_of(_dict_of(lambda x: True))(v),
                                    "a list of objects or null"),
    "int | None": (lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)), "an integer or null"),
    "Any": (lambda v: True, "any value"),
}


def typed(cls: type, d: Any, where: str, extra: Mapping[str, Callable[[Any], str]] | None = None) -> dict[str, Any]:
    """``d``'s fields for ``cls(**...)``, each checked; ``where`` names the record
    ("findings[3]"); ``extra`` maps a field to a check returning a complaint or "" (enums, ranges)."""
    if not isinstance(d, dict):
        raise InputError(f"{where} must be a JSON object")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in d if k not in fields]
    if unknown:
        raise InputError(f"{where}.{unknown[0]} is not a field of a {cls.__name__.lower()}")
    for name, f in fields.items():
        if name not in d:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise InputError(f"{where}.{name} is missing")
            continue
        ok, must = KINDS.get(str(f.type), KINDS["Any"])
        if not ok(d[name]):
            raise InputError(f"{where}.{name} must be {must}, not {_show(d[name])}")
        complaint = (extra or {}).get(name, lambda v: "")(d[name])
        if complaint:
            raise InputError(f"{where}.{name} {complaint}")
    return dict(d)


def one_of(*allowed: str) -> Callable[[Any], str]:
    return lambda v: "" if v in allowed else f"must be one of {', '.join(allowed)}, not {_show(v)}"


def _show(v: Any) -> str:
    s = repr(v) if not isinstance(v, (dict, list)) else ("an object" if isinstance(v, dict) else "a list")
    return s if len(s) <= 40 else s[:37] + "..."
