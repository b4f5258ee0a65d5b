"""Reading nccl-tests' text output, the yardstick the collectives benchmark is compared with.

Each ``*_perf`` binary prints a header of ``#`` lines, then one line per message size:

    size count type redop [root] time algbw busbw #wrong time algbw busbw #wrong

the first four figures for the out-of-place call and the last four for the in-place one; times are
in microseconds and bandwidths in GB/s. Older releases have no ``root`` column; ``#wrong`` is
``N/A`` when validation is off. Anything else (NCCL INFO lines, warnings, the summary) is skipped.
With ``-N CYCLES`` the whole sweep is printed once per cycle; ``by_size`` folds the cycles together.
The same layout comes out with ``-G N`` (calls captured in a CUDA graph and replayed N times).
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass

from perfstack.errors import InputError

# binary name -> the name the collectives benchmark uses
OPS = {"all_reduce_perf": "all_reduce", "all_gather_perf": "all_gather", "reduce_scatter_perf": "reduce_scatter",
       "broadcast_perf": "broadcast", "alltoall_perf": "all_to_all", "sendrecv_perf": "sendrecv"}
_INT = re.compile(r"\d+")


@dataclass(frozen=True)
class Row:
    size: int  # bytes, as nccl-tests prints them (the whole array for all_gather / reduce_scatter)
    count: int
    dtype: str
    time_us: float  # out-of-place
    algbw: float
    busbw: float
    wrong: int | None  # None: not validated
    time_us_in_place: float
    busbw_in_place: float


def _number(tok: str, what: str, line_no: int) -> float:
    try:
        v = float(tok)
    except ValueError:
        raise InputError(f"nccl-tests output line {line_no}: {what} {tok!r} is not a number") from None
    if not math.isfinite(v) or v < 0:
        raise InputError(f"nccl-tests output line {line_no}: {what} {tok!r} is not a finite, non-negative number")
    return v


def _wrong(tok: str, line_no: int) -> int | None:
    if tok == "N/A":
        return None
    return int(_number(tok, "#wrong", line_no))


def parse(text: str) -> list[Row]:
    """The per-size rows of one binary's output, in the order printed."""
    rows = []
    for line_no, line in enumerate(text.splitlines(), 1):
        tok = line.split()
        if len(tok) < 2 or line.lstrip().startswith("#") or not (_INT.fullmatch(tok[0]) and _INT.fullmatch(tok[1])):
            continue
        if len(tok) not in (12, 13):
            raise InputError(f"nccl-tests output line {line_no}: expected 12 or 13 columns, found {len(tok)}",
                             hint="run the *_perf binary without per-iteration reporting")
        t = tok[-8:]
        rows.append(Row(size=int(tok[0]), count=int(tok[1]), dtype=tok[2],
                        time_us=_number(t[0], "time", line_no), algbw=_number(t[1], "algbw", line_no),
                        busbw=_number(t[2], "busbw", line_no), wrong=_wrong(t[3], line_no),
                        time_us_in_place=_number(t[4], "time", line_no),
                        busbw_in_place=_number(t[6], "busbw", line_no)))
    return rows


@dataclass(frozen=True)
class Sized:
    """One size's figures over every cycle a log holds (``-N CYCLES`` prints each size once per cycle).

    Each cycle's time is nccl-tests' own average over its ``-n`` back-to-back calls; the figure
    compared is the median over cycles, and the smallest and largest cycle show the spread."""
    size: int
    cycles: int
    time_us: float  # out-of-place, median over cycles
    time_us_range: tuple[float, float]
    busbw: float
    time_us_in_place: float
    time_us_in_place_range: tuple[float, float]
    busbw_in_place: float
    wrong: int | None  # the most wrong elements any cycle reported; None: not validated


def by_size(rows: list[Row]) -> dict[int, Sized]:
    """Rows of one log (any number of cycles) -> one summary per size."""
    groups: dict[int, list[Row]] = {}
    for r in rows:
        groups.setdefault(r.size, []).append(r)
    out = {}
    for size, rs in groups.items():
        oop, inp = [r.time_us for r in rs], [r.time_us_in_place for r in rs]
        checked = [r.wrong for r in rs if r.wrong is not None]
        out[size] = Sized(size=size, cycles=len(rs), time_us=statistics.median(oop), time_us_range=(min(oop), max(oop)),
                          busbw=statistics.median(r.busbw for r in rs), time_us_in_place=statistics.median(inp),
                          time_us_in_place_range=(min(inp), max(inp)),
                          busbw_in_place=statistics.median(r.busbw_in_place for r in rs),
                          wrong=max(checked) if checked else None)
    return out
