"""What changed in a fleet between two of its runs: "what drifted since last week".

``diff_fleets(before, after)`` is a pure function of two fleet analyses. Nodes are matched by name;
drift, figures that stand out and uneven findings by what they are about (setting and node, figure
and node/GPU, finding and node), so a node that was fixed and one that went bad read as two lines.
The SKUs' median figures are compared too: a driver rolled out to every node moves the medians
without singling any node out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from perfstack.fleet.analysis import FleetAnalysis

KIND = "perfstack-fleet-diff"
MEDIAN_CHANGE_PCT = 2.0  # a SKU median that moves less than this is not reported (the fleet's own wobble)


@dataclass
class FleetDiff:
    nodes_added: list[str] = field(default_factory=list)
    nodes_removed: list[str] = field(default_factory=list)
    newly_flagged: list[dict[str, Any]] = field(default_factory=list)  # {node, severity, reasons}
    no_longer_flagged: list[dict[str, Any]] = field(default_factory=list)
    still_flagged: list[dict[str, Any]] = field(default_factory=list)  # {node, before, after}
    drift_new: list[dict[str, Any]] = field(default_factory=list)  # {key, node, value, baseline}
    drift_gone: list[dict[str, Any]] = field(default_factory=list)
    outliers_new: list[dict[str, Any]] = field(default_factory=list)  # {figure, node, subject, deviation_pct}
    outliers_gone: list[dict[str, Any]] = field(default_factory=list)
    findings_new: list[dict[str, Any]] = field(default_factory=list)  # {id, node, severity}
    findings_gone: list[dict[str, Any]] = field(default_factory=list)
    medians: list[dict[str, Any]] = field(default_factory=list)  # {sku, figure, unit, before, after, change_pct}

    def to_dict(self) -> dict[str, Any]:
        return {"kind": KIND, **asdict(self)}

    def empty(self) -> bool:
        return not any(v for v in asdict(self).values())


def _drift(a: FleetAnalysis) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d.key, n): {"key": d.key, "node": n, "value": g.value, "baseline": d.baseline}
            for d in a.drift for g in d.odd for n in g.nodes}


def _outliers(a: FleetAnalysis) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(o.figure, o.node, o.subject): {"figure": o.figure, "node": o.node, "subject": o.subject,
                                            "deviation_pct": o.deviation_pct, "slow": o.slow}
            for o in a.outliers}


def _findings(a: FleetAnalysis) -> dict[tuple[str, str], dict[str, Any]]:
    return {(u.id, n): {"id": u.id, "node": n, "severity": u.severity}
            for u in a.uneven if u.minority for n in u.nodes}


def _medians(a: FleetAnalysis) -> dict[tuple[str, str], tuple[float, str]]:
    return {(h.sku, f["figure"]): (f["median"], f["unit"]) for h in a.heatmaps for f in h.figures}


def _split(b: dict, a: dict) -> tuple[list, list]:
    return [a[k] for k in a if k not in b], [b[k] for k in b if k not in a]


def diff_fleets(before: FleetAnalysis, after: FleetAnalysis) -> FleetDiff:
    d = FleetDiff()
    nb, na = {m.name for m in before.members}, {m.name for m in after.members}
    d.nodes_added, d.nodes_removed = sorted(na - nb), sorted(nb - na)
    rb = {r.node: r for r in before.ranking}
    ra = {r.node: r for r in after.ranking}
    d.newly_flagged = [{"node": n, "severity": r.severity, "reasons": r.reasons} for n, r in ra.items() if n not in rb]
    d.no_longer_flagged = [{"node": n, "severity": r.severity, "reasons": r.reasons} for n, r in rb.items()
                           if n not in ra and n in na]
    d.still_flagged = [{"node": n, "before": rb[n].severity, "after": r.severity} for n, r in ra.items() if n in rb]
    d.drift_new, d.drift_gone = _split(_drift(before), _drift(after))
    d.outliers_new, d.outliers_gone = _split(_outliers(before), _outliers(after))
    d.findings_new, d.findings_gone = _split(_findings(before), _findings(after))
    mb, ma = _medians(before), _medians(after)
    for key in sorted(set(mb) & set(ma)):
        (vb, unit), (va, _) = mb[key], ma[key]
        if vb and abs(va / vb - 1) * 100 >= MEDIAN_CHANGE_PCT:
            d.medians.append({"sku": key[0], "figure": key[1], "unit": unit, "before": vb, "after": va,
                              "change_pct": round((va / vb - 1) * 100, 2)})
    return d
