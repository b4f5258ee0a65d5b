"""The profile checks' registry: what a check is, what it finds, and what it is given.

    @profile_check("host-sync", "framework", "Host-device synchronizations inside the step",
                   doc="...when it fires and its recoverable-time model...", why="...", fix="...",
                   assumptions="...what the model takes for granted...", confidence="high")
    def host_sync(p: Section, ctx: Context) -> PHit | None:
        ...

A check is a pure function of one profile summary, read into its typed records (``records.Section``),
and the ``Context``, returning a ``PHit`` (what it found and the time per step its fix would recover)
or None; ``rules.evaluate`` runs them in its ``ORDER`` and turns each hit into a Finding. Profile
checks are the family "profile" of the one registry (``perfstack.checks``), apart from the doctor's
(``perfstack.rules.CHECKS``): ``perfstack doctor`` runs every check of that one, and these need a trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from perfstack.checks import FAMILIES, Check, register
from perfstack.model import CONFIDENCE
from perfstack.records.profile import Section


@dataclass
class PHit:
    evidence: str
    recoverable_ms: float
    fix: str | None = None
    severity: str | None = None
    why: str | None = None
    subject: str = ""
    claims: dict[str, float] = field(default_factory=dict)  # idle reasons this finding explains (ms/step)
    confidence: str | None = None  # lower than the check's own where this trace leaves the model unsure


# A profile check is a record of the one finding registry (perfstack.checks), of the family "profile", with no
# fixed severity (a finding's comes from the share of the step its fix would recover: severity_for), and with
# what its recoverable-time model takes for granted (``assumptions``; its inputs are measured in the trace,
# these are not) and the model's ``confidence`` where its inputs are all in the trace (model.CONFIDENCE; a hit
# lowers it where this trace leaves the model unsure), both shown by ``perfstack explain ID``.
ProfileCheck = Check


@dataclass
class Context:
    spec: Any = None  # specs.GpuSpec of the traced GPU, or None
    model_flops_per_step: float | None = None
    claimed: dict[str, float] = field(default_factory=dict)


PROFILE_CHECKS: dict[str, Check] = FAMILIES["profile"]


CheckFn = Callable[[Section, "Context"], "PHit | None"]


def profile_check(id: str, layer: str, title: str, *, doc: str, why: str, fix: str, assumptions: str,
                  confidence: str, measure: tuple[str, ...] = ()) -> Callable[[CheckFn], CheckFn]:
    """``measure``: the fixes of ``perfstack try`` (trial/fixes.py ids) that measure this check's fix
    without the profiler; a finding whose verdict rests on the profiler-overhead correction ends with
    'measure it: perfstack try --fix <ids>'. ``assumptions`` and ``confidence``: see ``ProfileCheck`` above;
    every check states both, so no figure comes without what it rests on."""
    if confidence not in CONFIDENCE or not assumptions.strip():
        raise ValueError(f"profile check {id}: needs its assumptions and a confidence of {', '.join(CONFIDENCE)}")

    return register("profile", id, layer, title, severity=None, doc=doc, why=why, fix=fix, measure=measure,
                    assumptions=" ".join(assumptions.split()), confidence=confidence)


def severity_for(recoverable_ms: float, step_ms: float) -> str:
    """critical ≥ 50% of the step (the step could run 2× faster), warning ≥ 5%, info below."""
    pct = 100 * recoverable_ms / step_ms if step_ms else 0
    return "critical" if pct >= 50 else "warning" if pct >= 5 else "info"


def least_confident(*levels: str | None) -> str:
    """The lowest of the confidences given (None: no opinion)."""
    given = [c for c in levels if c]
    return max(given, key=CONFIDENCE.index) if given else CONFIDENCE[0]
