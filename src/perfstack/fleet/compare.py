"""What changed in a fleet between two of its runs: "what drifted since last week".

``diff_fleets(before, after)`` is a pure function of two fleet analyses. Nodes are matched by name;
drift, figures that stand out and uneven findings by what they are about (setting and node, figure
and node/GPU, finding and node), so a node that was fixed and one that went bad read as two lines.
The SKUs' median figures are compared too: a driver rolled out to every node moves the medians
without singling any node out. So is the all-reduce between machines where both runs measured it
(``fleet bench``): the fleet's figure and each node's, and the slow nodes and links it named.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, TypeVar

from perfstack.records.fleet import FleetAnalysis

KIND = "perfstack-fleet-diff"
MEDIAN_CHANGE_PCT = 2.0  # a SKU median that moves less than this is not reported (the fleet's own wobble)
# An all-reduce figure that moves less than this is not reported: between runs the same healthy pair
# moves up to ~15% at its fast quantile on a busy host (allreduce.fast_time), a few % on a quiet fabric.
COMMS_CHANGE_PCT = 10.0


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
    # the all-reduce between machines (fleet bench): {subject ("fleet" or a node), before, after, change_pct}
    comms: list[dict[str, Any]] = field(default_factory=list)
    comms_suspects_new: list[dict[str, Any]] = field(default_factory=list)  # {kind, nodes, text}
    comms_suspects_gone: list[dict[str, Any]] = field(default_factory=list)

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
    return {(h.sku, f.figure): (f.median, f.unit) for h in a.heatmaps for f in h.figures}


def _comms(a: FleetAnalysis) -> tuple[dict[str, float], dict[tuple[str, ...], dict[str, Any]]] | None:
    """The all-reduce's figures by subject ("fleet", then node names: machine ids change with a reboot)
    and its suspects (slow nodes, slow links, machines that did not join) by what they are about."""
    c = a.comms
    if c is None:
        return None
    def name(m: str) -> str:
        return c.names.get(m) or m
    figures = {name(m): v for m, v in c.per_machine.items()}
    if c.fleet_gbps is not None:
        figures["fleet"] = c.fleet_gbps
    suspects = {(s.kind, *sorted(map(name, s.machines))): {"kind": s.kind, "nodes": sorted(map(name, s.machines)),
                                                          "text": s.text} for s in c.suspects}
    suspects.update({("no join", name(m)): {"kind": "no join", "nodes": [name(m)], "text": why}
                     for m, why in c.failed.items()})
    return figures, suspects


def _comms_diff(d: FleetDiff, before: FleetAnalysis, after: FleetAnalysis) -> None:
    cb, ca = _comms(before), _comms(after)
    if cb is None or ca is None:
        return
    (fb, sb), (fa, sa) = cb, ca
    for subject in sorted(set(fb) & set(fa), key=lambda x: (x != "fleet", x)):
        vb, va = fb[subject], fa[subject]
        if vb and abs(va / vb - 1) * 100 >= COMMS_CHANGE_PCT:
            d.comms.append({"subject": subject, "before": vb, "after": va, "change_pct": round((va / vb - 1) * 100, 1)})
    d.comms_suspects_new, d.comms_suspects_gone = _split(sb, sa)


K = TypeVar("K")
V = TypeVar("V")


def _split(b: Mapping[K, V], a: Mapping[K, V]) -> tuple[list[V], list[V]]:
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
    _comms_diff(d, before, after)
    return d
