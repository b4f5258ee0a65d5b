"""The fleet section of a Run (``Run.fleet``): what ``fleet.analysis.analyze`` found, as records.

A fleet Run's members and SKUs, the configuration that drifted, the figures that stand out (and the heat
map of every figure), the findings some nodes have and others lack, and the nodes ranked worst first.
The records sit below ``model`` (which loads a Run's fleet section through ``FleetAnalysis.from_dict``)
and import nothing above them; the analysis that fills them is ``fleet.analysis``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, TypeVar

from perfstack.errors import InputError
from perfstack.fields import one_of, typed
from perfstack.severity import Severity

FLEET_SCHEMA_VERSION = 1
T = TypeVar("T")


@dataclass
class DriftGroup:
    value: Any
    nodes: list[str]


@dataclass
class Drift:
    key: str
    category: str
    sku: str
    baseline: Any  # the majority's value; None when split
    baseline_count: int
    odd: list[DriftGroup] = field(default_factory=list)  # the other values, largest group first
    split: bool = False  # no value is held by more than half of the nodes

    @property
    def odd_nodes(self) -> list[str]:
        return [n for g in self.odd for n in g.nodes]


@dataclass
class Outlier:
    figure: str
    unit: str
    sku: str
    node: str
    subject: str  # "gpu1", or "" for a figure of the node
    value: float
    median: float
    deviation_pct: float  # (value / median - 1) * 100
    z: float  # robust z-score, signed like the deviation
    noise_pct: float  # the point's own measurement noise, in % of its value
    fleet_spread_pct: float  # the fleet's robust standard deviation, in % of the median
    points: int
    slow: bool  # worse than the fleet


@dataclass
class UnevenFinding:
    id: str
    severity: str
    layer: str
    title: str
    sku: str
    nodes: list[str]  # the nodes that have it
    of: int  # nodes of the SKU that were audited
    subjects: dict[str, list[str]] = field(default_factory=dict)  # node -> ["gpu1", ...]
    evidence: dict[str, str] = field(default_factory=dict)  # node -> what was observed (first subject)

    @property
    def minority(self) -> bool:
        return 2 * len(self.nodes) <= self.of


@dataclass
class SharedFinding:
    id: str
    severity: str
    title: str
    sku: str
    nodes: int


@dataclass
class NodeRank:
    node: str
    severity: str
    score: int
    reasons: list[str] = field(default_factory=list)


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
