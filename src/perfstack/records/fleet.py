"""The fleet section of a Run (``Run.fleet``): what ``fleet.analysis.analyze`` found, as records.

A fleet Run's members and SKUs, the configuration that drifted, the figures that stand out (and the heat
map of every figure), the findings some nodes have and others lack, and the nodes ranked worst first.
The records sit below ``model`` (which loads a Run's fleet section through ``FleetAnalysis.from_dict``)
and import nothing above them; the analysis that fills them is ``fleet.analysis``. Tolerant records
(``records.base.Record``): checked against their annotations when a Run is loaded, unknown keys kept.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from perfstack.errors import InputError
from perfstack.records.base import Record, show
from perfstack.severity import Severity

FLEET_SCHEMA_VERSION = 1

# What became of a node: its Run was read ("ok"), it failed (unreachable, no Run, a broken one: the reason
# says), or its Run came from another perfstack version (kept out of the comparison)
MemberStatus = Literal["ok", "failed", "other version"]
# Why an all-reduce ran (fleet.allreduce): the whole fleet, a pair of the all-pairs sweep, a half of the
# bisection, a machine probed against a healthy one, or a slow one confirmed against the fastest
GroupWhy = Literal["fleet", "pair", "half", "probe", "confirm"]
CommsMethod = Literal["pairs", "bisection"]  # every pair of machines, or halves of the fleet in turn


def _severity(d: Any, where: str) -> None:
    """A severity the fleet's records name is one of Severity's."""
    if "severity" in d and d["severity"] not in {s.value for s in Severity}:
        raise InputError(f"{where}.severity must be one of {', '.join(s.value for s in Severity)}, "
                         f"not {show(d['severity'])}")


@dataclass
class DriftGroup(Record):
    value: Any
    nodes: list[str]
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Drift(Record):
    key: str
    category: str
    sku: str
    baseline: Any  # the majority's value; None when split
    baseline_count: int
    odd: list[DriftGroup] = field(default_factory=list)  # the other values, largest group first
    split: bool = False  # no value is held by more than half of the nodes
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def odd_nodes(self) -> list[str]:
        return [n for g in self.odd for n in g.nodes]


@dataclass
class Outlier(Record):
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
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class UnevenFinding(Record):
    id: str
    severity: str
    layer: str
    title: str
    sku: str
    nodes: list[str]  # the nodes that have it
    of: int  # nodes of the SKU that were audited
    subjects: dict[str, list[str]] = field(default_factory=dict)  # node -> ["gpu1", ...]
    evidence: dict[str, str] = field(default_factory=dict)  # node -> what was observed (first subject)
    extra: dict[str, Any] = field(default_factory=dict)

    CHECK = _severity

    @property
    def minority(self) -> bool:
        return 2 * len(self.nodes) <= self.of


@dataclass
class SharedFinding(Record):
    id: str
    severity: str
    title: str
    sku: str
    nodes: int
    extra: dict[str, Any] = field(default_factory=dict)

    CHECK = _severity


@dataclass
class NodeRank(Record):
    node: str
    severity: str
    score: int
    reasons: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    CHECK = _severity


@dataclass
class Member(Record):
    name: str
    status: MemberStatus
    reason: str = ""
    source: str = ""
    machine: str = ""  # where fleet ran it (Ray nodes of one machine share one); "" for gathered Runs
    sku: str = ""
    gpus: str = ""
    tool_version: str = ""
    command: str = ""
    figures: int = 0
    findings: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class HeatFigure(Record):
    """A column of a heat map: a figure, its unit, the fleet's median and robust spread, how many points."""

    figure: str
    unit: str
    median: float
    spread_pct: float
    points: int
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class HeatRow(Record):
    """A row of a heat map: a node (or one of its GPUs) and its z-score per figure (None: not measured)."""

    node: str
    subject: str  # "gpu1", or "" for the node's own figures
    z: list[float | None]
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class HeatMap(Record):
    """Nodes (or GPUs) x figures of one SKU; each cell a signed robust z-score, positive = better."""

    sku: str
    figures: list[HeatFigure]
    rows: list[HeatRow]
    extra: dict[str, Any] = field(default_factory=dict)


# -- the all-reduce between machines (fleet.comms; fleet.allreduce measures and judges it) ----------------
@dataclass
class Point(Record):
    """One message size of a group's sweep."""

    bytes: int
    time_us: float
    busbw_gbps: float  # at the median time
    samples: int
    fast_busbw_gbps: float | None = None  # at the FAST_QUANTILE time (``fast_time``); None: as busbw_gbps
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Group(Record):
    """One all-reduce over some machines (one rank each): the sweep, or why it failed."""

    machines: list[str]
    why: GroupWhy
    points: list[Point] = field(default_factory=list)
    error: str = ""
    missing: list[str] = field(default_factory=list)  # machines that never joined the rendezvous
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def busbw(self) -> float | None:
        """The figure groups are compared by: the best of the sweep, at each size's fast quantile."""
        if self.error:
            return None
        return max((p.busbw_gbps if p.fast_busbw_gbps is None else p.fast_busbw_gbps for p in self.points),
                   default=None)


@dataclass
class Suspect(Record):
    """A slow node or a slow link the all-reduces point at, with the figure that names it."""

    kind: Literal["node", "link"]
    machines: list[str]
    busbw_gbps: float
    median_gbps: float
    text: str
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Comms(Record):
    """What ``fleet bench`` keeps in the fleet Run (``fleet.comms``)."""

    backend: str
    method: CommsMethod
    names: dict[str, str]  # machine -> the Ray node name the report uses
    groups: list[Group] = field(default_factory=list)
    per_machine: dict[str, float] = field(default_factory=dict)  # best busbw of the groups it was in
    median_gbps: float | None = None
    suspects: list[Suspect] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # machine -> reason (did not join, ...)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def fleet_gbps(self) -> float | None:
        whole = [g for g in self.groups if g.why == "fleet" and not g.error]
        return whole[-1].busbw if whole else None

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["fleet_gbps"] = self.fleet_gbps  # figured again from the groups: a loaded Run's is replaced
        return d


@dataclass
class FleetAnalysis(Record):
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
    comms: Comms | None = None  # the all-reduce between machines (fleet bench)
    schema_version: int = FLEET_SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

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
        d = super().to_dict()
        d["summary"] = self.summary()  # figured again: a loaded Run's is replaced where it stands
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str = "fleet") -> "FleetAnalysis":
        """The fleet section of a saved Run, checked once: every record against its annotations and
        severities against Severity, so that a wrong type is refused naming it ("fleet.outliers[2].z must be
        a number") instead of failing in a renderer."""
        if not isinstance(d, Mapping):
            raise InputError("the fleet section is not a JSON object")
        version = d.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise InputError(f"{where}.schema_version must be a positive integer, not "
                             f"{'missing' if version is None else repr(version)}")
        if version > FLEET_SCHEMA_VERSION:
            raise InputError(f"the fleet section has schema_version {version}; this perfstack reads up to "
                             f"{FLEET_SCHEMA_VERSION}", hint="upgrade perfstack: pip install -U perfstack")
        return super().from_dict(dict(d), where)
