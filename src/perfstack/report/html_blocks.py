"""The building blocks of every HTML page perfstack writes (the Run's, the load test's, the fleet's, the
diff's): the escaping of a value, a table of escaped cells, a finding, a row of the before/after table,
and the page shell around the sections (``_template.html``, string.Template: no template engine)."""

from __future__ import annotations

import re

from functools import lru_cache
from importlib import resources
from string import Template
from typing import Any, Iterable, Sequence

from perfstack import __version__
from perfstack.records.diff import MeasurementDelta
from perfstack.model import Finding
from perfstack.report.numbers import num
from perfstack.report.inert import html_text as escape


@lru_cache(maxsize=1)
def _template() -> Template:
    return Template(resources.files("perfstack.report").joinpath("_template.html").read_text(encoding="utf-8"))


def e(v: Any) -> str:
    return escape(str(v)) if v is not None else ""


SEPARATORS = re.compile(r"([._/:,=-])")


def code(v: Any) -> str:
    """A name (a figure, a check, a path, a kernel) as code that a narrow column breaks after its
    separators ('collective.<wbr>all_reduce.<wbr>1GiB'), never inside a word: the page's style lets code
    break only where a <wbr> allows it, so a column is at least as wide as a name's longest part."""
    return "<code>" + SEPARATORS.sub(r"\1<wbr>", e(v)) + "</code>"


def table(head: Sequence[str], rows: Iterable[Sequence[str]], num_cols: Iterable[int] = ()) -> str:
    """A table from already-escaped cells."""
    nc = set(num_cols)
    th = "".join(f'<th class="num">{h}</th>' if i in nc else f"<th>{h}</th>" for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(f'<td class="num">{c}</td>' if i in nc else f"<td>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


Section = tuple[str, str, str]  # (anchor, title in the page's navigation, HTML); "" anchors are not listed


def page(title: str, subtitle: str, sections: list[Section]) -> str:
    toc = "".join(f'<a href="#{sid}">{e(name)}</a>' for sid, name, _ in sections if name)
    body = "\n".join(f'<section id="{sid}">{html}</section>' if sid else html for sid, _, html in sections)
    return _template().substitute(title=e(title), subtitle=subtitle, toc=toc, body=body, version=e(__version__))


def finding(f: Finding) -> str:
    subject = f' <span class="muted">[{e(f.subject)}]</span>' if f.subject else ""
    rows = [("observed", e(f.evidence) + (f' <span class="muted">(read from {e(", ".join(dict.fromkeys(f.sources)))})</span>'
                                           if f.sources else ""))]
    if f.why:
        rows.append(("why", e(f.why)))
    rows.append(("fix", ("<b>on the host:</b> " if f.host_action else "") + e(f.fix)))
    if f.recoverable_ms is not None:
        rows.append(("recoverable", f"{num(f.recoverable_ms)} ms per step"
                     + (f" ({f.recoverable_pct:.0f}%)" if f.recoverable_pct is not None else "")))
    if f.confidence:
        rows.append(("confidence", e(f.confidence)))
    cmds = ""
    if f.fix_commands:
        cmds = ("<details><summary>commands</summary><pre class=\"mono\">"
                + e("\n".join(f.fix_commands)) + "</pre></details>")
    dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows)
    return (f'<div class="finding {e(f.severity.value)}" data-finding="{e(f.id)}"><div class="head">'
            f'<span class="sev {e(f.severity.value)}">{e(f.severity.value)}</span> {code(f.id)} '
            f"{e(f.title)}{subject}</div><dl>{dl}</dl>{cmds}</div>")


def delta_row(m: MeasurementDelta) -> list[str]:
    ci = (f"{m.ci_low_pct:+.1f}% … {m.ci_high_pct:+.1f}%" if m.ci_low_pct is not None and m.ci_high_pct is not None
          else "—")
    verdict = f'<span class="{e(m.verdict.replace(" ", "-"))}">{e(m.verdict)}</span>'
    hw = " ⚠ hardware differs" if m.hardware_bound else ""
    return [f"{code(m.name)}", e(num(m.before, m.unit)), e(num(m.after, m.unit)),
            e(f"{m.delta_pct:+.1f}%" if m.delta_pct is not None else "—"), e(ci),
            e(f"{m.p_value:.2g}" if m.p_value is not None else "—"), verdict + e(hw), e(m.note)]
