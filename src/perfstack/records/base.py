"""One tolerant record: the base of every record a Run is made of, whose checks are its annotations.

``from_dict`` reads a record from the JSON object of a loaded Run, once, so that readers trust the types:

- every key whose field the record has is checked against the field's annotation (``int``, ``float``, ``str``,
  ``bool``, ``Any``, ``Optional``/``X | None``, ``Literal`` (one of its values), an Enum (one of its values),
  ``list[...]``, ``dict[str, ...]``, ``Annotated[X, Spelled(...)]`` (a value JSON has no word for, such as an
  infinite load, written as a string), and records, read by their own ``from_dict``); a value of the wrong type
  is refused with an InputError naming the field (``profile.steps[3].busy_ms must be a number, not '12'``),
  which the CLI turns into exit 2;
- a field that is absent takes its default; one without a default is refused as missing;
- keys this perfstack does not know (a newer Run, a hand-edited one) are kept in ``extra``, and written back.

``to_dict`` writes the JSON: a record read by ``from_dict`` writes the keys it was read with, in that order,
then the fields set since that the JSON did not have (those that differ from their default), then unknown keys
added since; a record built by a producer writes every field in the order of the class (``WHEN_SET`` ones only
when not None; with ``OMIT_DEFAULTS``, only those that differ from their default), then its ``extra``. So a
loaded Run saves back as it was read, whatever wrote it.

How each field is read and written is worked out once per class from its annotation (a load test's Run holds
a hundred thousand request records): a list of numbers is checked in one pass, and a value that fits is taken
as it is.

A subclass is a dataclass whose last field is ``extra: dict[str, Any] = field(default_factory=dict)``. It may
name a JSON key that is no Python name (``KEYS``: field -> key), fields that are no JSON key (``UNWRITTEN``,
implied by ``_unwritten``), keys a loaded object must have though their fields have defaults (``REQUIRED``),
and a check of the whole object beyond the annotations (``CHECK``: ranges, what depends on another key). Annotations may be written ``X | None`` under ``from __future__ import annotations``:
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
from typing import Annotated, Any, Callable, ClassVar, Literal, Mapping, Optional, TypeVar, Union

from perfstack.errors import InputError

R = TypeVar("R", bound="Record")
Check = Callable[[Any, str], None]  # raises InputError naming ``where``


@dataclass(frozen=True)
class Spelled:
    """A value JSON has no word for, and the string a Run writes in its place. ``Annotated[float, INF]`` is a
    number, or ``"inf"`` for an unbounded one (everything at once): JSON has no infinity, and a Run refuses
    one. Over ``Any`` the word stands for the value at the top and inside lists."""

    value: Any
    word: str


INF = Spelled(math.inf, "inf")


@dataclass
class Record:
    """The base of a Run's records (see the module's text)."""

    KEYS: ClassVar[Mapping[str, str]] = {}
    WHEN_SET: ClassVar[frozenset[str]] = frozenset()  # written only when not None (absent keys stay absent)
    # A record built by a producer writes only the fields that differ from their default, as a loaded one
    # writes only those it was read with (a request record of the load test: most of its fields are unset).
    OMIT_DEFAULTS: ClassVar[bool] = False
    UNWRITTEN: ClassVar[frozenset[str]] = frozenset()  # fields that are no JSON key (``_unwritten`` reads them)
    # keys a loaded object must have, though a producer may leave their fields to the default (the value of an MFU)
    REQUIRED: ClassVar[tuple[str, ...]] = ()
    CHECK: ClassVar[Optional[Check]] = None  # what the annotations cannot say (ranges, keys that must be there)

    # The keys ``from_dict`` read, in order; None for a record built by a producer. An attribute rather than a
    # field, so that a subclass may have fields without defaults, and a loaded record equals one built with
    # its values.
    loaded: ClassVar[Optional[tuple[str, ...]]] = None

    def to_dict(self) -> dict[str, Any]:
        plan = _plan(type(self))
        extra: dict[str, Any] = getattr(self, "extra", {})
        out: dict[str, Any] = {}
        loaded = self.loaded
        if loaded is not None:
            by_key = plan.by_key
            for key in loaded:
                f = by_key.get(key)
                if f is not None:
                    out[key] = f.write(getattr(self, f.name))
                elif key in extra:
                    out[key] = extra[key]
        omit = loaded is not None or self.OMIT_DEFAULTS
        for f in plan.fields:
            if f.key in out:
                continue
            v = getattr(self, f.name)
            if plan.custom_writes:
                if not self._writes(f.name):
                    continue
            elif v is None and f.when_set:
                continue
            if omit and v == f.default:
                continue
            out[f.key] = f.write(v)
        if extra:
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
        for key in cls.REQUIRED:
            if key not in d:
                raise InputError(f"{where}.{key} is missing")
        if cls.CHECK is not None:
            cls.CHECK(d, where)
        plan = _plan(cls)
        args: dict[str, Any] = {}
        found = 0
        for f in plan.fields:
            key = f.key
            if key in d:
                found += 1
                v = d[key]
                ok = f.ok
                args[f.name] = v if ok is not None and ok(v) else f.read(v, f"{where}.{key}")
            elif f.required:
                raise InputError(f"{where}.{key} is missing")
        if plan.extra:
            args["extra"] = {k: v for k, v in d.items() if k not in plan.by_key} if found < len(d) else {}
        rec = cls(**args, **cls._unwritten(d))
        keys = tuple(d)
        # many records of a Run share the keys they were read with (a load test's requests): one tuple for all
        if len(_KEY_ORDERS) < 4096:
            keys = _KEY_ORDERS.setdefault(keys, keys)
        object.__setattr__(rec, "loaded", keys)  # frozen records too
        return rec


_KEY_ORDERS: dict[tuple[str, ...], tuple[str, ...]] = {}


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


# -- each class's fields, with how each is read and written, worked out once ----------------------------------
Reader = Callable[[Any, str], Any]  # a JSON value at ``where`` -> the field's value, or an InputError
Writer = Callable[[Any], Any]  # the field's value -> its JSON value


@dataclass(frozen=True)
class _Field:
    name: str
    key: str
    read: Reader
    ok: Optional[Callable[[Any], bool]]  # where the JSON value is the field's value as it is: does it fit?
    write: Writer
    required: bool
    default: Any  # compared with, never handed out (MISSING for a required field: nothing equals it)
    when_set: bool


@dataclass(frozen=True)
class _Plan:
    fields: tuple[_Field, ...]
    by_key: Mapping[str, _Field]
    extra: bool  # the class keeps unknown keys
    custom_writes: bool  # the class decides itself which fields it writes (``_writes``)


_PLANS: dict[type, _Plan] = {}


def _plan(cls: type[Record]) -> _Plan:
    plan = _PLANS.get(cls)
    if plan is None:
        hints = hints_of(cls)
        fields = []
        for f in written_fields(cls):
            hint = hints[f.name]
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            fields.append(_Field(name=f.name, key=cls.KEYS.get(f.name, f.name), read=reader(hint), ok=_fits(hint),
                                 write=writer(hint), required=required,
                                 default=dataclasses.MISSING if required else default(f),
                                 when_set=f.name in cls.WHEN_SET))
        plan = _PLANS[cls] = _Plan(tuple(fields), {f.key: f for f in fields}, "extra" in hints,
                                   cls._writes is not Record._writes)
    return plan


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
        if base is Literal:  # its words, and those of a Literal it names (Literal["", Attribution])
            parts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            words: list[Any] = []
            for p in parts:
                words += [ast.literal_eval(p)] if isinstance(p, ast.Constant) else typing.get_args(_node(p, names))
            return Literal[tuple(words)]
        args = tuple(_node(e, names) for e in inner.elts) if isinstance(inner, ast.Tuple) else _node(inner, names)
        return base[args]
    raise TypeError(f"annotation not understood: {ast.dump(n)}")


# -- what an annotation takes ---------------------------------------------------------------------------------
def _is_record(hint: Any) -> bool:
    # A parametrized builtin (dict[str, Any]) passes isinstance(..., type) before Python 3.11, and issubclass
    # then raises: only a plain class can be a record.
    return isinstance(hint, type) and typing.get_origin(hint) is None and issubclass(hint, Record)


def _is_enum(hint: Any) -> bool:
    return isinstance(hint, type) and typing.get_origin(hint) is None and issubclass(hint, enum.Enum)


def _spelled(hint: Any) -> tuple[Any, Optional[Spelled]]:
    """An ``Annotated`` hint's type and its Spelled (None if it has none)."""
    inner, *meta = typing.get_args(hint)
    return inner, next((m for m in meta if isinstance(m, Spelled)), None)


def _number(v: Any) -> bool:
    t = type(v)
    if t is float:
        return bool(v - v == 0.0)  # finite (inf - inf and NaN are NaN)
    if t is int:
        return True
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
    if origin is Annotated:
        inner, sp = _spelled(hint)
        return describe(inner, plural) + (f' or "{sp.word}"' if sp is not None else "")
    if origin is Union:
        inner = [a for a in args if a is not type(None)]
        words = " or ".join(describe(a, plural) for a in inner)
        return f"{words} or null" if len(inner) < len(args) else words
    if origin is Literal:
        return "one of " + ", ".join(str(a) if a != "" else '""' for a in args)
    if _is_enum(hint):
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
    return reader(hint)(v, where)


_READERS: dict[Any, Reader] = {}
_WRITERS: dict[Any, Writer] = {}


def reader(hint: Any) -> Reader:
    """How a JSON value is read as the annotation ``hint`` asks (worked out once per annotation)."""
    try:
        r = _READERS.get(hint)
    except TypeError:  # an annotation that cannot be hashed (a Literal of a list): worked out each time
        return _reader(hint)
    if r is None:
        r = _READERS[hint] = _reader(hint)
    return r


def _refuse(hint: Any, v: Any, where: str) -> InputError:
    return InputError(f"{where} must be {describe(hint)}, not {show(v)}")


def _reader(hint: Any) -> Reader:
    fits = _fits(hint)
    if fits is not None:  # a JSON value that is the field's value as it is: a check
        def check(v: Any, where: str) -> Any:
            if not fits(v):
                raise _refuse(hint, v, where)
            return v
        return check
    if _is_record(hint):
        return hint.from_dict  # type: ignore[no-any-return]
    origin = typing.get_origin(hint)
    if origin is Annotated:
        return _spelled_reader(hint)
    if origin is Union:
        return _union_reader(hint)
    if _is_enum(hint):
        def member(v: Any, where: str) -> Any:
            try:
                return hint(v)
            except ValueError:
                raise _refuse(hint, v, where) from None
        return member
    if origin in (list, tuple) or hint is list:
        return _list_reader(hint)
    if origin in (dict, collections.abc.Mapping) or hint is dict:
        return _dict_reader(hint)

    def unknown(v: Any, where: str) -> Any:
        raise TypeError(f"{where}: no check for the annotation {hint!r}")
    return unknown


def _fits(hint: Any) -> Optional[Callable[[Any], bool]]:
    """Whether a JSON value is of ``hint`` as it is, for annotations whose values are JSON's own (numbers,
    strings, one word of a Literal, and those or null); None for the others, which ``reader`` converts."""
    if hint is Any or hint is object:
        return lambda v: True
    if hint in _SCALARS:
        return _SCALARS[hint][0]
    origin = typing.get_origin(hint)
    if origin is Literal:
        words = typing.get_args(hint)
        return lambda v: any(v == a and type(v) is type(a) for a in words)
    if origin is Union:
        args = typing.get_args(hint)
        arms = [_fits(a) for a in args if a is not type(None)]
        if len(arms) != 1 or arms[0] is None or len(args) != 2:
            return None
        one = arms[0]
        return lambda v: v is None or one(v)
    return None


def _spelled_reader(hint: Any) -> Reader:
    inner, sp = _spelled(hint)
    read = reader(inner)
    if sp is None:
        return read
    word, value = sp.word, sp.value
    fits = _fits(inner)

    def spelled(v: Any, where: str) -> Any:
        if v == word and isinstance(v, str):
            return value
        if inner is Any and isinstance(v, list):
            return [spelled(x, where) for x in v]
        if fits is not None and not fits(v):
            raise _refuse(hint, v, where)  # 'a number or "inf"'
        return read(v, where)
    return spelled


def _union_reader(hint: Any) -> Reader:
    args = typing.get_args(hint)
    nullable = type(None) in args
    arms = [(a, reader(a)) for a in args if a is not type(None)]

    def union(v: Any, where: str) -> Any:
        if v is None:
            if nullable:
                return None
            raise _refuse(hint, v, where)
        for a, read in arms:  # the first arm of the value's JSON kind
            if _kind_fits(a, v):
                return read(v, where)
        raise _refuse(hint, v, where)
    return union


def _list_reader(hint: Any) -> Reader:
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple:
        def as_tuple(v: Any, where: str) -> Any:
            if not isinstance(v, list):
                raise _refuse(hint, v, where)
            return tuple(v)
        return as_tuple
    item = args[0] if args else Any
    fits = _fits(item)
    read = reader(item)

    def items(v: Any, where: str) -> Any:
        if not isinstance(v, list):
            raise _refuse(hint, v, where)
        if fits is not None and all(map(fits, v)):  # a list of numbers or strings: checked in one pass
            return list(v)
        return [read(x, f"{where}[{i}]") for i, x in enumerate(v)]
    return items


def _dict_reader(hint: Any) -> Reader:
    args = typing.get_args(hint)
    value = args[1] if len(args) == 2 else Any
    read = reader(value)
    fits = _fits(value)

    def mapping(v: Any, where: str) -> Any:
        if not isinstance(v, dict):
            raise _refuse(hint, v, where)
        if fits is not None and all(map(fits, v.values())):
            return dict(v)
        return {k: read(x, f"{where}.{k}") for k, x in v.items()}
    return mapping


def _kind_fits(hint: Any, v: Any) -> bool:
    """Whether ``v`` is of the JSON kind ``hint`` takes (which arm of a union it is meant for)."""
    if hint is Any or hint is object:
        return True
    if hint in _SCALARS:
        return _SCALARS[hint][0](v)
    origin = typing.get_origin(hint)
    if origin is Literal:
        return any(v == a and type(v) is type(a) for a in typing.get_args(hint))
    if origin is Annotated:
        inner, sp = _spelled(hint)
        return (sp is not None and v == sp.word and isinstance(v, str)) or _kind_fits(inner, v)
    if _is_record(hint) or origin in (dict, collections.abc.Mapping) or hint is dict:
        return isinstance(v, dict)
    if origin in (list, tuple) or hint is list:
        return isinstance(v, list)
    if _is_enum(hint):
        return isinstance(v, str)
    return True


# -- writing a field's value as JSON ----------------------------------------------------------------------------
_JSON_SCALARS = (str, int, float, bool, type(None))


def writer(hint: Any) -> Writer:
    """How a field of the annotation ``hint`` is written as a JSON value (worked out once per annotation)."""
    try:
        w = _WRITERS.get(hint)
    except TypeError:
        return _writer(hint)
    if w is None:
        w = _WRITERS[hint] = _writer(hint)
    return w


def _writer(hint: Any) -> Writer:
    origin = typing.get_origin(hint)
    if origin is Annotated:
        inner, sp = _spelled(hint)
        if sp is not None:
            return _spelled_writer(sp, writer(inner))
        return writer(inner)
    if origin is Union:
        arms = [writer(a) for a in typing.get_args(hint) if a is not type(None)]
        if len(arms) == 1 and arms[0] is not plain:
            one = arms[0]
            return lambda v: None if v is None else one(v)
        return plain
    if hint in _SCALARS or origin is Literal:
        return lambda v: v if type(v) in _JSON_SCALARS else plain(v)
    args = typing.get_args(hint)
    if origin is list and args:
        if args[0] in _SCALARS:
            return lambda v: list(v) if type(v) is list else plain(v)  # a list of numbers or strings: copied whole
        item = writer(args[0])
        if item is not plain:
            return lambda v: [item(x) for x in v] if type(v) is list else plain(v)
    if origin in (dict, collections.abc.Mapping) and len(args) == 2:
        value = writer(args[1])
        if value is not plain:
            return lambda v: {k: value(x) for k, x in v.items()} if type(v) is dict else plain(v)
    return plain


def _spelled_writer(sp: Spelled, then: Writer) -> Writer:
    def spelled(v: Any) -> Any:
        if v == sp.value and type(v) is type(sp.value):
            return sp.word
        if isinstance(v, list):
            return [spelled(x) for x in v]
        return then(v)
    return spelled


def show(v: Any) -> str:
    """A value as an error message quotes it: short, and an object or a list by its kind."""
    s = repr(v) if not isinstance(v, (dict, list)) else ("an object" if isinstance(v, dict) else "a list")
    return s if len(s) <= 40 else s[:37] + "..."
