"""The HTML report: one self-contained file (inline CSS, SVG charts, a few lines of JS, nothing fetched).

``render_run(view)`` formats a ``views.RunView``; ``render_diff(diff)`` formats a ``compare.Diff``;
``write_report(run, path)`` is what ``--html FILE`` of any Run-writing command calls. The page shell,
tables and findings are ``html_blocks``', which every HTML renderer shares.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfstack import outfile
from perfstack.records.diff import Diff
from perfstack.model import Measurement, Run
from perfstack.records.profile import OpRow
from perfstack.report import charts, numbers
from perfstack.report.numbers import num, pct
from perfstack.report.html_blocks import Section, code, delta_row, e, finding, page, table
from perfstack.report.loadtest_diff import render_html as loadtest_diff_html
from perfstack.report.loadtest_html import render_loadtest_html
from perfstack.report.loadtest_view import loadtest_view
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
    build,
    is_latency,
    layer_name,
)


# -- run report -------------------------------------------------------------------------------
def _fix_first(d: DoctorView) -> str:
    if not d.fix_first:
        return ""
    items = "".join(f"<li>{code(f.id)}{f' [{e(f.subject)}]' if f.subject else ''}: {e(f.evidence)}</li>"
                    for f in d.fix_first)
    return (f'<div class="banner" id="fix-first"><h2>Fix this first — {e(layer_name(d.fix_first[0].layer))}</h2>'
            f"<ul>{items}</ul><div class=\"muted\">Critical in a lower layer: fix it before tuning above it.</div></div>")


def _doctor(d: DoctorView) -> str:
    s = d.summary
    f, st = s["findings"], s["status"]
    chips = "".join(f'<span class="chip"><span class="sev {k}">{k}</span> {f[k]}</span>'
                    for k in ("critical", "warning", "info"))
    chips += (f'<span class="chip">{s["checks"]} checks: {st.get("passed", 0)} passed, {st.get("found", 0)} with '
              f'findings, {st.get("not-applicable", 0)} not applicable, {st.get("not-checked", 0)} not checked</span>')
    parts = ['<span class="toolbar"></span><h2>Doctor: findings by layer</h2>', f'<div class="chips">{chips}</div>']
    for _lid, name, fs in d.layers:
        if fs:
            parts.append(f"<h3>{e(name)}</h3>" + "".join(finding(x) for x in fs))
    if not any(fs for _, _, fs in d.layers):
        parts.append('<p class="muted">No findings.</p>')
    if d.not_checked:
        rows = [(f"{code(c.id)}", e(c.status), e(c.reason)) for c in d.not_checked]
        parts.append(f"<details><summary>{len(d.not_checked)} checks not applicable or not checked</summary>"
                     + table(("check", "status", "reason"), rows) + "</details>")
    return "".join(parts)


def _bench_row(m: Measurement) -> list[str]:
    if m.status != "ok":
        return [e(m.bench), f"{code(m.name)}", "—", "—", "—", e(m.status), e(m.reason)]
    share = pct(m.fraction)
    peak = num(m.peak, m.unit) if m.peak else "—"
    if is_latency(m):  # lower is better: the "peak" is a reference to stay under
        share, peak = "—", f"≤ {num(m.peak, m.unit)} (reference)" if m.peak else "—"
    if m.expected_fraction and m.fraction is not None:
        share += f' <span class="muted">(≈{m.expected_fraction:.0%} typical)</span>'
    notes = "; ".join(m.notes)
    if m.stats.get("n", 0) > 1 and m.stats.get("cv") is not None:
        notes = f"±{m.stats['cv']:.1%} over {int(m.stats['n'])} runs" + (f"; {notes}" if notes else "")
    verdict = f'<span class="verdict-{e(m.verdict.replace(" ", "-"))}">{e(m.verdict)}</span>'
    return [e(m.bench), f"{code(m.name)}", e(num(m.value, m.unit)), e(peak), share, verdict, e(notes)]


def bar_text(r: dict[str, Any]) -> str:
    text = num(r["value"], r["unit"])
    if r["fraction"] is not None:
        text += f" · {pct(r['fraction'])} of {num(r['peak'])}" if r.get("peak") else f" · {pct(r['fraction'])}"
    return text


def _bench(b: BenchView) -> str:
    parts = ["<h2>Benchmarks against this GPU's peak</h2>"]
    if b.bars:
        rows = [{**r, "text": bar_text(r)} for r in b.bars]
        parts.append(charts.fraction_bars(rows, "Measured figures as a fraction of the SKU's theoretical peak"))
    parts.append(table(("bench", "figure", "measured", "peak", "% of peak", "verdict", "notes"),
                        (_bench_row(m) for m in b.rows), num_cols=(2, 3, 4)))
    for c in b.curves:
        parts.append(f"<h3>{e(c.title)}</h3>")
        parts.append(charts.line_chart(c.series, c.title, "size (bytes)", c.y_label, c.refs, kind=f"curve-{c.bench}"))
    if b.sweep_points:
        parts.append(f'<p class="muted">{b.sweep_points} sweep points are drawn in the curves; the Run JSON has '
                     "every raw sample.</p>")
    return "".join(parts)


def _roofline(r: RooflineView) -> str:
    svg = charts.roofline_chart(r.ceilings, r.slopes, r.points, f"Roofline of {r.gpu}")
    note = (f'<p class="muted">Ceilings: dense peaks from the spec table ({e(r.source)}).</p>' if r.source else
            '<p class="muted">This GPU is not in the spec table: measured points only, no theoretical ceilings.</p>')
    rows = [(e(label), e(group), e(num(x)), e(num(y))) for label, x, y, group in r.points]
    listing = table(("point", "group", "FLOP/byte", "TFLOP/s"), rows, num_cols=(2, 3)) if rows else ""
    return f"<h2>Roofline: {e(r.gpu)}</h2>{svg}{note}{listing}"


def _pct_of(o: OpRow) -> str:
    if o.pct_of_peak is not None:
        return f"{o.pct_of_peak:.0f}% FLOP/s"
    if o.pct_of_hbm is not None:
        return f"{o.pct_of_hbm:.0f}% HBM"
    return ""


def _profile(p: ProfileView) -> str:
    parts = ["<h2>Profile</h2>"]
    chips = ([f'<span class="chip">{e(k)}: {e(v)}</span>' for k, v in p.timing] if p.timing else
             [f'<span class="chip">mean step {e(num(p.step_ms, "ms"))}</span>'] if p.step_ms is not None else [])
    if chips:
        parts.append(f'<div class="chips">{"".join(chips)}</div>')
    if p.steps:
        parts.append("<h3>Time per step by category</h3>")
        if p.steps_note:
            parts.append(f'<p class="muted">{e(p.steps_note)}.</p>')
        parts.append(charts.stacked_bars(p.steps, "Per-step time breakdown", "ms", kind="profile-steps"))
    if p.ranked:
        parts.append(_profile_ranked(p))
    if p.gaps:
        parts.append(_profile_gaps(p))
    if p.ops:
        parts.append(_profile_ops(p))
    if p.kernels:
        parts.append(_profile_kernels(p))
    return "".join(parts)


def _profile_ranked(p: ProfileView) -> str:
    bars = [(f"{f.id}{f' [{f.subject}]' if f.subject else ''}", f.recoverable_ms or 0.0,
             f"{num(f.recoverable_ms)} ms" + (f" ({f.recoverable_pct:.0f}%)" if f.recoverable_pct is not None else ""))
            for f in p.ranked]
    return ("<h3>Findings ranked by recoverable time</h3>"
            + charts.value_bars(bars, "Recoverable time per step", "ms per step", kind="recoverable")
            + "".join(finding(f) for f in p.ranked))


def _profile_gaps(p: ProfileView) -> str:
    keys = [k for k in ("step", "start_ms", "duration_ms", "before", "after", "reason") if any(k in g for g in p.gaps)]
    rows = [[e(num(g[k]) if isinstance(g.get(k), float) else g.get(k, "")) for k in keys] for g in p.gaps]
    return "<h3>Idle gaps</h3>" + table(keys, rows, num_cols=[i for i, k in enumerate(keys) if k.endswith("_ms")])


def _profile_ops(p: ProfileView) -> str:
    rows = [(f'{code(o.op)}', e(o.category), e(o.dtype or ""), e(num(o.time_ms_per_step)), e(num(o.tflops)),
             e(num(o.gbps)), e(_pct_of(o))) for o in p.ops]
    return "<h3>Operators by GPU time</h3>" + table(
        ("operator", "category", "dtype", "ms/step", "TFLOP/s", "GB/s", "of peak"), rows, num_cols=(3, 4, 5, 6))


def _profile_kernels(p: ProfileView) -> str:
    rows = [(e(k.name), e(num(k.time_ms)), e(num(k.intensity)), e(num(k.tflops)))
            for k in p.kernels]
    return "<h3>Kernel classes</h3>" + table(("class", "time (ms)", "FLOP/byte", "TFLOP/s"), rows,
                                              num_cols=(1, 2, 3))


def _estimates(est: EstimateView) -> str:
    parts = ["<h2>Estimates</h2>"] + ([f"<p>{e(est.what)}</p>"] if est.what else [])
    if est.memory:
        parts.append("<h3>Memory against the GPU's capacity</h3>")
        refs = [r for r in (est.capacity, est.total) if r]
        parts.append(charts.stacked_bars(est.memory, "Estimated memory", "GB", refs, kind="memory"))
        for which, total, share in est.memory_totals:
            cap = f" of {num(est.capacity[1], 'GB')} ({pct(share)})" if est.capacity and share is not None else ""
            over = " — <b>does not fit</b>" if share is not None and share > 1 else ""
            parts.append(f'<p>{code(which)}: {e(num(total, "GB"))}{e(cap)}{over}</p>')
    if est.latency:
        parts.append("<h3>Latency bounds</h3>")
        parts.append(charts.value_bars([(p, ms, numbers.human(v, unit)) for p, ms, v, unit in est.latency],
                                       "Latency bounds", "ms", kind="latency"))
    rows = [(f"{code(r.path)}", e(r.label), e(numbers.human(r.value, r.unit)),
             f'<span class="mono">{e(r.formula)}</span>') for r in est.rows]
    parts.append("<details><summary>Every estimated figure, with its formula</summary>"
                 + table(("figure", "what", "value", "formula"), rows, num_cols=(2,)) + "</details>")
    return "".join(parts)


def _try(v: TryView) -> str:
    """The trial: the table of arms, each arm's step times as a strip of dots, the notes, what to apply."""
    rows = [[f"{code(r.id)}", e(r.step), e(r.gain), e(r.ci),
             e(r.predicted) + (f' <span class="muted">({e(r.predicted_by)})</span>' if r.predicted_by else ""),
             f'<span class="verdict {e(r.verdict.replace(" ", "-"))}">{e(r.verdict)}</span>', e(r.numerics),
             e(r.memory), e(r.first_step)] for r in v.rows]
    parts = [f"<h2>Fixes measured without the profiler</h2><p>{code(v.command)}</p>",
             table(HEAD, rows, num_cols=(1, 2, 3, 4, 7, 8)),
             charts.strips([(r.id, r.samples, r.best_ms) for r in v.rows], "Step times of every run, by arm "
                           "(bar: the best run's median)", "ms per step")]
    notes = [f"<li>{code(r.id)}: {e(r.note)}</li>" for r in v.rows if r.note]
    notes += [f"<li>noise: {e(v.noise)}</li>", f"<li>how: {e(v.how)}</li>"] + [f"<li>{e(n)}</li>" for n in v.notes]
    if v.interrupted:
        notes.append("<li>interrupted: the table holds what was measured before Ctrl-C</li>")
    parts.append("<ul>" + "".join(notes) + "</ul>")
    parts.append("<p><b>Apply:</b> " + ", ".join(f"{code(b)}" for b in v.best) + "</p>" if v.best else
                 '<p class="muted">No fix measured a gain that keeps the numbers.</p>')
    return "".join(parts)


def render_run(view: RunView) -> str:
    sections: list[tuple[str, str, str]] = []
    if view.doctor is not None:
        sections.append(("", "", _fix_first(view.doctor)))
        sections.append(("doctor", "Doctor", _doctor(view.doctor)))
    if view.bench is not None:
        sections.append(("bench", "Benchmarks", _bench(view.bench)))
    if view.roofline is not None:
        sections.append(("roofline", "Roofline", _roofline(view.roofline)))
    if view.profile is not None:
        sections.append(("profile", "Profile", _profile(view.profile)))
    if view.estimates is not None:
        sections.append(("estimates", "Estimates", _estimates(view.estimates)))
    if view.trial is not None:
        sections.append(("try", "Fixes measured", _try(view.trial)))
    facts = table(("", ""), ((e(k), e(v)) for k, v in view.facts))
    meta = table(("", ""), ((e(k), e(v)) for k, v in view.meta))
    absent = (f'<p class="muted">Not in this Run: {e(", ".join(view.absent))}.</p>' if view.absent else "")
    sections.append(("machine", "Machine", f"<h2>Machine</h2>{facts}<details><summary>Run metadata</summary>"
                                           f"{meta}</details>{absent}"))
    return page(f"{view.title} report", e(view.gpus), sections)


def render_report(run: Run) -> str:
    """``run`` as a self-contained HTML page: what ``--html FILE`` writes."""
    if (lt := loadtest_view(run)) is not None:  # a load test has its own page
        return render_loadtest_html(lt)
    return render_run(build(run))


def write_report(run: Run, path: str | Path) -> None:
    """Write ``run`` as a self-contained HTML report (replacing ``path`` in one step)."""
    outfile.check(path)
    outfile.write(path, render_report(run))


# -- diff report ------------------------------------------------------------------------------
def _short(v: Any, n: int = 80) -> str:
    s = "—" if v is None else str(v)
    return s if len(s) <= n else s[: n - 1] + "…"


def render_diff(diff: Diff) -> str:
    b, a = diff.before, diff.after
    sub = (f"before: {e(b.file or b.created)} · {e(b.gpus)}<br>"
           f"after: {e(a.file or a.created)} · {e(a.gpus)}")
    sections = [*_diff_banners(diff), _diff_summary(diff)]
    for part in (_diff_facts, _diff_findings, _diff_bench, _diff_loadtest, _diff_profile):
        section = part(diff)
        if section is not None:
            sections.append(section)
    return page("perfstack diff", sub, sections)


def _diff_banners(diff: Diff) -> list[Section]:
    out: list[Section] = []
    if diff.kinds_differ():
        out.append(("", "", f'<div class="banner notice">Note: {e(diff.kinds_differ())}.</div>'))
    if not diff.hardware.same:
        rows = [(e(k), e(_short(diff.hardware.before.value(k))), e(_short(diff.hardware.after.value(k))))
                for k in diff.hardware.differs]
        out.append(("", "", '<div class="banner notice"><h2>The hardware differs</h2>'
                            "Figures bound to the parts that differ are marked: their change measures the "
                            "machines, not your change." + table(("", "before", "after"), rows) + "</div>"))
    return out


def _diff_summary(diff: Diff) -> Section:
    s = diff.summary()
    chips = (f'<span class="chip">{s["facts_drifted"]} facts drifted</span>'
             + "".join(f'<span class="chip">{n} findings {k}</span>' for k, n in s["findings"].items() if n)
             + "".join(f'<span class="chip">{n} figures {k}</span>' for k, n in s["measurements"].items() if n))
    return ("summary", "Summary", f'<h2>Summary</h2><div class="chips">{chips}</div>')


def _diff_facts(diff: Diff) -> Section | None:
    if not diff.facts:
        return None
    rows = [(e(f.category), f"{code(f.key)}", e(_short(f.before)), e(_short(f.after)))
            for f in diff.facts]
    return ("facts", "Facts", "<h2>Facts that drifted</h2>"
            + table(("category", "fact", "before", "after"), rows)
            + f'<p class="muted">{diff.volatile_facts} volatile readings (temperatures, free memory, '
              "pressure) changed and are not listed.</p>")


def _diff_findings(diff: Diff) -> Section | None:
    if not diff.findings:
        return None
    rows = [(e(f.status), f'<span class="sev {e(f.severity)}">{e(f.severity)}</span>',
             f"{code(f.id)}{f' [{e(f.subject)}]' if f.subject else ''}", e(f.title),
             e(f.evidence_after or f.evidence_before), e(f.reason)) for f in diff.findings]
    return ("findings", "Findings", "<h2>Findings</h2>"
            + table(("status", "severity", "finding", "title", "evidence", "note"), rows))


def _diff_bench(diff: Diff) -> Section | None:
    if not diff.measurements:
        return None
    main, sweep = diff.headline_and_sweep()
    points = [(m.name, m.delta_pct, m.ci_low_pct, m.ci_high_pct, m.verdict) for m in main if m.delta_pct is not None]
    html = ("<h2>Benchmarks</h2>" + charts.delta_chart(points, "Change of each figure against its noise")
            + table(DELTA_COLUMNS, (delta_row(m) for m in main), num_cols=DELTA_NUMERIC))
    if sweep:
        html += (f"<details><summary>{len(sweep)} sweep points</summary>"
                 + table(DELTA_COLUMNS, (delta_row(m) for m in sweep), num_cols=DELTA_NUMERIC) + "</details>")
    html += (f'<p class="muted">Significant when a Mann–Whitney U test rejects at p &lt; {diff.alpha:g} and the '
             "95% bootstrap interval of the median's change excludes zero.</p>")
    return ("bench", "Benchmarks", html)


def _diff_loadtest(diff: Diff) -> Section | None:
    if diff.loadtest is None:
        return None
    return ("loadtest", "Load test", loadtest_diff_html(diff.loadtest))


def _diff_profile(diff: Diff) -> Section | None:
    p = diff.profile
    if not p:
        return None
    rows = [(e(r.category), e(num(r.before_ms)), e(num(r.after_ms)),
             e(f"{r.delta_ms:+.2f}" if r.delta_ms is not None else "—")) for r in p.categories]
    html = "<h2>Profile: time per step</h2>" + table(("category", "before (ms)", "after (ms)", "Δ (ms)"), rows,
                                                      num_cols=(1, 2, 3))
    bars = [("before", [(r.category, r.before_ms) for r in p.categories if r.before_ms]),
            ("after", [(r.category, r.after_ms) for r in p.categories if r.after_ms])]
    html += charts.stacked_bars([x for x in bars if x[1]], "Per-step time, before and after", "ms",
                                kind="profile-diff")
    html += (f"<p>Measured recovered: <b>{e(num(p.measured_recovered_ms, 'ms'))}</b> per step "
             f"({e(p.step_basis)}); the fixed "
             f"findings predicted <b>{e(num(p.predicted_recovered_ms, 'ms'))}</b>"
             + (f" ({e(', '.join(p.predicted_by))})" if p.predicted_by else "") + ".</p>")
    return ("profile", "Profile", html)
