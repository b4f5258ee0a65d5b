"""The ranked "fix these nodes first" list: every node with something against it, worst first.

A node's severity is the worst of what singles it out: a failure to report, a finding the rest of
its SKU lacks (at that finding's severity), a figure below the fleet (critical when 20% or more below
the median, a GPU that slow loses a synchronous job that share of its speed; else a warning), a
setting that differs from the majority (warning; info where the fleet has no majority). Within a
severity, nodes are ordered by a score that adds the pieces (100 per critical, 10 per warning, 1 per
info), so a node with three problems comes before a node with one.
"""

from __future__ import annotations

from collections import defaultdict

from perfstack.records.fleet import Drift, NodeRank, Outlier, UnevenFinding
from perfstack.fleet.summary import NodeSummary
from perfstack.model import Severity

CRITICAL_SLOWDOWN_PCT = 20.0
WEIGHT = {"critical": 100, "warning": 10, "info": 1}


def _short(v: object, n: int = 40) -> str:
    s = str(v)
    return s if len(s) <= n else s[: n - 1] + "…"


def rank(nodes: list[NodeSummary], drifts: list[Drift], uneven: list[UnevenFinding],
         slow: list[Outlier]) -> list[NodeRank]:
    hits: dict[str, list[tuple[str, str]]] = defaultdict(list)  # node -> [(severity, reason)]
    for n in nodes:
        if not n.ok:
            hits[n.name].append(("critical", f"did not report: {n.reason}"))
    for u in uneven:
        if not u.minority:
            continue
        for node in u.nodes:
            subj = ",".join(u.subjects.get(node, []))
            hits[node].append((u.severity, f"{u.id}{f' [{subj}]' if subj else ''} (on {len(u.nodes)} of {u.of})"))
    for o in slow:
        if not o.slow:
            continue
        sev = "critical" if abs(o.deviation_pct) >= CRITICAL_SLOWDOWN_PCT else "warning"
        where = f" [{o.subject}]" if o.subject else ""
        hits[o.node].append((sev, f"{o.figure}{where} {o.deviation_pct:+.1f}% vs median"))
    for d in drifts:
        sev = "info" if d.split else "warning"
        for g in d.odd:
            for node in g.nodes:
                hits[node].append((sev, f"{d.key} = {_short(g.value)}"
                                        + ("" if d.split else f" (majority: {_short(d.baseline)})")))
    out = []
    for node, hs in hits.items():
        worst = max((s for s, _ in hs), key=lambda s: Severity(s).rank)
        ordered = sorted(hs, key=lambda h: -Severity(h[0]).rank)
        out.append(NodeRank(node, worst, sum(WEIGHT[s] for s, _ in hs), [r for _, r in ordered]))
    out.sort(key=lambda r: (-Severity(r.severity).rank, -r.score, r.node))
    return out
