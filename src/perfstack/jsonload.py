"""JSON from elsewhere (saved Runs, bundle files, model configs), parsed with bounds.

The standard parser accepts what later code cannot take: NaN and Infinity, 1e400 (infinity),
5000-digit integers (Python refuses to convert them, and 10**300 overflows every float formula)
and nesting deep enough to exhaust the stack. ``loads`` refuses all of them with an InputError
that names the file and the field, so a bad file is exit 2, never an internal error later on.
``read`` also bounds the file: only a regular file (a FIFO would block, /dev/zero never ends) of at
most ``limit`` bytes, checked before reading and again while reading (a sparse file is small on disk,
huge when read; parsing text takes several times its size in memory).
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from perfstack.errors import InputError

MAX_DEPTH = 64  # perfstack's own files nest fewer than 10 levels
MAX_INT_DIGITS = 30  # beyond 10**30 no count, size or time means anything
# Loading a Run takes 8-9x its size in memory (parsed values, then the typed records; measured by
# benchmarks/run_load_memory.py), more for shapes of many small objects: a 2-core, 8 GB box can give a
# load about half its memory, so 256 MiB (2-4 GiB to load). The largest Runs perfstack writes, a load
# test sweep of a hundred thousand requests, are tens of MiB.
MAX_FILE_BYTES = 256 * 2**20


class _Refused:
    """Put in place of a value the parser met, so that the walk can name the field it was in."""

    def __init__(self, why: str) -> None:
        self.why = why


def _int(text: str) -> Any:
    digits = text.lstrip("-")
    return int(text) if len(digits) <= MAX_INT_DIGITS else _Refused(f"an integer of {len(digits)} digits")


def _constant(name: str) -> Any:
    return _Refused(f"{name}, which is not a number")


def _float(text: str) -> Any:
    v = float(text)
    return v if math.isfinite(v) else _Refused(f"{text}, too large for a number")


def loads(text: str, what: str) -> Any:
    """Parse ``text``; ``what`` names the file in messages ("Run file run.json")."""
    return _loads([text], what)


def _loads(box: list[str], what: str) -> Any:
    """``loads`` of the one text in ``box``, taken out of it: once parsed, the text is freed (a large Run's
    text is as big again as its file) before the values are checked and typed."""
    try:
        data = json.loads(box.pop(), parse_int=_int, parse_float=_float, parse_constant=_constant)
    except MemoryError:
        raise too_big(what) from None
    except RecursionError:
        raise InputError(f"{what} nests too deeply to read (perfstack reads {MAX_DEPTH} levels)") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{what} is not valid JSON (line {e.lineno})") from None
    check(data, what)
    return data


def too_big(what: str) -> InputError:
    """The error for a file that parses, or would, beyond the memory this process may use."""
    return InputError(f"{what} is too large to load in the memory this process may use",
                      hint="load it on a machine with more memory")


def read(path: str | Path, what: str, limit: int = MAX_FILE_BYTES) -> Any:
    """Read and parse the JSON file at ``path``; ``what`` names its kind in messages ("Run file")."""
    p = Path(path)
    too_large = InputError(f"{what} {p} is larger than {limit / 2**20:g} MiB; not read")
    try:
        st = os.stat(p)
        if stat.S_ISDIR(st.st_mode):
            raise InputError(f"{what} {p} is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{what} {p} is not a regular file (a pipe, socket or device)",
                             hint="save it to a file first")
        if st.st_size > limit:
            raise too_large
        with open(p, "rb") as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise too_large
        box = [data.decode("utf-8")]
        del data  # the bytes are not kept beside their text
    except FileNotFoundError:
        raise InputError(f"{what} {p} does not exist") from None
    except MemoryError:
        raise too_big(f"{what} {p}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read {what} {p}: {e}") from None
    return _loads(box, f"{what} {p}")


def check(data: Any, what: str) -> None:
    """Walk the parsed document depth first, without recursion, and refuse the first bad value by its path.
    The walk holds one iterator per level of nesting and the keys that lead to it, never a path per
    element: a Run of a hundred million values is checked in the memory its parse already took."""
    if isinstance(data, _Refused):
        raise InputError(f"{what}: field (top) is {data.why}")
    if not isinstance(data, (dict, list)):
        return
    levels: list[tuple[Any, Any]] = [(data, _items(data))]
    keys: list[Any] = []  # keys[i]: the key in levels[i]'s container that leads to levels[i + 1]
    while levels:
        container, it = levels[-1]
        for k, x in it:
            if isinstance(x, _Refused):
                raise InputError(f"{what}: field {_path(levels, keys, k)} is {x.why}")
            if isinstance(x, (dict, list)):
                if len(levels) >= MAX_DEPTH:
                    raise InputError(f"{what}: field {_path(levels, keys, k)} nests deeper than {MAX_DEPTH} levels")
                if x:
                    keys.append(k)
                    levels.append((x, _items(x)))
                    break
        else:
            levels.pop()
            if keys:
                keys.pop()


def _items(v: Any) -> Any:
    return iter(v.items()) if isinstance(v, dict) else enumerate(v)


def _path(levels: list[tuple[Any, Any]], keys: list[Any], last: Any) -> str:
    """'a.b[3].c': the keys from the top to ``last``, made only for the message."""
    out = ""
    for (container, _), k in zip(levels, keys + [last]):
        out += f"[{k}]" if isinstance(container, list) else (f".{k}" if out else str(k))
    return out
