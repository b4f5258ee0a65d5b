"""The ``try`` section of a Run: what ``perfstack try`` measured, arm by arm and run by run.

Tolerant records (``records.base.Record``): unknown keys are kept and written back, a key this version knows
holding the wrong type is refused when the Run is loaded, naming the field. The checks are read from the
annotations, so a new field is covered by writing its annotation.

Times are milliseconds per step (``_ms``), seconds where the name ends in ``_s``; gains and noise are % of the
unmodified script's step time (positive: faster).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from perfstack.errors import InputError
from perfstack.records.base import Record

# What an arm's runs showed against the unmodified script (trial.stats.verdict, trial.runner)
Verdict = Literal["baseline", "works", "no measurable gain", "slower", "failed", "not applied", "not run"]


@dataclass
class Applied(Record):
    """What one fix changed in one run: how many times, and what (or why it changed nothing)."""

    count: int = 0
    what: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ArmRun(Record):
    """One process: the script run once with the arm's fixes, timed without the profiler."""

    round: int = 0
    returncode: int = 0
    step_ms: list[float] = field(default_factory=list)  # each timed step
    median_ms: Optional[float] = None
    first_step_s: Optional[float] = None  # from the process's start to the end of the first step
    warmup_s: Optional[float] = None  # the warm-up steps after the first
    wall_s: float = 0.0
    peak_mem_mb: Optional[float] = None
    applied: dict[str, Applied] = field(default_factory=dict)
    values: list[float] = field(default_factory=list)  # the first losses (or step results)
    error: Optional[str] = None  # the tail of the script's output when it failed
    interrupted: bool = False
    device: Optional[str] = None  # the GPU the script ran on
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ArmResult(Record):
    """One arm: the unmodified script (``baseline``), one fix, or the best fixes together (``combined``)."""

    id: str = ""
    title: str = ""
    fixes: list[str] = field(default_factory=list)
    changes_numerics: bool = False
    runs: list[ArmRun] = field(default_factory=list)
    best_ms: Optional[float] = None
    gain_pct: Optional[float] = None
    ci_pct: Optional[list[float]] = None  # [low, high], 95%
    predicted_pct: Optional[float] = None  # what the profile predicted for this fix
    predicted_by: list[str] = field(default_factory=list)
    numerics: str = ""
    numerics_diff: Optional[float] = None  # the largest relative difference of the first values
    verdict: Verdict = "not run"
    note: str = ""
    peak_mem_mb: Optional[float] = None
    first_step_s: Optional[float] = None  # the fastest run's start-up to the end of its first step
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Trial(Record):
    """The whole trial: how it was run, the arms, and what to apply."""

    command: list[str] = field(default_factory=list)
    nproc: int = 1
    warmup: int = 0
    steps: int = 0
    rounds: int = 0
    noise_pct: Optional[float] = None
    method: str = ""
    arms: list[ArmResult] = field(default_factory=list)
    best: list[str] = field(default_factory=list)  # the fixes of the fastest arm that keeps the numbers
    advice: list[str] = field(default_factory=list)  # the changes that make them permanent
    notes: list[str] = field(default_factory=list)
    profile_from: Optional[str] = None  # where the predictions came from
    interrupted: bool = False
    elapsed_s: float = 0.0
    device: Optional[str] = None  # the GPU the unmodified script ran on
    extra: dict[str, Any] = field(default_factory=dict)

    def arm(self, arm_id: str) -> Optional[ArmResult]:
        return next((a for a in self.arms if a.id == arm_id), None)


def _arm_result_check(v: Any, where: str) -> None:
    """Beyond an arm's annotations: its interval a pair."""
    ci = v.get("ci_pct")
    if isinstance(ci, list) and len(ci) != 2:
        raise InputError(f"{where}.ci_pct must be [low, high]")


ArmResult.CHECK = _arm_result_check


def load(data: Any) -> Optional[Trial]:
    """The ``try`` section of a loaded Run, checked (exit 2 naming the field); None when absent."""
    if data is None:
        return None
    return Trial.from_dict(data, "try")
