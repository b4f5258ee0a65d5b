"""A load test's HTML report: the level table, latency-against-throughput curves, why, the server's view.

One self-contained page in the shell every perfstack report uses (``html_blocks.page``); every string from the
Run is escaped here, the numbers come formatted from ``loadtest_view``.
"""

from __future__ import annotations

from perfstack.report import charts
from perfstack.report.html_blocks import e, finding, page, table
from perfstack.report.loadtest_view import REPEAT_HEADERS, LoadtestView


def _levels(v: LoadtestView) -> str:
    parts = [f"<h2>Load levels</h2><p>{e(v.workload)}</p>",
             table([e(h) for h in v.headers], ([e(c) for c in row] for row in v.rows), num_cols=range(1, 9))]
    if v.repeats:
        parts.append("<p>Median over the runs (interval across them; how often such an interval holds the true "
                     "median):</p>" + table([e(h) for h in REPEAT_HEADERS], ([e(c) for c in row] for row in v.repeats),
                                            num_cols=range(1, 8)))
    if v.sweep:
        parts.append(f'<p class="sweep"><b>{e(v.sweep)}</b></p>')
    if v.interrupted:
        parts.append('<div class="banner notice">Interrupted: this Run holds the levels measured so far.</div>')
    parts += [f'<p class="muted">Note: {e(n)}</p>' for n in v.notes]
    return "".join(parts)


def _curves(v: LoadtestView) -> str:
    parts = ["<h2>Latency against throughput</h2>",
             '<p class="muted">One point per load level, joined in load order: past the knee, more load buys '
             "latency, not throughput. Dashed horizontal lines are the SLO's objectives (its TPOT objective is "
             "judged per request).</p>"]
    for c in v.curves:
        parts.append(f"<h3>{e(c.title)}</h3>")
        parts.append(charts.xy_chart(c.series, c.title, c.x_label, c.y_label, c.hlines, c.vlines, kind=c.kind,
                                     label_points=True))
    return "".join(parts)


def _why(v: LoadtestView) -> str:
    if not v.findings:
        return '<h2>Why</h2><p class="muted">No findings.</p>'
    return "<h2>Why</h2>" + "".join(finding(f) for f in v.findings)


def _server(v: LoadtestView) -> str:
    parts = ["<h2>The server and the client</h2>"]
    if v.server:
        parts.append("<h3>What the server's metrics endpoint said (peaks per level)</h3>" + table(
            ("load", "running", "waiting", "KV cache", "preemptions"), ([e(c) for c in r] for r in v.server),
            num_cols=(1, 2, 3, 4)))
    if v.errors:
        parts.append("<h3>Failed requests by kind</h3>" + table(
            ("load", "kind", "requests", "for example"), ([e(c) for c in r] for r in v.errors), num_cols=(2,)))
    if v.client:
        parts.append("<h3>The client's own load</h3>" + table(
            ("load", "CPU (busiest process)", "timer lag p99", "CPU per chunk", "processes"),
            ([e(c) for c in r] for r in v.client), num_cols=(1, 2, 3, 4)))
    parts.append("<details><summary>Run metadata</summary>" + table(("", ""), ((e(k), e(x)) for k, x in v.meta))
                 + "</details>")
    return "".join(parts)


def render_loadtest_html(v: LoadtestView) -> str:
    sections = [("levels", "Load levels", _levels(v))]
    if v.curves:
        sections.append(("curves", "Curves", _curves(v)))
    sections += [("why", "Why", _why(v)), ("server", "Server and client", _server(v))]
    return page(v.title, e(v.headline), sections)
