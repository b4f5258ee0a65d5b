"""A load test as CSV, beside its JSON: one row per level, and one row per request.

Spreadsheets run a cell that starts with ``=``, ``+``, ``-``, ``@`` or a control character as a formula, and
the error details, model names and URLs in a Run come from the server: such a text cell is written with a
leading apostrophe, which spreadsheets show as text. Figures are written as numbers (empty when absent),
loads as in the Run (``inf`` for everything at once).
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any, Iterable, Optional, Sequence

from perfstack.loadtest.metrics import CI_FIGURES
from perfstack.records.loadtest import Dist, Level, LoadTest

DISTS = ("ttft", "tpot", "itl", "e2e")
STATS = ("mean", "median", "p90", "p99", "min", "max")
RATES = ("duration_s", "request_throughput", "output_throughput", "total_throughput", "goodput", "slo_attainment",
         "concurrency_mean", "mean_input_tokens", "mean_output_tokens")
LEVEL_HEADERS = (["mode", "load", "probe", "slo_search", "runs", "interrupted", "completed", "failed", *RATES]
                 + [f"{d}_{s}_ms" for d in DISTS for s in STATS]
                 + [f"ci_{f.replace('.', '_')}_{end}" for f in CI_FIGURES for end in ("low", "high")]
                 + ["ci_coverage", "errors"])
REQUEST_HEADERS = ["mode", "load", "run", "warmup", "start_s", "ttft_ms", "tpot_ms", "e2e_ms", "output_tokens",
                   "input_tokens", "tokens_from", "chunks", "error", "detail", "itl_ms"]
_FORMULA = ("=", "+", "-", "@", "\t", "\r", "\n")


def cell(v: Any) -> Any:
    """A value as a CSV cell: numbers as they are (infinity as "inf"), text inert in a spreadsheet."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "inf" if math.isinf(v) and v > 0 else ("" if not math.isfinite(v) else repr(v))
    if isinstance(v, int):
        return v
    s = " ".join(str(v).split()) if "\n" in str(v) or "\r" in str(v) else str(v)
    return "'" + s if s.startswith(_FORMULA) else s


def _write(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(headers)
    for row in rows:
        w.writerow([cell(v) for v in row])
    return buf.getvalue()


def _dist(d: Optional[Dist]) -> list[Optional[float]]:
    return [getattr(d, s) if d is not None else None for s in STATS]


def _level_row(lv: Level) -> list[Any]:
    s = lv.summary
    row: list[Any] = [lv.mode, lv.load, lv.probe, lv.bisect, lv.repeats, lv.interrupted, s.completed, s.failed]
    row += [getattr(s, r) for r in RATES]
    for d in DISTS:
        row += _dist(getattr(s, d))
    for f in CI_FIGURES:
        ci = lv.ci.get(f)
        row += list(ci[:2]) if ci and len(ci) >= 2 else [None, None]
    row += [lv.ci_coverage, ";".join(f"{k}={n}" for k, n in sorted(s.errors.items()))]
    return row


def levels_csv(lt: LoadTest) -> str:
    return _write(LEVEL_HEADERS, (_level_row(lv) for lv in lt.levels))


def requests_csv(lt: LoadTest) -> str:
    """Every request of every level, warm-ups included (marked), in the order they were recorded."""
    rows = ([lv.mode, lv.load, r.repeat, r.warmup, r.start_s, r.ttft_ms, r.tpot_ms, r.e2e_ms, r.output_tokens,
             r.input_tokens, r.tokens_from, len(r.itl_ms) + (r.ttft_ms is not None), r.error, r.detail,
             " ".join(f"{g:.3f}" for g in r.itl_ms)] for lv in lt.levels for r in lv.requests)
    return _write(REQUEST_HEADERS, rows)


def paths(stem: str) -> tuple[str, str]:
    """The two files ``--csv STEM`` writes."""
    return f"{stem}.levels.csv", f"{stem}.requests.csv"
