"""The fleet analysis: a pure function of node summaries (and so of Runs), whoever gathered them.

``analyze(summaries)`` groups nodes by SKU, sets aside nodes whose perfstack version differs from the
fleet's (their facts and figures may not mean the same), and within each SKU finds configuration
drift, figures that stand out and findings only some nodes have, then ranks the nodes. The result,
``FleetAnalysis``, saves to JSON inside the fleet's Run (``Run.fleet``) and loads back; the renderers
only format it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Mapping, TypeVar

from perfstack.errors import InputError
from perfstack.fields import one_of, typed
from perfstack.fleet.drift import Drift, DriftGroup, drift
from perfstack.fleet.findings import SharedFinding, UnevenFinding, findings
from perfstack.fleet.outliers import FigureStats, Outlier, outliers
from perfstack.fleet.rank import NodeRank, rank
from perfstack.fleet.summary import NodeSummary, summarize
from perfstack.model import Run, Severity

FLEET_SCHEMA_VERSION = 1
T = TypeVar("T")


@dataclass
class Member:
    name: str
    status: str  # "ok", "failed", "other version"
    reason: str = ""
    source: str = ""
    machine: str = ""  # where fleet ran it (Ray nodes of one machine share one); "" for gathered Runs
    sku: str = ""
    gpus: str = ""
    tool_version: str = ""
    command: str = ""
    figures: int = 0
    findings: int = 0


@dataclass
class HeatMap:
    """Nodes (or GPUs) x figures of one SKU; each cell a signed robust z-score, positive = better."""

    sku: str
    figures: list[dict[str, Any]]  # {figure, unit, median, spread_pct, points}
    rows: list[dict[str, Any]]  # {node, subject, z: [float | None per figure]}


@dataclass
class FleetAnalysis:
    members: list[Member] = field(default_factory=list)
    skus: dict[str, list[str]] = field(default_factory=dict)
    drift: list[Drift] = field(default_factory=list)
    identity_keys: int = 0
    outliers: list[Outlier] = field(default_factory=list)
    heatmaps: list[HeatMap] = field(default_factory=list)
    uneven: list[UnevenFinding] = field(default_factory=list)
    shared: list[SharedFinding] = field(default_factory=list)
    ranking: list[NodeRank] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    comms: dict[str, Any] | None = None
    schema_version: int = FLEET_SCHEMA_VERSION

    def summary(self) -> dict[str, Any]:
        status = Counter(m.status for m in self.members)
        return {"nodes": len(self.members), "ok": status.get("ok", 0), "failed": status.get("failed", 0),
                "other_version": status.get("other version", 0), "skus": len(self.skus),
                "drifted_keys": len(self.drift), "slow": sum(1 for o in self.outliers if o.slow),
                "fast": sum(1 for o in self.outliers if not o.slow),
                "uneven_findings": sum(1 for u in self.uneven if u.minority),
                "flagged_nodes": len(self.ranking),
                "by_severity": dict(Counter(r.severity for r in self.ranking))}

    def worst(self) -> str | None:
        return max((r.severity for r in self.ranking), key=lambda s: Severity(s).rank, default=None)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["summary"] = self.summary()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "FleetAnalysis":
        """The fleet section of a saved Run, checked once: every record against its dataclass's types
        (fields.typed) and severities against Severity, so that a wrong type is refused naming it
        ("fleet.outliers[2].z must be a number") instead of failing in a renderer."""
        if not isinstance(d, Mapping):
            raise InputError("the fleet section is not a JSON object")
        version = d.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise InputError("fleet.schema_version must be a positive integer, not "
                             f"{'missing' if version is None else repr(version)}")
        if version > FLEET_SCHEMA_VERSION:
            raise InputError(f"the fleet section has schema_version {version}; this perfstack reads up to "
                             f"{FLEET_SCHEMA_VERSION}", hint="upgrade perfstack: pip install -U perfstack")
        top = typed(cls, {k: d[k] for k in ("skus", "identity_keys", "notes") if k in d}, "fleet")
        return cls(
            members=_each(d, "members", lambda m, w: Member(**typed(Member, m, w))),
            drift=_each(d, "drift", _drift),
            outliers=_each(d, "outliers", lambda o, w: Outlier(**typed(Outlier, o, w))),
            heatmaps=_each(d, "heatmaps", lambda h, w: HeatMap(**typed(HeatMap, h, w))),
            uneven=_each(d, "uneven", lambda u, w: UnevenFinding(**typed(UnevenFinding, u, w, _SEVERITY))),
            shared=_each(d, "shared", lambda s, w: SharedFinding(**typed(SharedFinding, s, w, _SEVERITY))),
            ranking=_each(d, "ranking", lambda r, w: NodeRank(**typed(NodeRank, r, w, _SEVERITY))),
            comms=_comms(d.get("comms")), schema_version=version, **top)


_SEVERITY = {"severity": one_of(*(s.value for s in Severity))}


def _each(d: Mapping[str, Any], key: str, make: Callable[[Any, str], T]) -> list[T]:
    """The records of the list ``d[key]`` (absent: none), each made by ``make`` (record, where)."""
    items = d.get(key, [])
    if not isinstance(items, list):
        raise InputError(f"fleet.{key} must be a list")
    return [make(x, f"fleet.{key}[{i}]") for i, x in enumerate(items)]


def _drift(x: Any, where: str) -> Drift:
    fields = typed(Drift, x, where)
    groups = fields.get("odd", [])
    if not isinstance(groups, list):
        raise InputError(f"{where}.odd must be a list")
    fields["odd"] = [DriftGroup(**typed(DriftGroup, g, f"{where}.odd[{i}]")) for i, g in enumerate(groups)]
    return Drift(**fields)


def _comms(c: Any) -> dict[str, Any] | None:
    if c is not None and not isinstance(c, dict):
        raise InputError("fleet.comms must be a JSON object or null")
    return c


def _minor(version: str) -> str:
    """'0.1.3' -> '0.1': patch releases measure and name things the same way."""
    return ".".join(version.split(".")[:2])


def _heatmap(sku: str, stats: list[FigureStats]) -> HeatMap:
    units = sorted({cell for s in stats for cell in s.cells})
    rows = [{"node": node, "subject": subject,
             "z": [round(s.cells[(node, subject)], 2) if (node, subject) in s.cells else None for s in stats]}
            for node, subject in units]
    return HeatMap(sku=sku, figures=[{"figure": s.figure, "unit": s.unit, "median": s.median,
                                      "spread_pct": s.spread_pct, "points": s.points} for s in stats], rows=rows)


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
