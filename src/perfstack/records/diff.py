"""The diff's records: what ``perfstack diff`` found between two Runs (``Diff``), and the load tests' part of
it (``LoadtestDiff``, per matching level). They save to JSON and load back; ``compare.diff`` and
``compare.loadtest`` fill them, the renderers only format them. The records import nothing above them
(the significance level of the diff, ``ALPHA``, is theirs), so that both halves of the diff can name them.
Tolerant records (``records.base.Record``): a saved Diff is checked against their annotations when it is read,
and keys this perfstack does not know are kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Mapping, Optional

from perfstack import outfile
from perfstack.errors import InputError
from perfstack.loadtest.vocabulary import Mode
from perfstack.records.base import INF, Record, plain

DIFF_SCHEMA_VERSION = 1
KIND = "perfstack-diff"  # the "kind" of a saved Diff; a Run has none

# What became of a finding from one Run to the other (compare.diff.finding_changes)
ChangeStatus = Literal["fixed", "introduced", "unchanged", "not checked after", "not checked before"]
# What became of a figure: the change is significant either way, within the noise, or the figure was not compared
# (one side has none, too few samples: the note says why)
Verdict = Literal["improved", "regressed", "within noise", "not compared"]
IMPROVED: Final = "improved"
REGRESSED: Final = "regressed"
NOISE: Final = "within noise"
NOT_COMPARED: Final = "not compared"
StepBasis = Literal["profiled", "without the profiler"]  # how a profile diff timed the step
ALPHA = 0.01  # two-sided level of the diff's test (compare.stats); the interval is the matching percentile one


@dataclass
class FindingChange(Record):
    id: str
    subject: str
    layer: str
    title: str
    status: ChangeStatus
    severity: str  # the after-Run's severity where it has the finding, else the before-Run's
    before_severity: str | None = None
    evidence_before: str = ""
    evidence_after: str = ""
    reason: str = ""  # why the after-Run did not check it
    recoverable_ms: float | None = None  # what a profile finding predicted a fix would recover
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class MeasurementDelta(Record):
    name: str
    bench: str
    unit: str
    before: float | None
    after: float | None
    verdict: Verdict  # not compared: the reason is in the note
    delta_pct: float | None = None  # change of the figure, in % of before (sign: the figure's own)
    change_pct: float | None = None  # the same change with the sign of "better": + better, - worse
    ci_low_pct: float | None = None  # 95% bootstrap interval of the change of the median, in %
    ci_high_pct: float | None = None
    p_value: float | None = None
    n_before: int = 0
    n_after: int = 0
    significant: bool = False
    higher_is_better: bool = True
    hardware_bound: bool = False
    sweep: bool = False
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class LevelDiff(Record):
    mode: Mode
    load: Annotated[float, INF]  # inf: everything at once, written "inf"
    label: str
    figures: list[MeasurementDelta]
    partial: bool = False  # either side's level was interrupted
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class SweepDelta(Record):
    """A sweep's verdict before and after (the knee, the best throughput, the highest load meeting the SLO and
    the goodput there): one number a side, and how it changed ("better", "worse", "same", "moved", ...)."""

    figure: str
    unit: str
    before: Annotated[float, INF] | None  # a load may be inf (everything at once), written "inf"
    after: Annotated[float, INF] | None
    is_load: bool
    change: str
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class DiffSlo(Record):
    """The SLO both load tests were judged against, as the load test writes it (only the objectives set, and
    the attainment where it is not the default 0.9)."""

    ttft_ms: float | None = None
    itl_ms: float | None = None
    e2e_ms: float | None = None
    attainment: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoadtestDiff(Record):
    levels: list[LevelDiff] = field(default_factory=list)
    only_before: list[str] = field(default_factory=list)  # labels of levels the after-Run did not run
    only_after: list[str] = field(default_factory=list)
    sweep: list[SweepDelta] = field(default_factory=list)
    slo: Optional[DiffSlo] = None  # the SLO both sides were judged against
    notes: list[str] = field(default_factory=list)
    alpha: float = ALPHA
    extra: dict[str, Any] = field(default_factory=dict)

    def figures(self) -> list[MeasurementDelta]:
        return [f for lv in self.levels for f in lv.figures]



@dataclass
class RunSide(Record):
    """One side of a diff: what its Run's meta says (command, created, source, host id, version), the GPUs it
    ran on, and the file it was read from (absent keys: the meta did not say)."""

    WHEN_SET = frozenset({"command", "created", "source", "host_id", "tool_version", "file"})

    command: str | None = None
    created: str | None = None
    source: str | None = None
    host_id: str | None = None
    tool_version: str | None = None
    gpus: Any = None  # the facts' gpu.summary, or the profile's device
    file: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Hardware(Record):
    """A Run's hardware identity, what benchmark figures are bound to (``compare.facts.hardware``), keyed as
    the facts it comes from are named."""

    KEYS = {"gpu_count": "gpu.count", "gpu_models": "gpu.models", "cpu_model": "cpu.model",
            "cpu_logical_count": "cpu.logical_count", "numa_node_count": "numa.node_count",
            "mem_total_gib": "mem.total_gib", "storage_devices": "storage.devices"}

    gpu_count: Any = None  # the facts' values, as the Run holds them
    gpu_models: list[Any] = field(default_factory=list)
    cpu_model: Any = None
    cpu_logical_count: Any = None
    numa_node_count: int | None = None
    mem_total_gib: int | None = None
    storage_devices: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def value(self, key: str) -> Any:
        """The value of the fact named ``key`` ("gpu.count"), None if this identity has no such key."""
        return self.to_dict().get(key)


@dataclass
class HardwareDiff(Record):
    """Whether both Runs saw the same hardware: each side's identity, the keys that differ, and the parts
    (gpu, cpu, memory, storage) those belong to."""

    same: bool
    before: Hardware
    after: Hardware
    differs: list[str] = field(default_factory=list)
    components: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class FactDrift(Record):
    """A fact whose value differs between the Runs (a GPU, disk or interface on one side only: "present")."""

    key: str
    category: str
    before: Any
    after: Any
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class CategoryDelta(Record):
    """A category of the profile's step (ms per step) before and after, and the change."""

    category: str
    before_ms: float | None
    after_ms: float | None
    delta_ms: float | None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ProfileDelta(Record):
    """The profiles' time per step by category, the step before and after (``step_basis``: how it was timed),
    and the time measured as recovered next to what the fixed findings predicted."""

    categories: list[CategoryDelta]
    step_before_ms: float | None
    step_after_ms: float | None
    step_basis: StepBasis = "profiled"
    measured_recovered_ms: float | None = None
    predicted_recovered_ms: float | None = None
    predicted_by: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Diff(Record):
    before: RunSide
    after: RunSide
    hardware: HardwareDiff
    facts: list[FactDrift] = field(default_factory=list)
    volatile_facts: int = 0
    findings: list[FindingChange] = field(default_factory=list)
    measurements: list[MeasurementDelta] = field(default_factory=list)
    profile: ProfileDelta | None = None
    alpha: float = ALPHA
    loadtest: LoadtestDiff | None = None
    schema_version: int = DIFF_SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def kinds_differ(self) -> str:
        """A sentence when the Runs were made by different commands (a doctor Run against a profile
        Run): their facts and findings were collected differently, so most of the diff is that."""
        kb, ka = self.before.command, self.after.command
        if kb and ka and kb != ka:
            return (f"these Runs are of different kinds ({kb} before, {ka} after): facts and findings that one "
                    "of them does not collect show as drifted, fixed or introduced")
        return ""

    def headline_and_sweep(self) -> tuple[list[MeasurementDelta], list[MeasurementDelta]]:
        """The benchmark figures, headlines apart from the points of a sweep (shown folded)."""
        return [m for m in self.measurements if not m.sweep], [m for m in self.measurements if m.sweep]

    def figures(self) -> list[MeasurementDelta]:
        """Every judged figure: the benchmarks', then the load test's per level."""
        return self.measurements + (self.loadtest.figures() if self.loadtest is not None else [])

    def summary(self) -> dict[str, Any]:
        count = lambda xs, attr, v: sum(1 for x in xs if getattr(x, attr) == v)  # noqa: E731
        figures = self.figures()
        return {
            "facts_drifted": len(self.facts),
            "findings": {s: count(self.findings, "status", s)
                         for s in ("fixed", "introduced", "unchanged", "not checked after",
                                   "not checked before")},
            "measurements": {v: count(figures, "verdict", v) for v in (IMPROVED, REGRESSED, NOISE)}
            | {"not compared": sum(1 for m in figures if m.verdict not in (IMPROVED, REGRESSED, NOISE))},
            "hardware_same": self.hardware.same,
        }

    def regressions(self, threshold_pct: float = 0.0, include_hardware_bound: bool = False) -> list[MeasurementDelta]:
        """Significant regressions at least ``threshold_pct`` worse: what a CI gate fails on."""
        return [m for m in self.figures()
                if m.verdict == REGRESSED and m.change_pct is not None and -m.change_pct >= threshold_pct
                and (include_hardware_bound or not m.hardware_bound)]

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": self.schema_version, "kind": KIND, "before": self.before.to_dict(),
                "after": self.after.to_dict(), "hardware": self.hardware.to_dict(), "summary": self.summary(),
                "alpha": self.alpha, "facts": plain(self.facts), "volatile_facts": self.volatile_facts,
                "findings": plain(self.findings), "measurements": plain(self.measurements),
                "profile": plain(self.profile),
                **({"loadtest": self.loadtest.to_dict()} if self.loadtest is not None else {}), **self.extra}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    def save(self, path: str | Path) -> None:
        outfile.write(path, self.to_json() + "\n")

    @classmethod
    def from_dict(cls, d: Any, where: str = "diff") -> "Diff":
        """A saved Diff, checked against the records' annotations (an InputError naming the field)."""
        if not isinstance(d, Mapping) or d.get("kind") != KIND:
            raise InputError("not a perfstack Diff")
        version = d.get("schema_version", 0)
        if not isinstance(version, int) or isinstance(version, bool):
            raise InputError(f"{where}.schema_version must be an integer, not {version!r}")
        if version > DIFF_SCHEMA_VERSION:
            raise InputError(f"this Diff has schema_version {version}; this perfstack reads up to "
                             f"{DIFF_SCHEMA_VERSION}", hint="upgrade perfstack: pip install -U perfstack")
        return super().from_dict({k: v for k, v in d.items() if k not in ("kind", "summary")}, where)
