"""Markdown for pasting into issues and pull requests: GitHub tables, no images.

``render_run(view)`` formats a ``views.RunView`` and ``render_diff(diff)`` a ``compare.Diff``. The
curves and the roofline become tables (size × series, ceilings and points), so nothing is lost
without the charts.
"""

from __future__ import annotations

from typing import Any

from perfstack.records.diff import Diff
from perfstack.model import Finding, Measurement
from perfstack.report.numbers import human, num, pct
from perfstack.report.inert import Md, md_code, md_text
from perfstack.report.loadtest_diff import render_md as loadtest_diff_md
from perfstack.report.md_blocks import delta_row, t, table
from perfstack.report.estimate_view import EstimateView
from perfstack.report.try_view import HEAD, TryView
from perfstack.report.views import (
    DELTA_COLUMNS,
    DELTA_NUMERIC,
    BenchView,
    DoctorView,
    ProfileView,
    RooflineView,
    RunView,
    is_latency,
    layer_name,
)
from perfstack.units import size_tick


def _fid(f: Finding, table: bool = True) -> Md:
    return Md(md_code(f.id, table) + (f" \\[{md_text(f.subject)}\\]" if f.subject else ""))


# -- run --------------------------------------------------------------------------------------
def fix_first_md(d: DoctorView) -> str:
    if not d.fix_first:
        return ""
    items = "\n".join(f"> - {_fid(f, table=False)}: {t(f.evidence)}" for f in d.fix_first)
    return (f"> [!CAUTION]\n> **Fix this first — {t(layer_name(d.fix_first[0].layer))}.** Critical in a lower layer: "
            f"fix it before tuning above it.\n>\n{items}")


def doctor_md(d: DoctorView) -> str:
    f, st = d.summary["findings"], d.summary["status"]
    out = ["## Doctor",
           f"**{f['critical']} critical, {f['warning']} warning, {f['info']} info** · {d.summary['checks']} checks: "
           f"{st.get('passed', 0)} passed, {st.get('found', 0)} with findings, {st.get('not-applicable', 0)} not "
           f"applicable, {st.get('not-checked', 0)} not checked"]
    rows = [(name, x.severity.value, _fid(x), x.evidence, ("on the host: " if x.host_action else "") + x.fix)
            for _lid, name, fs in d.layers for x in fs]
    if rows:
        out.append(table(("layer", "severity", "finding", "observed", "fix"), rows))
    if d.not_checked:
        nc = table(("check", "status", "reason"), ((md_code(c.id), c.status, c.reason) for c in d.not_checked))
        out.append(f"<details><summary>{len(d.not_checked)} checks not applicable or not checked</summary>\n\n"
                   f"{nc}\n\n</details>")
    return "\n\n".join(out)


def bench_row(m: Measurement) -> list[str]:
    if m.status != "ok":
        return [md_code(m.name), "—", "—", "—", m.status, m.reason]
    share = pct(m.fraction) + (f" (≈{m.expected_fraction:.0%} typical)" if m.expected_fraction else "")
    peak = num(m.peak, m.unit) if m.peak else "—"
    if is_latency(m):
        share, peak = "—", f"≤ {num(m.peak, m.unit)} (reference)" if m.peak else "—"
    spread = (f"±{m.stats['cv']:.1%} over {int(m.stats['n'])} runs" if m.stats.get("n", 0) > 1
              and m.stats.get("cv") is not None else "")
    return [md_code(m.name), num(m.value, m.unit), peak, share, m.verdict, "; ".join(filter(None, [spread, *m.notes]))]


def bench_md(b: BenchView) -> str:
    out = ["## Benchmarks", table(("figure", "measured", "peak", "% of peak", "verdict", "notes"),
                                  (bench_row(m) for m in b.rows), right=(1, 2, 3))]
    for c in b.curves:
        sizes = sorted({x for _, ps in c.series for x, _ in ps})
        values = {name: dict(ps) for name, ps in c.series}
        rows = [[size_tick(x)] + [num(values[name].get(x)) for name, _ in c.series] for x in sizes]
        refs = "; ".join(f"{t(label)}: {num(v)}" for label, v in c.refs)
        out.append(f"### {t(c.title)}\n\n{t(c.y_label)}" + (f" ({refs})" if refs else "") + "\n\n"
                   + table(["size"] + [name for name, _ in c.series], rows, right=range(1, len(c.series) + 1)))
    return "\n\n".join(out)


def roofline_md(r: RooflineView) -> str:
    out = [f"## Roofline: {t(r.gpu)}"]
    if r.ceilings or r.slopes:
        rows = [(f"{label} peak", f"{num(v)} TFLOP/s",
                 f"{num(r.ridges[label])} FLOP/B" if label in r.ridges else "—") for label, v in r.ceilings]
        rows += [(label, f"{num(bw)} TB/s", "—") for label, bw, _ in r.slopes]
        out.append(table(("ceiling", "value", "ridge point"), rows, right=(1, 2)))
    else:
        out.append("This GPU is not in the spec table: measured points only.")
    if r.points:
        out.append(table(("point", "group", "FLOP/byte", "TFLOP/s"),
                         ((label, g, num(x), num(y)) for label, x, y, g in r.points), right=(2, 3)))
    return "\n\n".join(out)


def profile_md(p: ProfileView) -> str:
    out = ["## Profile"]
    if p.timing:
        out.append(" · ".join(f"{t(k)}: **{t(v)}**" for k, v in p.timing))
    elif p.step_ms is not None:
        out.append(f"Mean step: **{num(p.step_ms, 'ms')}**")
    if p.steps:
        per = [dict(segs) for _, segs in p.steps]
        step_rows = [[label] + [num(d.get(c)) for c in p.categories] + [num(sum(d.values()))]
                     for (label, _), d in zip(p.steps, per)]
        out.append("### Time per step by category (ms)\n\n"
                   + (f"{t(p.steps_note)}.\n\n" if p.steps_note else "")
                   + table(["step", *p.categories, "total"], step_rows, right=range(1, len(p.categories) + 2)))
    if p.ranked:
        rows = [(_fid(f), f.severity.value, num(f.recoverable_ms),
                 f"{f.recoverable_pct:.0f}%" if f.recoverable_pct is not None else "—", f.confidence or "—",
                 f.evidence, f.fix)
                for f in p.ranked]
        out.append("### Findings ranked by recoverable time\n\n"
                   + table(("finding", "severity", "recoverable (ms/step)", "share", "confidence", "observed", "fix"),
                           rows, right=(2, 3)))
    if p.gaps:
        keys = [k for k in ("step", "start_ms", "duration_ms", "before", "after", "reason") if any(k in g for g in p.gaps)]
        out.append("### Idle gaps\n\n" + table(keys, ([num(g.get(k)) if isinstance(g.get(k), float) else g.get(k, "")
                                                      for k in keys] for g in p.gaps)))
    if p.ops:
        out.append("### Operators by GPU time\n\n" + table(
            ("operator", "category", "dtype", "ms/step", "TFLOP/s", "GB/s"),
            ((o.op, o.category, o.dtype or "", num(o.time_ms_per_step), num(o.tflops), num(o.gbps)) for o in p.ops),
            right=(3, 4, 5)))
    if p.kernels:
        out.append("### Kernel classes\n\n" + table(
            ("class", "time (ms)", "FLOP/byte", "TFLOP/s"),
            ((k.name, num(k.time_ms), num(k.intensity), num(k.tflops)) for k in p.kernels),
            right=(1, 2, 3)))
    return "\n\n".join(out)


def estimates_md(est: EstimateView) -> str:
    out = ["## Estimates"] + ([t(est.what)] if est.what else [])
    for which, total, share in est.memory_totals:
        cap = f" of {t(est.capacity[0])} {num(est.capacity[1], 'GB')} ({pct(share)})" if est.capacity else ""
        fits = "" if share is None else (" — fits" if share <= 1 else " — **does not fit**")
        out.append(f"**memory {t(which)}**: {num(total, 'GB')}{cap}{fits}")
    if est.memory:
        out.append(table(("component", "GB"), ((name, num(v)) for _, segs in est.memory for name, v in segs),
                         right=(1,)))
    rows = [(md_code(r.path), r.label, human(r.value, r.unit), md_code(r.formula) if r.formula else "") for r in est.rows]
    out.append(table(("figure", "what", "value", "formula"), rows, right=(2,)))
    return "\n\n".join(out)


def try_md(v: TryView) -> str:
    """The trial: one row per arm, then how it was measured, the notes and what to apply."""
    rows = [[md_code(r.id), r.step, r.gain, r.ci, r.predicted + (f" ({r.predicted_by})" if r.predicted_by else ""),
             r.verdict, r.numerics, r.memory, r.first_step] for r in v.rows]
    out = [f"## Fixes measured without the profiler\n\n{md_code(v.command)}",
           table(HEAD, rows, right=(1, 2, 3, 4, 7, 8))]
    notes = [f"- **{md_code(r.id)}**: {t(r.note)}" for r in v.rows if r.note]
    notes += [f"- noise: {t(v.noise)}", f"- how: {t(v.how)}"] + [f"- {t(n)}" for n in v.notes]
    if v.interrupted:
        notes.append("- interrupted: the table holds what was measured before Ctrl-C")
    out.append("\n".join(notes))
    out.append(f"**Apply:** {', '.join(md_code(b) for b in v.best)}" if v.best else
               "_No fix measured a gain that keeps the numbers._")
    return "\n\n".join(out)


def machine_md(view: RunView) -> str:
    return "## Machine\n\n" + table(("", ""), view.facts)


def render_run(view: RunView) -> str:
    meta = dict(view.meta)
    head = [f"# {t(view.title)} report", f"{t(view.gpus)}  \n" + " · ".join(f"{t(k)}: {t(v)}" for k, v in meta.items())]
    parts = head
    if view.doctor is not None:
        parts += [x for x in (fix_first_md(view.doctor), doctor_md(view.doctor)) if x]
    if view.bench is not None:
        parts.append(bench_md(view.bench))
    if view.roofline is not None:
        parts.append(roofline_md(view.roofline))
    if view.profile is not None:
        parts.append(profile_md(view.profile))
    if view.estimates is not None:
        parts.append(estimates_md(view.estimates))
    if view.trial is not None:
        parts.append(try_md(view.trial))
    parts.append(machine_md(view))
    if view.absent:
        parts.append(f"_Not in this Run: {t(', '.join(view.absent))}._")
    return "\n\n".join(parts) + "\n"


# -- diff -------------------------------------------------------------------------------------
def _short(v: Any, n: int = 70) -> str:
    s = "—" if v is None else str(v)
    return s if len(s) <= n else s[: n - 1] + "…"


def render_diff(diff: Diff) -> str:
    b, a = diff.before, diff.after
    out = ["# perfstack diff",
           f"**before**: {t(b.file or b.created or '')} · {t(b.gpus or '')}  \n"
           f"**after**: {t(a.file or a.created or '')} · {t(a.gpus or '')}"]
    out += _diff_banners(diff)
    out.append(_diff_summary(diff))
    for part in (_diff_facts, _diff_findings, _diff_bench, _diff_loadtest, _diff_profile):
        section = part(diff)
        if section is not None:
            out.append(section)
    return "\n\n".join(out) + "\n"


def _diff_banners(diff: Diff) -> list[str]:
    out = []
    if diff.kinds_differ():
        out.append(f"> [!NOTE]\n> {t(diff.kinds_differ()[0].upper() + diff.kinds_differ()[1:])}.")
    if not diff.hardware.same:
        rows = [(k, _short(diff.hardware.before.value(k)), _short(diff.hardware.after.value(k)))
                for k in diff.hardware.differs]
        out.append("> [!WARNING]\n> **The hardware differs.** Figures marked ⚠ compare the machines, not the change.\n\n"
                   + table(("", "before", "after"), rows))
    return out


def _diff_summary(diff: Diff) -> str:
    s = diff.summary()
    f, m = s["findings"], s["measurements"]
    return (f"**{s['facts_drifted']}** facts drifted · findings: {f['fixed']} fixed, {f['introduced']} introduced, "
            f"{f['unchanged']} unchanged, {f['not checked after']} not checked after, "
            f"{f['not checked before']} not checked before · figures: {m['improved']} "
            f"improved, {m['regressed']} regressed, {m['within noise']} within noise, {m['not compared']} not "
            "compared")


def _diff_facts(diff: Diff) -> str | None:
    if not diff.facts:
        return None
    return ("## Facts that drifted\n\n" + table(
        ("category", "fact", "before", "after"),
        ((x.category, md_code(x.key), _short(x.before), _short(x.after)) for x in diff.facts))
        + f"\n\n_{diff.volatile_facts} volatile readings (temperatures, free memory, pressure) changed and are "
          "not listed._")


def _diff_findings(diff: Diff) -> str | None:
    if not diff.findings:
        return None
    return "## Findings\n\n" + table(
        ("status", "severity", "finding", "title", "evidence", "note"),
        ((x.status, x.severity, Md(md_code(x.id) + (f" \\[{md_text(x.subject)}\\]" if x.subject else "")), x.title,
          x.evidence_after or x.evidence_before, x.reason) for x in diff.findings))


def _diff_bench(diff: Diff) -> str | None:
    if not diff.measurements:
        return None
    main, sweep = diff.headline_and_sweep()
    text = "## Benchmarks\n\n" + table(DELTA_COLUMNS, (delta_row(x) for x in main), right=DELTA_NUMERIC)
    if sweep:
        text += (f"\n\n<details><summary>{len(sweep)} sweep points</summary>\n\n"
                 + table(DELTA_COLUMNS, (delta_row(x) for x in sweep), right=DELTA_NUMERIC) + "\n\n</details>")
    text += (f"\n\n_Significant when a Mann–Whitney U test rejects at p < {diff.alpha:g} and the 95% bootstrap "
             "interval of the median's change excludes zero._")
    return text


def _diff_loadtest(diff: Diff) -> str | None:
    if diff.loadtest is None:
        return None
    return loadtest_diff_md(diff.loadtest)


def _diff_profile(diff: Diff) -> str | None:
    p = diff.profile
    if not p:
        return None
    rows = [(r.category, num(r.before_ms), num(r.after_ms),
             f"{r.delta_ms:+.2f}" if r.delta_ms is not None else "—") for r in p.categories]
    return ("## Profile: time per step\n\n" + table(("category", "before (ms)", "after (ms)", "Δ (ms)"), rows,
                                                      right=(1, 2, 3))
            + f"\n\nMeasured recovered: **{num(p.measured_recovered_ms, 'ms')}** per step "
              f"({t(p.step_basis)}); the fixed findings "
              f"predicted **{num(p.predicted_recovered_ms, 'ms')}**"
            + (f" ({t(', '.join(map(str, p.predicted_by)))})" if p.predicted_by else "") + ".")
