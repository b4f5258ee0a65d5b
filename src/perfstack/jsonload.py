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
MAX_FILE_BYTES = 512 * 2**20  # larger than any Run perfstack writes by two orders of magnitude


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
    try:
        data = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except RecursionError:
        raise InputError(f"{what} nests too deeply to read (perfstack reads {MAX_DEPTH} levels)") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{what} is not valid JSON (line {e.lineno})") from None
    check(data, what)
    return data


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
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise InputError(f"{what} {p} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read {what} {p}: {e}") from None
    return loads(text, f"{what} {p}")


def check(data: Any, what: str) -> None:
    """Walk the parsed document (without recursion) and refuse the first bad value, by its path."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        v, path, depth = stack.pop()
        if isinstance(v, _Refused):
            raise InputError(f"{what}: field {path or '(top)'} is {v.why}")
        if isinstance(v, (dict, list)):
            if depth >= MAX_DEPTH:
                raise InputError(f"{what}: field {path or '(top)'} nests deeper than {MAX_DEPTH} levels")
            items = v.items() if isinstance(v, dict) else enumerate(v)
            for k, x in items:
                sub = f"{path}.{k}" if isinstance(v, dict) and path else (str(k) if isinstance(v, dict)
                                                                           else f"{path}[{k}]")
                stack.append((x, sub, depth + 1))
