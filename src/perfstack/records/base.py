"""One tolerant record: the base of every record a Run is made of, whose checks are its annotations.

``from_dict`` reads a record from the JSON object of a loaded Run, once, so that readers trust the types:

- every key whose field the record has is checked against the field's annotation (``int``, ``float``, ``str``,
  ``bool``, ``Any``, ``Optional``/``X | None``, ``Literal`` (one of its values), an Enum (one of its values),
  ``list[...]``, ``dict[str, ...]``, and records, read by their own ``from_dict``); a value of the wrong type
  is refused with an InputError naming the field (``profile.steps[3].busy_ms must be a number, not '12'``),
  which the CLI turns into exit 2;
- a field that is absent takes its default; one without a default is refused as missing;
- keys this perfstack does not know (a newer Run, a hand-edited one) are kept in ``extra``, and written back.

``to_dict`` writes the JSON: a record read by ``from_dict`` writes the keys it was read with, in that order,
then the fields set since that the JSON did not have (those that differ from their default), then unknown keys
added since; a record built by a producer writes every field in the order of the class (``WHEN_SET`` ones only
when not None), then its ``extra``. So a loaded Run saves back as it was read, whatever wrote it.

A subclass is a dataclass whose last field is ``extra: dict[str, Any] = field(default_factory=dict)``. It may
name a JSON key that is no Python name (``KEYS``: field -> key), fields that are no JSON key (``UNWRITTEN``,
implied by ``_unwritten``), and a check of the whole object beyond the annotations (``CHECK``: ranges, keys
that must be there). Annotations may be written ``X | None`` under ``from __future__ import annotations``:
they are read here, on every supported Python (3.9 has no ``|`` between types at run time), from the names of
the record's module.
"""

from __future__ import annotations

import ast
import builtins
import collections.abc
import dataclasses
import enum
import math
import sys
import typing
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Literal, Mapping, Optional, TypeVar, Union

from perfstack.errors import InputError

R = TypeVar("R", bound="Record")
Check = Callable[[Any, str], None]  # raises InputError naming ``where``


@dataclass
class Record:
    """The base of a Run's records (see the module's text)."""

    KEYS: ClassVar[Mapping[str, str]] = {}
    WHEN_SET: ClassVar[frozenset[str]] = frozenset()  # written only when not None (absent keys stay absent)
    UNWRITTEN: ClassVar[frozenset[str]] = frozenset()  # fields that are no JSON key (``_unwritten`` reads them)
    CHECK: ClassVar[Optional[Check]] = None  # what the annotations cannot say (ranges, keys that must be there)

    # The keys ``from_dict`` read, in order; None for a record built by a producer. An attribute rather than a
    # field, so that a subclass may have fields without defaults, and a loaded record equals one built with
    # its values.
    loaded: ClassVar[Optional[tuple[str, ...]]] = None

    def to_dict(self) -> dict[str, Any]:
        by_key = {self.KEYS.get(f.name, f.name): f for f in written_fields(type(self))}
        extra: dict[str, Any] = getattr(self, "extra", {})
        out: dict[str, Any] = {}
        loaded = self.loaded
        if loaded is not None:
            for key in loaded:
                f = by_key.get(key)
                if f is not None:
                    out[key] = plain(getattr(self, f.name))
                elif key in extra:
                    out[key] = extra[key]
        for key, f in by_key.items():
            if key not in out and self._writes(f.name) and (loaded is None or getattr(self, f.name) != default(f)):
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
        if not isinstance(d, dict):
            raise InputError(f"{where} must be a JSON object, not {show(d)}")
        if cls.CHECK is not None:
            cls.CHECK(d, where)
        hints = hints_of(cls)
        args: dict[str, Any] = {}
        known: set[str] = set()
        for f in written_fields(cls):
            key = cls.KEYS.get(f.name, f.name)
            known.add(key)
            if key in d:
                args[f.name] = convert(hints[f.name], d[key], f"{where}.{key}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise InputError(f"{where}.{key} is missing")
        if "extra" in hints:
            args["extra"] = {k: v for k, v in d.items() if k not in known}
        rec = cls(**args, **cls._unwritten(d))
        object.__setattr__(rec, "loaded", tuple(d))  # frozen records too
        return rec


def built(cls: type[R], d: Mapping[str, Any], **fields: Any) -> R:
    """A record of ``cls`` a producer makes of the plain object ``d`` it just computed (not checked again):
    ``d``'s fields (``fields`` in their place), the other keys kept, written back in ``d``'s order."""
    names = {f.name for f in written_fields(cls)}
    args = {k: v for k, v in d.items() if k in names}
    args.update(fields)
    args["extra"] = {k: v for k, v in d.items() if k not in names}
    rec = cls(**args)
    set_loaded(rec, tuple(d))
    return rec


def set_loaded(rec: Record, keys: tuple[str, ...]) -> None:
    """Make ``rec`` write its keys in the order ``keys`` first, as a record read with them does."""
    object.__setattr__(rec, "loaded", keys)


def written_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields of ``cls`` that are JSON keys (not ``extra``, nor an ``UNWRITTEN`` one)."""
    return _WRITTEN.get(cls) or _WRITTEN.setdefault(cls, [
        f for f in dataclasses.fields(cls) if f.name != "extra" and f.name not in getattr(cls, "UNWRITTEN", ())])


_WRITTEN: dict[type, list[dataclasses.Field[Any]]] = {}


def default(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def plain(v: Any) -> Any:
    """A record (anything with ``to_dict``), an Enum, or a list or dict of them, as JSON values."""
    if hasattr(v, "to_dict"):
        return v.to_dict()
    if isinstance(v, enum.Enum):
        return v.value
    if isinstance(v, list):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    return v


# -- annotations, read once per class -------------------------------------------------------------------------
_HINTS: dict[type, dict[str, Any]] = {}


def hints_of(cls: type) -> dict[str, Any]:
    """The annotations of ``cls``'s fields, evaluated once (a record is read many times)."""
    hints = _HINTS.get(cls)
    if hints is None:
        hints = {}
        fields = {f.name for f in dataclasses.fields(cls)}
        for klass in reversed(cls.__mro__):
            names = {**vars(sys.modules[klass.__module__]), klass.__name__: klass}
            for name, ann in vars(klass).get("__annotations__", {}).items():
                if name in fields:
                    hints[name] = evaluate(ann, names) if isinstance(ann, str) else ann
        _HINTS[cls] = hints
    return hints


def evaluate(text: str, names: Mapping[str, Any]) -> Any:
    """An annotation written as text, evaluated with ``names`` (the module's): ``X | Y`` is read as
    ``Union[X, Y]``, which every supported Python has, and a quoted part is read as the text it holds."""
    return _node(ast.parse(text.strip(), mode="eval").body, names)


def _node(n: ast.expr, names: Mapping[str, Any]) -> Any:
    if isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr):
        return Union[_node(n.left, names), _node(n.right, names)]
    if isinstance(n, ast.Constant):
        return evaluate(n.value, names) if isinstance(n.value, str) else n.value
    if isinstance(n, ast.Name):
        if n.id in names:
            return names[n.id]
        return getattr(builtins, n.id)
    if isinstance(n, ast.Attribute):
        return getattr(_node(n.value, names), n.attr)
    if isinstance(n, ast.Subscript):
        base = _node(n.value, names)
        inner = n.slice
        if base is Literal:
            parts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            return Literal[tuple(ast.literal_eval(p) for p in parts)]
        args = tuple(_node(e, names) for e in inner.elts) if isinstance(inner, ast.Tuple) else _node(inner, names)
        return base[args]
    raise TypeError(f"annotation not understood: {ast.dump(n)}")


# -- checking a JSON value against an annotation ----------------------------------------------------------------
def _is_record(hint: Any) -> bool:
    # A parametrized builtin (dict[str, Any]) passes isinstance(..., type) before Python 3.11, and issubclass
    # then raises: only a plain class can be a record.
    return isinstance(hint, type) and typing.get_origin(hint) is None and issubclass(hint, Record)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _integer(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_SCALARS: dict[Any, tuple[Callable[[Any], bool], str, str]] = {
    str: (lambda v: isinstance(v, str), "a string", "strings"),
    int: (_integer, "an integer", "integers"),
    float: (_number, "a number", "numbers"),
    bool: (lambda v: isinstance(v, bool), "true or false", "true or false values"),
}


def describe(hint: Any, plural: bool = False) -> str:
    """What a value of the annotation ``hint`` must be, in words: "a number or null", "a list of strings"."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in _SCALARS:
        _, one, many = _SCALARS[hint]
        return many if plural else one
    if origin is Union:
        inner = [a for a in args if a is not type(None)]
        words = " or ".join(describe(a, plural) for a in inner)
        return f"{words} or null" if len(inner) < len(args) else words
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(str(m.value) for m in hint)
    if origin is tuple:
        return "lists" if plural else "a list"
    if origin is list or hint is list:
        item = args[0] if args else Any
        return "lists" if plural else ("a list" if item is Any else f"a list of {describe(item, True)}")
    if origin in (dict, collections.abc.Mapping) or hint is dict:
        value = args[1] if len(args) == 2 else Any
        if plural:
            return "objects"
        return "an object" if value is Any or _is_record(value) else f"an object of {describe(value, True)}"
    if _is_record(hint):
        return "objects" if plural else "a JSON object"
    return "values" if plural else "any value"


def convert(hint: Any, v: Any, where: str) -> Any:
    """``v`` (a JSON value at ``where``) as the annotation ``hint`` asks: checked, records read by their own
    ``from_dict``; an InputError naming ``where`` if it does not fit."""
    if hint is Any or hint is object:
        return v
    scalar = _SCALARS.get(hint)
    if scalar is not None:
        if not scalar[0](v):
            raise InputError(f"{where} must be {scalar[1]}, not {show(v)}")
        return v
    if _is_record(hint):
        return hint.from_dict(v, where)
    origin = typing.get_origin(hint)
    if origin is Union:
        return _union(hint, v, where)
    if origin is Literal:
        if not any(v == a and type(v) is type(a) for a in typing.get_args(hint)):
            raise InputError(f"{where} must be {describe(hint)}, not {show(v)}")
        return v
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(v)
        except ValueError:
            raise InputError(f"{where} must be {describe(hint)}, not {show(v)}") from None
    if origin in (list, tuple) or hint is list:
        return _list(hint, v, where)
    if origin in (dict, collections.abc.Mapping) or hint is dict:
        return _dict(hint, v, where)
    raise TypeError(f"{where}: no check for the annotation {hint!r}")


def _union(hint: Any, v: Any, where: str) -> Any:
    args = typing.get_args(hint)
    if v is None:
        if type(None) in args:
            return None
        raise InputError(f"{where} must be {describe(hint)}, not None")
    for a in args:  # the first arm of the value's JSON kind
        if a is not type(None) and _kind_fits(a, v):
            return convert(a, v, where)
    raise InputError(f"{where} must be {describe(hint)}, not {show(v)}")


def _list(hint: Any, v: Any, where: str) -> Any:
    if not isinstance(v, list):
        raise InputError(f"{where} must be {describe(hint)}, not {show(v)}")
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple:
        return tuple(v)
    item = args[0] if args else Any
    if item is Any:
        return list(v)
    return [convert(item, x, f"{where}[{i}]") for i, x in enumerate(v)]


def _dict(hint: Any, v: Any, where: str) -> Any:
    if not isinstance(v, dict):
        raise InputError(f"{where} must be {describe(hint)}, not {show(v)}")
    args = typing.get_args(hint)
    value = args[1] if len(args) == 2 else Any
    if value is Any:
        return dict(v)
    return {k: convert(value, x, f"{where}.{k}") for k, x in v.items()}


def _kind_fits(hint: Any, v: Any) -> bool:
    """Whether ``v`` is of the JSON kind ``hint`` takes (which arm of a union it is meant for)."""
    if hint is Any or hint is object:
        return True
    if hint in _SCALARS:
        return _SCALARS[hint][0](v)
    origin = typing.get_origin(hint)
    if origin is Literal:
        return any(v == a and type(v) is type(a) for a in typing.get_args(hint))
    if _is_record(hint) or origin in (dict, collections.abc.Mapping) or hint is dict:
        return isinstance(v, dict)
    if origin in (list, tuple) or hint is list:
        return isinstance(v, list)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return isinstance(v, str)
    return True


def show(v: Any) -> str:
    """A value as an error message quotes it: short, and an object or a list by its kind."""
    s = repr(v) if not isinstance(v, (dict, list)) else ("an object" if isinstance(v, dict) else "a list")
    return s if len(s) <= 40 else s[:37] + "..."
