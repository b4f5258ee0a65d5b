"""The fleet's HTML report: the ranked nodes, a nodes × figures heat map per SKU, the drift table,
the figures and findings that single nodes out. One self-contained page, like every report."""

from __future__ import annotations

from typing import Any

from perfstack.records.fleet import FleetAnalysis, HeatMap
from perfstack.report.fleet_view import FleetView
from perfstack.report.numbers import num
from perfstack.report.html_blocks import Section, code, e, page, table

MAX_ROWS = 400  # heat map rows drawn; the flagged nodes come first, the JSON has every row
Z_FULL = 10.0  # a cell this many robust standard deviations below the median is drawn fully red


def _short(v: Any, n: int = 60) -> str:
    s = str(v)
    return s if len(s) <= n else s[: n - 1] + "…"


def _cell(z: float | None) -> str:
    if z is None:
        return '<td class="hm na" title="not measured"></td>'
    # red for worse than the fleet, blue for better; strength grows with the robust z-score
    level = min(abs(z) / Z_FULL, 1.0)
    alpha = 0.08 + 0.82 * level if abs(z) >= 2 else 0.0
    color = f"rgba(192,57,43,{alpha:.2f})" if z < 0 else f"rgba(40,116,166,{alpha:.2f})"
    return f'<td class="hm" style="background:{color}" title="z {z:+.1f}">{z:+.0f}</td>' if alpha else \
        f'<td class="hm" title="z {z:+.1f}"></td>'


def _heatmap(h: HeatMap, flagged: list[str]) -> str:
    order = {n: i for i, n in enumerate(flagged)}
    rows = sorted(h.rows, key=lambda r: (order.get(r.node, len(order)), r.node, r.subject))
    head = "".join(f'<th class="hmh" title="{e(f.figure)}: median {e(num(f.median, f.unit))}, spread '
                   f'{f.spread_pct:.1f}%"><span>{e(f.figure)}</span></th>' for f in h.figures)
    body = "".join(f'<tr><th class="hmn">{e(r.node)}{" " + e(r.subject) if r.subject else ""}</th>'
                   + "".join(_cell(z) for z in r.z) + "</tr>" for r in rows[:MAX_ROWS])
    more = (f'<p class="muted">{len(rows) - MAX_ROWS} more rows in the Run JSON.</p>' if len(rows) > MAX_ROWS else "")
    return (f"<h3>{e(h.sku)}</h3><div class=\"hmwrap\"><table class=\"heatmap\" data-sku=\"{e(h.sku)}\"><thead><tr>"
            f"<th></th>{head}</tr></thead><tbody>{body}</tbody></table></div>{more}")


STYLE = """<style>
.hmwrap { overflow-x:auto; } table.heatmap { width:auto; border-collapse:collapse; font-size:11px; }
table.heatmap td.hm { width:26px; min-width:26px; text-align:center; padding:1px; border:1px solid var(--grid); }
table.heatmap td.na { background:repeating-linear-gradient(45deg, var(--panel), var(--panel) 3px, var(--bg) 3px, var(--bg) 6px); }
table.heatmap th.hmn { white-space:nowrap; font-weight:600; padding-right:8px; background:none; }
table.heatmap th.hmh { height:150px; vertical-align:bottom; padding:2px; background:none; }
table.heatmap th.hmh span { writing-mode:vertical-rl; transform:rotate(180deg); white-space:nowrap; font-weight:500; }
</style>"""


def render_fleet_html(v: FleetView) -> str:
    a, s = v.analysis, v.summary
    sub = (f"{e(v.source)} · {s['nodes']} nodes, {s['ok']} reported"
           + (f", {s['failed']} failed" if s["failed"] else "") + " · "
           + e("; ".join(f"{k} ×{len(v)}" for k, v in a.skus.items())))
    sections: list[Section] = [("", "", STYLE), _nodes(a, s)]
    for part in (_heatmaps, _drift, _outliers, _uneven, _comms, _failed):
        section = part(a)
        if section is not None:
            sections.append(section)
    sections.append(_members(a))
    return page(v.title, sub, sections)


def _nodes(a: FleetAnalysis, s: dict[str, Any]) -> Section:
    chips = "".join(f'<span class="chip"><span class="sev {k}">{k}</span> {s["by_severity"].get(k, 0)} nodes</span>'
                    for k in ("critical", "warning", "info"))
    chips += (f'<span class="chip">{s["drifted_keys"]} drifted settings</span>'
              f'<span class="chip">{s["slow"]} slow figures</span>'
              f'<span class="chip">{s["uneven_findings"]} findings on a minority of nodes</span>')
    rank_rows = [(f'<span class="sev {e(r.severity)}">{e(r.severity)}</span>', f"<b>{e(r.node)}</b>",
                  "<br>".join(e(_short(x, 140)) for x in r.reasons)) for r in a.ranking]
    return ("nodes", "Nodes", "<h2>Fix these nodes first</h2>" + f'<div class="chips">{chips}</div>'
            + (table(("severity", "node", "why"), rank_rows) if rank_rows else
               '<p class="muted">No node stands out from its SKU.</p>'))


def _heatmaps(a: FleetAnalysis) -> Section | None:
    if not a.heatmaps:
        return None
    flagged = [r.node for r in a.ranking]
    return ("heatmap", "Heat map", "<h2>Nodes × figures</h2>"
            '<p class="muted">Each cell is the robust z-score of that node\'s (or GPU\'s) figure against '
            "its SKU's median: the distance over the fleet's spread and the figure's own noise together. "
            "Red is worse, blue better; cells within ±2 are blank.</p>"
            + "".join(_heatmap(h, flagged) for h in a.heatmaps))


def _drift(a: FleetAnalysis) -> Section | None:
    if not a.drift:
        return None
    rows = [(e(d.sku), e(d.category), f"{code(d.key)}",
             "<br>".join(f"{e(_short(g.value))}: {e(', '.join(g.nodes[:8]))}"
                         + (f" (+{len(g.nodes) - 8})" if len(g.nodes) > 8 else "") for g in d.odd),
             "no majority" if d.split else f"{e(_short(d.baseline))} ({d.baseline_count} nodes)") for d in a.drift]
    return ("drift", "Drift", "<h2>Configuration drift</h2>"
            + table(("SKU", "category", "setting", "odd value: nodes", "majority"), rows)
            + (f'<p class="muted">{a.identity_keys} settings differ on every node (identities, not '
               "drift) and are not listed.</p>" if a.identity_keys else ""))


def _outliers(a: FleetAnalysis) -> Section | None:
    if not a.outliers:
        return None
    rows = [(e(o.figure), e(o.node) + (f" {e(o.subject)}" if o.subject else ""), e(num(o.value, o.unit)),
             e(num(o.median, o.unit)), f'<span class="{"regressed" if o.slow else "improved"}">'
             f"{o.deviation_pct:+.1f}%</span>", f"{o.z:+.1f}", f"{o.noise_pct:.2f}%", f"{o.fleet_spread_pct:.2f}%")
            for o in a.outliers]
    return ("outliers", "Outliers", "<h2>Figures that stand out</h2>"
            + table(("figure", "node", "value", "SKU median", "vs median", "z", "own noise",
                      "fleet spread"), rows, num_cols=(2, 3, 4, 5, 6, 7)))


def _uneven(a: FleetAnalysis) -> Section | None:
    if not (a.uneven or a.shared):
        return None
    rows = [(f'<span class="sev {e(u.severity)}">{e(u.severity)}</span>', f"{code(u.id)}", e(u.title),
             f"{len(u.nodes)} of {u.of}", e(", ".join(u.nodes[:12]) + (" …" if len(u.nodes) > 12 else "")),
             e(_short(u.evidence.get(u.nodes[0], ""), 160))) for u in a.uneven]
    html = "<h2>Findings on some nodes only</h2>" + table(("severity", "finding", "title", "nodes", "which",
                                                             "evidence (first node)"), rows)
    if a.shared:
        html += ('<p class="muted">On every node (fix once, in the image or the node setup): '
                 + e(", ".join(sorted({x.id for x in a.shared}))) + "</p>")
    return ("findings", "Findings", html)


def _comms(a: FleetAnalysis) -> Section | None:
    c = a.comms
    if c is None:
        return None
    names = c.names
    fleet = c.fleet_gbps
    head = (f"<p>{len(names)} machines, {e(c.backend)}, one rank each; fleet busbw "
            + (f"<b>{fleet:.2f} GB/s</b>" if fleet is not None else "not measured")
            + f"; {e(c.method)}.</p>")
    items = [e(s.text) for s in c.suspects]
    items += [f"{e(names.get(m, m))}: {e(why)}" for m, why in c.failed.items()]
    rows = []
    for g in c.groups:
        best = max((p.busbw_gbps for p in g.points), default=None)
        rows.append((e(g.why), e(", ".join(names.get(m, m) for m in g.machines)),
                     e(g.error) if g.error else (f"{best:.2f} GB/s" if best is not None else "")))
    notes = "".join(f"<li>{e(n)}</li>" for n in c.notes)
    return ("allreduce", "All-reduce", "<h2>All-reduce between machines</h2>" + head
            + (f'<ul class="regressed">{"".join(f"<li>{x}</li>" for x in items)}</ul>' if items else "")
            + table(("all-reduce", "machines", "busbw (best of sweep)"), rows)
            + (f'<ul class="muted">{notes}</ul>' if notes else ""))


def _failed(a: FleetAnalysis) -> Section | None:
    failed = [m for m in a.members if m.status != "ok"]
    if not failed:
        return None
    return ("failed", "Not compared", "<h2>Did not report, or not compared</h2>"
            + table(("node", "status", "reason", "source"),
                     ((e(m.name), e(m.status), e(m.reason), e(m.source)) for m in failed)))


def _members(a: FleetAnalysis) -> Section:
    notes = "".join(f"<li>{e(n)}</li>" for n in a.notes)
    members = table(("node", "SKU", "GPUs", "perfstack", "Runs", "figures", "findings"),
                     ((e(m.name), e(m.sku), e(m.gpus), e(m.tool_version), e(m.command), str(m.figures),
                       str(m.findings)) for m in a.members), num_cols=(5, 6))
    return ("members", "Members", (f"<h2>Notes</h2><ul>{notes}</ul>" if notes else "")
            + f"<details><summary>All {len(a.members)} nodes</summary>{members}</details>")
