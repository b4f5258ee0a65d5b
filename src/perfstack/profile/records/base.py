"""The base of the profile's typed records: a dataclass that writes the JSON of its piece of a Run's
``profile`` section and reads it back.

``to_dict`` writes exactly the JSON a profile Run has always held (field order, names and values), so Runs
saved before load unchanged and the JSON schema of the ``profile`` section does not move. ``from_dict``
reads one back from a loaded Run: the fields are checked by the same checks ``Run.from_dict`` applies to
the whole section (``sections.py``, the one validation path: a wrong type is exit 2 naming the field), a
field that is absent takes its default, and fields this version does not know are kept in ``extra`` and
written back, so a round trip is lossless. A field the check does not cover that holds a value of the
wrong kind (a string where a number belongs, a list where an object does) takes its default, so no reader
meets a type it did not ask for.

Times are milliseconds per step unless the name says otherwise (``_us``: microseconds). Annotations use
``Optional`` rather than ``X | None``: ``from_dict`` reads them at run time, on every supported Python,
so a module of records imports every record its annotations name.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, TypeVar

from perfstack import sections

R = TypeVar("R", bound="Record")


@dataclass
class Record:
    """A piece of the profile section. Subclasses name their JSON check (``CHECK``) and, where a JSON
    key is not a Python name, the key (``KEYS``: field name -> key)."""

    CHECK: ClassVar[sections.Check] = sections.obj({})
    KEYS: ClassVar[dict[str, str]] = {}
    WHEN_SET: ClassVar[frozenset[str]] = frozenset()  # fields written only when not None (absent keys stay absent)
    UNWRITTEN: ClassVar[frozenset[str]] = frozenset()  # fields that are no JSON key (``_unwritten`` reads them)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name == "extra" or f.name in self.UNWRITTEN or not self._writes(f.name):
                continue
            out[self.KEYS.get(f.name, f.name)] = _plain(getattr(self, f.name))
        out.update(getattr(self, "extra", {}))
        return out

    def _writes(self, name: str) -> bool:
        """Whether ``to_dict`` writes the field ``name``."""
        return name not in self.WHEN_SET or getattr(self, name) is not None

    @classmethod
    def _unwritten(cls, d: Mapping[str, Any]) -> dict[str, Any]:
        """The ``UNWRITTEN`` fields, as the JSON object ``d`` implies them."""
        return {}

    @classmethod
    def from_dict(cls: type[R], d: Any, where: str) -> R:
        cls.CHECK(d, where)
        hints = typing.get_type_hints(cls)
        names = {cls.KEYS.get(f.name, f.name): f.name for f in dataclasses.fields(cls)
                 if f.name != "extra" and f.name not in cls.UNWRITTEN}
        args: dict[str, Any] = {}
        for key, name in names.items():
            if key in d and _fits(hints[name], d[key]):
                args[name] = _typed(hints[name], d[key], f"{where}.{key}")
        extra = {k: v for k, v in d.items() if k not in names}
        if "extra" in {f.name for f in dataclasses.fields(cls)}:
            args["extra"] = extra
        return cls(**args, **cls._unwritten(d))


def _plain(v: Any) -> Any:
    if isinstance(v, Record):
        return v.to_dict()
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _typed(hint: Any, v: Any, where: str) -> Any:
    """``v`` as the annotation ``hint`` asks where that is a record (or a list or optional one)."""
    if _is_record(hint):
        return hint.from_dict(v, where)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list and args and _is_record(args[0]):
        return [args[0].from_dict(x, f"{where}[{i}]") for i, x in enumerate(v)]
    if origin is dict and len(args) == 2 and _is_record(args[1]):  # by key; an entry that is no object is dropped
        return {k: args[1].from_dict(x, f"{where}.{k}") for k, x in v.items() if isinstance(x, dict)}
    if origin is typing.Union and v is not None:
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:  # Optional[...]
            return _typed(inner[0], v, where)
        recs = [a for a in args if _is_record(a)]
        if recs:
            return recs[0].from_dict(v, where)
    return v


def _fits(hint: Any, v: Any) -> bool:
    """Whether ``v`` is of the kind the annotation ``hint`` names (a JSON number for int and float, an
    object for a record or a dict, ...); a field given a value that is not takes its default."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        return any(_fits(a, v) for a in args)
    if hint is type(None):
        return v is None
    if hint in (int, float):
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if hint is str:
        return isinstance(v, str)
    if hint is bool:
        return isinstance(v, bool)
    if origin is dict or _is_record(hint):
        return isinstance(v, dict)
    if origin is list:
        return isinstance(v, list)
    return True  # Any, Mapping[str, Any]: as the JSON holds it


def _is_record(hint: Any) -> bool:
    # A parametrized builtin (dict[str, Any]) passes isinstance(..., type) before Python 3.11, and
    # issubclass then raises: only a plain class can be a record.
    return isinstance(hint, type) and typing.get_origin(hint) is None and issubclass(hint, Record)
