"""What every renderer of a trial shows, built once from the Run's ``try`` section: one row per arm with its
figures already formatted, the notes, and the change to apply. Renderers only lay it out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from perfstack.model import Run
from perfstack.records.trial import ArmResult, Trial

HEAD = ("fix", "step", "gain", "95% CI", "predicted", "verdict", "numerics", "peak mem", "1st step")


@dataclass
class ArmRow:
    id: str
    title: str
    step: str
    gain: str
    ci: str
    predicted: str
    predicted_by: str
    numerics: str
    verdict: str
    memory: str
    first_step: str
    note: str
    samples: list[float] = field(default_factory=list)  # every timed step of every run, ms
    best_ms: Optional[float] = None

    def cells(self) -> list[str]:
        return [self.id, self.step, self.gain, self.ci, self.predicted, self.verdict, self.numerics, self.memory,
                self.first_step]


@dataclass
class TryView:
    command: str
    how: str
    noise: str
    rows: list[ArmRow]
    notes: list[str]
    advice: list[str]
    best: list[str]
    gpu: str
    interrupted: bool


def _ms(v: Optional[float]) -> str:
    return "—" if v is None else f"{v:,.3f} ms" if v < 10 else f"{v:,.2f} ms" if v < 1000 else f"{v:,.0f} ms"


def _gain(a: ArmResult) -> str:
    return "—" if a.gain_pct is None else f"{a.gain_pct:+.1f}%"


def _ci(a: ArmResult) -> str:
    return "—" if not a.ci_pct else f"{a.ci_pct[0]:+.1f} … {a.ci_pct[1]:+.1f}"


def _numerics(a: ArmResult) -> str:
    """identical · within tolerance (the largest relative difference of the first losses) · changed (...)"""
    if not a.numerics:
        return "—"
    if a.id == "baseline":  # its runs compared among themselves
        return {"identical": "repeatable", "changed": "varies run to run"}.get(a.numerics, "varies slightly")
    if a.numerics_diff and a.numerics in ("within tolerance", "changed"):
        return f"{'≈' if a.numerics == 'within tolerance' else 'changed'} {a.numerics_diff:.0e}"
    return a.numerics


def _row(a: ArmResult) -> ArmRow:
    return ArmRow(id=a.id, title=a.title, step=_ms(a.best_ms), gain=_gain(a), ci=_ci(a),
                  predicted="—" if a.predicted_pct is None else f"{a.predicted_pct:.0f}%",
                  predicted_by=", ".join(a.predicted_by), numerics=_numerics(a),
                  verdict=a.verdict, memory="—" if a.peak_mem_mb is None else f"{a.peak_mem_mb / 1024:,.2f} GiB",
                  first_step="—" if a.first_step_s is None else f"{a.first_step_s:,.1f} s", note=a.note,
                  samples=[x for r in a.runs for x in r.step_ms], best_ms=a.best_ms)


def try_view(run: Run) -> Optional[TryView]:
    t: Optional[Trial] = run.trial
    if t is None:
        return None
    how = (f"{t.rounds} alternating round{'s' if t.rounds != 1 else ''}, one fresh process per arm per round; "
           f"{t.method}" + (f"; {t.nproc} processes (torchrun)" if t.nproc > 1 else ""))
    noise = ("not measured (one unmodified run)" if t.noise_pct is None else
             f"{t.noise_pct:.1f}% between the two fastest unmodified runs; smaller gains read as no measurable gain")
    legend = ("numerics: the first losses beside the unmodified script's; ≈ within tolerance, with the largest "
              "relative difference")
    return TryView(command=" ".join(t.command), how=how, noise=noise, rows=[_row(a) for a in t.arms],
                   notes=list(t.notes) + ([f"predictions from {t.profile_from}"] if t.profile_from else []) + [legend],
                   advice=list(t.advice), best=list(t.best), gpu=run.meta.gpu or "no GPU named",
                   interrupted=t.interrupted)
