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

A record read by ``from_dict`` remembers the keys it was read with, in their order (``loaded``), so that
``to_dict`` writes back the JSON it was read from, whatever version of perfstack wrote it: the keys read,
in that order (a value the field could not hold, one of the wrong kind or a map with entries that are no
object, is written back as it was read unless the field has been set since), then the fields set since
that the JSON did not have (those that differ from their default), then unknown keys added since. A
record built by a producer writes every field.

Times are milliseconds per step unless the name says otherwise (``_us``: microseconds). Annotations use
``Optional`` rather than ``X | None``: ``from_dict`` reads them at run time, on every supported Python,
so a module of records imports every record its annotations name.
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Optional, TypeVar

from perfstack import sections
from perfstack.fields import plain

R = TypeVar("R", bound="Record")


@dataclass
class Record:
    """A piece of the profile section. Subclasses name their JSON check (``CHECK``) and, where a JSON
    key is not a Python name, the key (``KEYS``: field name -> key)."""

    CHECK: ClassVar[sections.Check] = sections.obj({})
    KEYS: ClassVar[dict[str, str]] = {}
    WHEN_SET: ClassVar[frozenset[str]] = frozenset()  # fields written only when not None (absent keys stay absent)
    UNWRITTEN: ClassVar[frozenset[str]] = frozenset()  # fields that are no JSON key (``_unwritten`` reads them)

    # The keys ``from_dict`` read, in order, and the values the fields could not hold (None for a record
    # built by a producer). Not compared: a loaded record equals one built with its values.
    loaded: Optional[Loaded] = field(default=None, init=False, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        by_key = {self.KEYS.get(f.name, f.name): f for f in _written_fields(type(self))}
        extra: dict[str, Any] = getattr(self, "extra", {})
        out: dict[str, Any] = {}
        if self.loaded is not None:
            for key in self.loaded.keys:
                f = by_key.get(key)
                if f is not None:
                    v = getattr(self, f.name)
                    as_read = self.loaded.unfit.get(key)
                    out[key] = as_read[0] if as_read is not None and v == as_read[1] else plain(v)
                elif key in extra:
                    out[key] = extra[key]
        for key, f in by_key.items():
            if key not in out and self._writes(f.name) and (self.loaded is None or getattr(self, f.name) != _default(f)):
                out[key] = plain(getattr(self, f.name))
        out.update((k, v) for k, v in extra.items() if k not in out)
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
        hints = _hints(cls)
        fields = {f.name: f for f in _written_fields(cls)}
        names = {cls.KEYS.get(name, name): name for name in fields}
        args: dict[str, Any] = {}
        unfit: dict[str, tuple[Any, Any]] = {}
        for key, name in names.items():
            if key not in d:
                continue
            if not _fits(hints[name], d[key]):
                unfit[key] = (d[key], _default(fields[name]))
                continue
            args[name] = _typed(hints[name], d[key], f"{where}.{key}")
            if isinstance(args[name], dict) and len(args[name]) < len(d[key]):  # entries that are no object
                unfit[key] = (d[key], copy.deepcopy(args[name]))
        extra = {k: v for k, v in d.items() if k not in names}
        if "extra" in {f.name for f in dataclasses.fields(cls)}:
            args["extra"] = extra
        rec = cls(**args, **cls._unwritten(d))
        rec.loaded = Loaded(tuple(d), unfit)
        return rec


@dataclass(frozen=True)
class Loaded:
    """What a record's JSON held when it was read: its keys in order, and for each key whose value the
    field could not hold, (the JSON value, the field's value as read): the JSON value is written back
    while the field still holds what it was read as."""

    keys: tuple[str, ...]
    unfit: dict[str, tuple[Any, Any]]


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """A record class's annotations, evaluated once: typing.get_type_hints compiles each string
    annotation again at every call, which was most of the time a profile Run took to load."""
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def _written_fields(cls: type[Record]) -> list[dataclasses.Field[Any]]:
    """The fields that are JSON keys of ``cls`` (not ``extra``, ``loaded`` or an ``UNWRITTEN`` one)."""
    return [f for f in dataclasses.fields(cls) if f.name not in ("extra", "loaded") and f.name not in cls.UNWRITTEN]


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


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


def check_of(cls: type[Record]) -> sections.Check:
    """A record's JSON check read from its annotations (int, float, str, bool, Optional of those, lists of them
    or of records, maps), strict on every field it names: a record whose annotations are its schema needs no
    hand-written check in ``sections.py``."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in _written_fields(cls)}
    return sections.obj({cls.KEYS.get(n, n): _check(hints[n]) for n in names})


def _any(v: Any, where: str) -> None:
    return None


def _check(hint: Any) -> sections.Check:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union and type(None) in args:
        inner = _check(next(a for a in args if a is not type(None)))
        return lambda v, where: None if v is None else inner(v, where)
    if origin is list:
        return sections.list_of(_check(args[0]) if args else _any)
    if origin is dict:
        return sections.map_of(_check(args[1]) if len(args) == 2 else _any)
    if _is_record(hint):
        return lambda v, where: hint.CHECK(v, where)  # read when checking: a record's CHECK may be set after it
    return {int: sections.INT, float: sections.NUM, str: sections.TEXT, bool: sections.BOOL}.get(hint, _any)
