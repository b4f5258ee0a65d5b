"""What changed between two Runs.

``diff_runs(before, after)`` is a pure function of two Runs. It returns a ``record.Diff`` that saves to
JSON and loads back, and that every diff renderer (text, Markdown, HTML) only formats:

- facts that drifted (driver, kernel parameters, environment, library versions, ...);
- findings fixed, introduced, unchanged (and those the after-Run could not check);
- benchmark figures with the change of the median and a verdict judged against the raw samples'
  spread (``stats.compare``): improved, regressed, or within noise;
- the profile's per-step time by category, and the time measured as recovered next to what the
  fixed findings predicted;
- for two load tests, each matching load level's latencies, throughput and goodput judged against
  the spread of their request records, and the sweep's knee (``compare.loadtest``).

When the two Runs saw different hardware, figures bound to the part that differs are marked
``hardware_bound``: their delta is reported, but it measures the machines, not the change.
"""

from __future__ import annotations

import statistics
from typing import Any

from perfstack.compare import facts as factdiff
from perfstack.compare.loadtest import loadtest_diff
from perfstack.records.diff import (IMPROVED, NOISE, REGRESSED, CategoryDelta, ChangeStatus, Diff, FindingChange,
                                    MeasurementDelta, ProfileDelta, RunSide, StepBasis)
from perfstack.compare.stats import ALPHA, compare
from perfstack.model import Finding, Measurement, Run
from perfstack.records.profile import Section

TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
# Which part of the machine a benchmark's figures depend on (anything else: the GPU).
BENCH_HARDWARE = {"host": ("cpu", "memory"), "storage": ("storage",)}

# -- findings ---------------------------------------------------------------------------------
def _key(f: Finding) -> tuple[str, str]:
    return f.id, f.subject


def finding_changes(before: Run, after: Run) -> list[FindingChange]:
    b = {_key(f): f for f in before.findings}
    a = {_key(f): f for f in after.findings}
    checked_after = {c.id: c for c in after.checks}
    checked_before = {c.id: c for c in before.checks}
    out: list[FindingChange] = []
    for key in list(b) + [k for k in a if k not in b]:
        fb, fa = b.get(key), a.get(key)
        f = fa or fb
        assert f is not None
        change = FindingChange(id=f.id, subject=f.subject, layer=f.layer, title=f.title, status="unchanged",
                               severity=f.severity.value, before_severity=fb.severity.value if fb else None,
                               evidence_before=fb.evidence if fb else "", evidence_after=fa.evidence if fa else "",
                               recoverable_ms=(fb or f).recoverable_ms)
        if fb and not fa:
            change.status, change.reason = _gone(fb, after, checked_after.get(f.id))
        elif fa and not fb:
            change.status, change.reason = _new(fa, before, checked_before.get(f.id))
        out.append(change)
    rank = {"introduced": 0, "fixed": 1, "not checked after": 2, "not checked before": 3, "unchanged": 4}
    return sorted(out, key=lambda c: rank[c.status])


def _gone(f: Finding, after: Run, check: Any) -> tuple[ChangeStatus, str]:
    """A finding of the before-Run the after-Run lacks: fixed, or only not looked at?"""
    if f.recoverable_ms is not None:  # a profile finding: judged by whether the after-Run has a profile
        return ("fixed", "") if _has_profile(after) else ("not checked after", "the after-Run has no profile")
    if check is None:
        return "not checked after", "the after-Run did not run this check"
    if check.status in ("not-checked", "not-applicable"):
        return "not checked after", check.reason
    return "fixed", ""


def _has_profile(run: Run) -> bool:
    """Whether the Run holds a profile (a Run saved with an empty ``profile`` object holds none)."""
    return run.profile is not None and not run.profile.is_empty()


def _new(f: Finding, before: Run, check: Any) -> tuple[ChangeStatus, str]:
    """A finding the before-Run lacks: introduced, or only not looked at before (a bench Run
    against a doctor Run runs different checks)?"""
    if f.recoverable_ms is not None:
        return ("introduced", "") if _has_profile(before) else ("not checked before", "the before-Run has no profile")
    if check is None:
        return "not checked before", "the before-Run did not run this check"
    if check.status in ("not-checked", "not-applicable"):
        return "not checked before", check.reason
    return "introduced", ""


# -- measurements -----------------------------------------------------------------------------
def higher_is_better(unit: str) -> bool:
    return unit.strip() not in TIME_UNITS


def per_sample_values(m: Measurement) -> list[float]:
    """The raw samples (seconds) in the figure's own unit: value = work / time for rates,
    value ∝ time for latencies, both scaled so the median sample gives ``m.value``."""
    med = m.stats.get("median") if m.stats else None
    if m.value is None or not m.samples:
        return []
    if not med:
        med = statistics.median(m.samples)
    if not med:
        return []
    if higher_is_better(m.unit):
        return [m.value * med / s for s in m.samples if s > 0]
    return [m.value * s / med for s in m.samples]


def _pct(x: float) -> float:
    return round((x - 1) * 100, 3)


def measurement_delta(mb: Measurement | None, ma: Measurement | None, bound_parts: set[str],
                      alpha: float = ALPHA) -> MeasurementDelta:
    m = ma or mb
    assert m is not None
    hib = higher_is_better(m.unit)
    parts = set(BENCH_HARDWARE.get(m.bench, ("gpu",)))
    d = MeasurementDelta(name=m.name, bench=m.bench, unit=m.unit, before=mb.value if mb else None,
                         after=ma.value if ma else None, verdict="not compared", higher_is_better=hib,
                         hardware_bound=bool(parts & bound_parts), sweep=bool(m.params.get("sweep")))
    if mb is None or ma is None:
        d.note = "only in the before-Run" if ma is None else "only in the after-Run"
        return d
    if mb.status != "ok" or ma.status != "ok" or mb.value is None or ma.value is None:
        which = [f"{side}: {x.status}{f' ({x.reason})' if x.reason else ''}" for side, x in
                 (("before", mb), ("after", ma)) if x.status != "ok" or x.value is None]
        d.note = "; ".join(which)
        return d
    if mb.unit != ma.unit:
        d.note = f"units differ ({mb.unit} vs {ma.unit})"
        return d
    if mb.method_version != ma.method_version:
        d.note = f"method changed (v{mb.method_version} → v{ma.method_version}); figures are not comparable"
        return d
    if mb.value:
        d.delta_pct = round((ma.value / mb.value - 1) * 100, 3)
        d.change_pct = d.delta_pct if hib else round((mb.value / ma.value - 1) * 100, 3) if ma.value else None
    vb, va = per_sample_values(mb), per_sample_values(ma)
    d.n_before, d.n_after = len(vb), len(va)
    c = compare(vb, va, key=m.name, alpha=alpha)
    if c is None:
        d.verdict = NOISE
        d.note = "too few raw samples to judge the change against the noise"
        return d
    d.p_value = c.p_value
    d.ci_low_pct, d.ci_high_pct = _pct(c.ci_low), _pct(c.ci_high)
    d.significant = c.significant
    better = (c.ratio > 1) == hib
    d.verdict = (IMPROVED if better else REGRESSED) if c.significant else NOISE
    if d.hardware_bound:
        d.note = "hardware differs: this compares the machines, not the change"
    elif c.significant and hib and (gap := _capped_gap(mb, ma, vb, va)) is not None:
        # At the power cap a GPU runs full clocks for a run's first samples and slower once the cap
        # bites, so two runs' medians move with how warm the GPU was (7-17% seen on H100/H200 GEMMs)
        # while their fastest samples agree: that is not the change.
        d.verdict = NOISE
        d.note = (f"both runs hit the power cap: fastest samples {max(vb):.4g} vs {max(va):.4g} "
                  f"({gap:+.1f}%); the medians differ by the clocks the cap lowered")
    return d


CAPPED_FAST_AGREE_PCT = 3.0  # fastest samples this close: the same GPU capability


def _capped_gap(mb: Measurement, ma: Measurement, vb: list[float], va: list[float]) -> float | None:
    """The fastest samples' gap in % when both figures were measured at the power cap and it is small."""
    capped = all(any("power cap" in n for n in m.notes) for m in (mb, ma))
    if not (capped and vb and va and max(vb) > 0):
        return None
    gap = (max(va) / max(vb) - 1) * 100
    return gap if abs(gap) <= CAPPED_FAST_AGREE_PCT else None


def trial_figures(run: Run) -> list[Measurement]:
    """A trial's arms as figures to compare (``try.<arm>.step``, ms per step, every timed step of every run as
    a sample), so that two trials (before and after a change to the script, or on two machines) diff as
    benchmarks do."""
    if run.trial is None:
        return []
    out = []
    for arm in run.trial.arms:
        steps = [x for r in arm.runs for x in r.step_ms]
        if not steps:
            continue
        med = statistics.median(steps)
        out.append(Measurement(bench="try", name=f"try.{arm.id}.step", value=round(med, 4), unit="ms",
                               params={"fixes": list(arm.fixes)}, samples=[x / 1e3 for x in steps],
                               stats={"median": med / 1e3, "n": float(len(steps))}))
    return out


def measurement_deltas(before: Run, after: Run, bound_parts: set[str], alpha: float = ALPHA) -> list[MeasurementDelta]:
    b = {m.name: m for m in [*before.measurements, *trial_figures(before)]}
    a = {m.name: m for m in [*after.measurements, *trial_figures(after)]}
    names = list(b) + [n for n in a if n not in b]
    return [measurement_delta(b.get(n), a.get(n), bound_parts, alpha) for n in names]


# -- profile ----------------------------------------------------------------------------------
def profile_delta(before: Run, after: Run, findings: list[FindingChange]) -> ProfileDelta | None:
    pb, pa = before.profile, after.profile
    bb, ba = (pb.breakdown() if pb else None), (pa.breakdown() if pa else None)
    if bb is None and ba is None:
        return None
    bb, ba = bb or {}, ba or {}
    cats = list(bb) + [c for c in ba if c not in bb]
    rows = [CategoryDelta(category=c, before_ms=bb.get(c), after_ms=ba.get(c),
                          delta_ms=(ba[c] - bb[c]) if c in ba and c in bb else None) for c in cats]
    sb, sa, basis = _step_times(pb, pa, bb, ba)
    fixed = [f for f in findings if f.status == "fixed" and f.recoverable_ms]
    return ProfileDelta(
        categories=rows, step_before_ms=sb, step_after_ms=sa, step_basis=basis,
        measured_recovered_ms=(sb - sa) if sb is not None and sa is not None else None,
        predicted_recovered_ms=sum(f.recoverable_ms or 0.0 for f in fixed) if fixed else None,
        predicted_by=[f.id + (f"[{f.subject}]" if f.subject else "") for f in fixed])


def _step_times(pb: Section | None, pa: Section | None, bb: dict[str, float],
                ba: dict[str, float]) -> tuple[float | None, float | None, StepBasis]:
    """The step time before and after, and what it was measured with."""
    ub, ua = (pb.unprofiled_step_ms() if pb else None), (pa.unprofiled_step_ms() if pa else None)
    if ub is not None and ua is not None:
        # both steps were timed without the profiler: compare those, as the predictions are of them
        return ub, ua, "without the profiler"
    return (pb.step_time(bb or None) if pb else None), (pa.step_time(ba or None) if pa else None), "profiled"


# -- the whole diff ---------------------------------------------------------------------------
def _side(run: Run, label: str | None) -> RunSide:
    m = run.meta
    return RunSide(command=m.command, created=m.created, source=m.source, host_id=m.host_id,
                   tool_version=m.tool_version,
                   gpus=run.facts.value("gpu.summary") or m.gpu,  # a profile or try Run: the GPU it ran on
                   file=label or None)


def diff_runs(before: Run, after: Run, before_label: str | None = None, after_label: str | None = None,
              alpha: float = ALPHA) -> Diff:
    hw = factdiff.hardware_diff(before.facts, after.facts)
    drifted, volatile = factdiff.drift(before.facts, after.facts)
    findings = finding_changes(before, after)
    return Diff(before=_side(before, before_label), after=_side(after, after_label), hardware=hw, facts=drifted,
                volatile_facts=volatile, findings=findings,
                measurements=measurement_deltas(before, after, set(hw.components), alpha),
                profile=profile_delta(before, after, findings), alpha=alpha, loadtest=loadtest_diff(before, after, alpha))
