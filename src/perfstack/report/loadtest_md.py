"""A load test's Markdown report, for issues and pull requests: the level table, the sweep's verdict,
notes, findings, and the server's and client's side. Strings from the Run pass through the Markdown
report's inert building blocks (``md_blocks.t`` for lines, ``md_blocks.table`` for cells)."""

from __future__ import annotations

from perfstack.report.inert import Md, md_code
from perfstack.report.loadtest_view import REPEAT_HEADERS, LoadtestView
from perfstack.report.md_blocks import t, table


def render_loadtest_md(v: LoadtestView) -> str:
    out = [f"# {t(v.title)}", f"{t(v.headline)}  \n{t(v.workload)}",
           " · ".join(f"{t(k)}: {t(x)}" for k, x in v.meta)]
    if v.interrupted:
        out.append("> [!WARNING]\n> Interrupted: this Run holds the levels measured so far.")
    levels = "## Load levels\n\n" + table(v.headers, v.rows, right=range(1, 9))
    if v.repeats:
        levels += ("\n\nMedian over the runs (interval across them; how often such an interval holds the true "
                   "median):\n\n" + table(REPEAT_HEADERS, v.repeats, right=range(1, 8)))
    if v.sweep:
        levels += f"\n\n**{t(v.sweep)}**"
    out.append(levels)
    if v.notes:
        out.append("\n".join(f"- note: {t(n)}" for n in v.notes))
    if v.findings:
        rows = [(x.severity.value, Md(md_code(x.id) + (f" \\[{t(x.subject)}\\]" if x.subject else "")), x.evidence,
                 x.fix) for x in v.findings]
        out.append("## Why\n\n" + table(("severity", "finding", "observed", "fix"), rows))
    else:
        out.append("## Why\n\nNo findings.")
    if v.server:
        out.append("## What the server's metrics endpoint said (peaks per level)\n\n"
                   + table(("load", "running", "waiting", "KV cache", "preemptions"), v.server, right=(1, 2, 3, 4)))
    if v.errors:
        out.append("## Failed requests by kind\n\n" + table(("load", "kind", "requests", "for example"), v.errors,
                                                             right=(2,)))
    if v.client:
        out.append("## The client's own load\n\n" + table(
            ("load", "CPU (busiest process)", "timer lag p99", "CPU per chunk", "processes"), v.client,
            right=(1, 2, 3, 4)))
    return "\n\n".join(out) + "\n"
