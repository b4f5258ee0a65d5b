"""The fleet analysis: a pure function of node summaries (and so of Runs), whoever gathered them.

``analyze(summaries)`` groups nodes by SKU, sets aside nodes whose perfstack version differs from the
fleet's (their facts and figures may not mean the same), and within each SKU finds configuration
drift, figures that stand out and findings only some nodes have, then ranks the nodes. The result,
``record.FleetAnalysis``, saves to JSON inside the fleet's Run (``Run.fleet``) and loads back; the
renderers only format it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable

from perfstack.fleet.drift import drift
from perfstack.fleet.findings import findings
from perfstack.fleet.outliers import FigureStats, outliers
from perfstack.fleet.rank import rank
from perfstack.records.fleet import FleetAnalysis, HeatFigure, HeatMap, HeatRow, Member, NodeRank
from perfstack.fleet.summary import NodeSummary, summarize
from perfstack.model import Run

def _minor(version: str) -> str:
    """'0.1.3' -> '0.1': patch releases measure and name things the same way."""
    return ".".join(version.split(".")[:2])


def _heatmap(sku: str, stats: list[FigureStats]) -> HeatMap:
    units = sorted({cell for s in stats for cell in s.cells})
    rows = [HeatRow(node=node, subject=subject,
                    z=[round(s.cells[(node, subject)], 2) if (node, subject) in s.cells else None for s in stats])
            for node, subject in units]
    return HeatMap(sku=sku, figures=[HeatFigure(figure=s.figure, unit=s.unit, median=s.median,
                                                spread_pct=s.spread_pct, points=s.points) for s in stats], rows=rows)


def shared_machine_notes(members: list[Member]) -> list[str]:
    """One note per machine that hosts several of the fleet's Ray nodes: they share its CPUs, memory
    and GPUs, so its host figures are one machine's, not one per node."""
    on: dict[str, list[str]] = defaultdict(list)
    for m in members:
        if m.machine:
            on[m.machine].append(m.name)
    return [f"{', '.join(names)}: {len(names)} Ray nodes on one machine ({machine}); they share its CPUs, memory "
            "and GPUs, so fleet bench measures the machine's own figures (host, GPU-to-GPU, NCCL) once, on "
            "one of them, and its GPUs' host-bound figures (host copies, launch) one GPU at a time"
            for machine, names in sorted(on.items()) if len(names) > 1]


def analyze(nodes: Iterable[NodeSummary]) -> FleetAnalysis:
    nodes = list(nodes)
    ok = [n for n in nodes if n.ok]
    result = FleetAnalysis()
    versions = Counter(_minor(n.tool_version) for n in ok)
    fleet_version = versions.most_common(1)[0][0] if versions else ""
    compared: list[NodeSummary] = []
    for n in nodes:
        m = Member(name=n.name, status=n.status, reason=n.reason, source=n.source, machine=n.machine, sku=n.sku,
                   gpus=n.gpus, tool_version=n.tool_version, command=n.command, figures=len(n.figures),
                   findings=len(n.findings))
        if n.ok and _minor(n.tool_version) != fleet_version:
            m.status = "other version"
            m.reason = (f"perfstack {n.tool_version or '(unknown)'} while the fleet runs {fleet_version}.x: "
                        "not compared")
        elif n.ok:
            compared.append(n)
        result.members.append(m)
    if len(versions) > 1:
        result.notes.append(f"{sum(1 for m in result.members if m.status == 'other version')} node(s) run another "
                            f"perfstack version than the fleet's {fleet_version}.x; they are listed, not compared")
    result.notes += shared_machine_notes(result.members)
    by_sku: dict[str, list[NodeSummary]] = defaultdict(list)
    for n in compared:
        by_sku[n.sku].append(n)
    result.skus = {sku: sorted(n.name for n in ns) for sku, ns in sorted(by_sku.items())}
    if len(by_sku) > 1:
        result.notes.append(f"{len(by_sku)} SKUs ({', '.join(f'{k}: {len(v)}' for k, v in result.skus.items())}): "
                            "nodes are compared within their SKU only")
    for sku, group in sorted(by_sku.items()):
        d, unique = drift(group, sku)
        result.drift += d
        result.identity_keys += unique
        o, stats, notes = outliers(group, sku)
        result.outliers += o
        result.notes += notes
        if stats:
            result.heatmaps.append(_heatmap(sku, stats))
        u, s = findings(group, sku)
        result.uneven += u
        result.shared += s
        if len(group) < 3:
            result.notes.append(f"{sku}: {len(group)} node(s); outliers need at least 3 points per figure and a "
                                "majority needs 3 nodes, so differences are reported without naming a side")
    result.ranking = rank(nodes, result.drift, result.uneven, result.outliers)
    result.ranking += [NodeRank(m.name, "info", 1, [m.reason]) for m in result.members if m.status == "other version"]
    return result


def analyze_runs(runs: Iterable[tuple[str, Run]]) -> FleetAnalysis:
    """The analysis of named Runs (one per node), for callers that hold Runs rather than summaries."""
    return analyze(summarize(run, name) for name, run in runs)
