"""The diff's records: what ``perfstack diff`` found between two Runs (``Diff``), and the load tests' part of
it (``LoadtestDiff``, per matching level). They save to JSON and load back; ``compare.diff`` and
``compare.loadtest`` fill them, the renderers only format them. The records import nothing above them
(the significance level they default to is ``stats.ALPHA``), so that both halves of the diff can name them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from perfstack import outfile
from perfstack.compare.stats import ALPHA
from perfstack.errors import InputError

DIFF_SCHEMA_VERSION = 1
KIND = "perfstack-diff"  # the "kind" of a saved Diff; a Run has none

IMPROVED, REGRESSED, NOISE = "improved", "regressed", "within noise"


@dataclass
class FindingChange:
    id: str
    subject: str
    layer: str
    title: str
    status: str  # "fixed" | "introduced" | "unchanged" | "not checked after" | "not checked before"
    severity: str  # the after-Run's severity where it has the finding, else the before-Run's
    before_severity: str | None = None
    evidence_before: str = ""
    evidence_after: str = ""
    reason: str = ""  # why the after-Run did not check it
    recoverable_ms: float | None = None  # what a profile finding predicted a fix would recover


@dataclass
class MeasurementDelta:
    name: str
    bench: str
    unit: str
    before: float | None
    after: float | None
    verdict: str  # improved | regressed | within noise | not compared (+ reason in note)
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


@dataclass
class LevelDiff:
    mode: str
    load: float
    label: str
    figures: list[MeasurementDelta]
    partial: bool = False  # either side's level was interrupted


@dataclass
class LoadtestDiff:
    levels: list[LevelDiff] = field(default_factory=list)
    only_before: list[str] = field(default_factory=list)  # labels of levels the after-Run did not run
    only_after: list[str] = field(default_factory=list)
    sweep: list[dict[str, Any]] = field(default_factory=list)  # figure, unit, before, after, is_load, change
    slo: Optional[dict[str, Any]] = None  # the SLO both sides were judged against
    notes: list[str] = field(default_factory=list)
    alpha: float = ALPHA

    def figures(self) -> list[MeasurementDelta]:
        return [f for lv in self.levels for f in lv.figures]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LoadtestDiff":
        levels = [LevelDiff(**{**lv, "figures": [MeasurementDelta(**f) for f in lv.get("figures", [])]})
                  for lv in d.get("levels", [])]
        return cls(**{**d, "levels": levels})


@dataclass
class Diff:
    before: dict[str, Any]  # the Runs' meta (command, created, source, host id) plus "file"
    after: dict[str, Any]
    hardware: dict[str, Any]
    facts: list[dict[str, Any]] = field(default_factory=list)
    volatile_facts: int = 0
    findings: list[FindingChange] = field(default_factory=list)
    measurements: list[MeasurementDelta] = field(default_factory=list)
    profile: dict[str, Any] | None = None
    alpha: float = ALPHA
    loadtest: LoadtestDiff | None = None
    schema_version: int = DIFF_SCHEMA_VERSION

    def kinds_differ(self) -> str:
        """A sentence when the Runs were made by different commands (a doctor Run against a profile
        Run): their facts and findings were collected differently, so most of the diff is that."""
        kb, ka = self.before.get("command"), self.after.get("command")
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
            "hardware_same": self.hardware.get("same", True),
        }

    def regressions(self, threshold_pct: float = 0.0, include_hardware_bound: bool = False) -> list[MeasurementDelta]:
        """Significant regressions at least ``threshold_pct`` worse: what a CI gate fails on."""
        return [m for m in self.figures()
                if m.verdict == REGRESSED and m.change_pct is not None and -m.change_pct >= threshold_pct
                and (include_hardware_bound or not m.hardware_bound)]

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": self.schema_version, "kind": KIND, "before": self.before,
                "after": self.after, "hardware": self.hardware, "summary": self.summary(), "alpha": self.alpha,
                "facts": self.facts, "volatile_facts": self.volatile_facts,
                "findings": [asdict(f) for f in self.findings],
                "measurements": [asdict(m) for m in self.measurements], "profile": self.profile,
                **({"loadtest": self.loadtest.to_dict()} if self.loadtest is not None else {})}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    def save(self, path: str | Path) -> None:
        outfile.write(path, self.to_json() + "\n")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Diff":
        if d.get("kind") != KIND:
            raise InputError("not a perfstack Diff")
        if int(d.get("schema_version", 0)) > DIFF_SCHEMA_VERSION:
            raise InputError(f"this Diff has schema_version {d['schema_version']}; this perfstack reads up to "
                             f"{DIFF_SCHEMA_VERSION}", hint="upgrade perfstack: pip install -U perfstack")
        return cls(before=d["before"], after=d["after"], hardware=d["hardware"], facts=d.get("facts", []),
                   volatile_facts=d.get("volatile_facts", 0),
                   findings=[FindingChange(**f) for f in d.get("findings", [])],
                   measurements=[MeasurementDelta(**m) for m in d.get("measurements", [])],
                   profile=d.get("profile"), alpha=d.get("alpha", ALPHA), loadtest=_loadtest_from(d.get("loadtest")))


def _loadtest_from(d: Mapping[str, Any] | None) -> LoadtestDiff | None:
    return LoadtestDiff.from_dict(d) if d else None
