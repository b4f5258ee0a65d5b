"""The building blocks of every Markdown document perfstack writes (the Run's, the load test's, the diff's):
a table cell and a line made inert, a GitHub table, a row of the before/after table."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from perfstack.records.diff import MeasurementDelta
from perfstack.report.numbers import num
from perfstack.report.inert import md_code, md_text


def cell(v: Any) -> str:
    """One table cell: any value as inert text (line breaks as <br>), or Markdown perfstack wrote (Md)."""
    return md_text(v, breaks=True)


def t(v: Any) -> str:
    """Outside data in a line of Markdown (a heading, a paragraph, a blockquote): inert."""
    return md_text(v)


def table(head: Sequence[str], rows: Iterable[Sequence[Any]], right: Iterable[int] = ()) -> str:
    r = set(right)
    lines = ["| " + " | ".join(cell(h) for h in head) + " |",
             "|" + "|".join("---:" if i in r else "---" for i in range(len(head))) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def delta_row(m: MeasurementDelta) -> list[str]:
    ci = (f"{m.ci_low_pct:+.1f}% … {m.ci_high_pct:+.1f}%" if m.ci_low_pct is not None and m.ci_high_pct is not None
          else "—")
    mark = {"improved": "✅ improved", "regressed": "❌ regressed"}.get(m.verdict, m.verdict)
    return [md_code(m.name), num(m.before, m.unit), num(m.after, m.unit),
            f"{m.delta_pct:+.1f}%" if m.delta_pct is not None else "—", ci,
            f"{m.p_value:.2g}" if m.p_value is not None else "—",
            mark + (" ⚠ hardware differs" if m.hardware_bound else ""), m.note]
