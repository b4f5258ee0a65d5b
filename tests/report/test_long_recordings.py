"""A recording of hundreds of steps: every report shows a chosen few (the slowest, the fastest, the
median) with a line that says which and how common the slow ones are; the Run keeps every step."""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace

from rich.console import Console
from synthetic import recorded_profile

from perfstack.model import Run
from perfstack.records import profile as records
from perfstack.report import html, markdown
from perfstack.report.profile_text import render_profile
from perfstack.report.views import FASTEST, MAX_STEPS, SLOWEST, build, chosen_steps

# every 5th step stalls (a checkpoint save, say): 90 ms against 50, with a little spread
WALLS = [90.0 + i / 100 if i % 5 == 4 else 50.0 + (i % 7) / 10 for i in range(60)]


def _steps(walls: list[float]) -> list[records.Step]:
    return [records.Step(step=100 + i, total_ms=w, categories={"gemm": w * 0.6, "idle": w * 0.4})
            for i, w in enumerate(walls)]


def _run(walls: list[float]) -> Run:
    """A real trace's profile with its steps replaced by ``walls``."""
    profile, found = recorded_profile("h100")
    p = records.load(json.loads(json.dumps(profile)))
    return Run(profile=replace(p, steps=_steps(walls)), findings=found)


def test_the_slowest_the_fastest_and_the_median_are_chosen_in_step_order():
    steps = _steps(WALLS)
    shown, note = chosen_steps(steps)
    walls = sorted(WALLS)
    assert [s.step for s in shown] == sorted(s.step for s in shown)
    picked = sorted(s.total_ms for s in shown)
    assert picked[-SLOWEST:] == walls[-SLOWEST:] and picked[:FASTEST] == walls[:FASTEST]
    median = sorted(steps, key=lambda s: (s.total_ms, s.step))[len(steps) // 2]
    assert median in shown and len(shown) == SLOWEST + FASTEST + 1
    assert note is not None and note.startswith("60 steps (wall 50.00–90.59 ms, median 50.")
    assert "12 over 1.1× the median" in note  # the stalls: one step in five


def test_up_to_the_limit_every_step_is_shown_without_a_note():
    steps = _steps(WALLS[:MAX_STEPS])
    assert chosen_steps(steps) == (steps, None)


def test_every_report_shows_the_chosen_steps_and_says_which():
    view = build(_run(WALLS))
    pv = view.profile
    assert pv is not None and len(pv.shown_steps) == SLOWEST + FASTEST + 1
    labels = [label for label, _ in pv.steps]
    assert labels == [f"step {s.step}" for s in pv.shown_steps] + ["mean"]

    buf = io.StringIO()
    render_profile(view, Console(file=buf, width=160, no_color=True))
    text = buf.getvalue()
    rows = re.findall(r"^\s*(\d+)\s+\d+\.\d\d\s+\d+%", text, re.M)
    assert [int(r) for r in rows] == [s.step for s in pv.shown_steps]
    flat = " ".join(text.split())  # (the note wraps at the console's width)
    assert "60 steps (wall" in flat and "-v shows them all" in flat
    buf = io.StringIO()
    render_profile(view, Console(file=buf, width=160, no_color=True), verbose=True)
    assert len(re.findall(r"^\s*\d+\s+\d+\.\d\d\s+\d+%", buf.getvalue(), re.M)) == 60

    md = markdown.render_run(view)
    section = md.split("### Time per step by category (ms)")[1].split("###")[0]
    assert "60 steps (wall" in section
    assert len([line for line in section.splitlines() if line.startswith("| step 1")]) == len(pv.shown_steps)
    assert "60 steps (wall" in html.render_run(view)


def test_a_short_recording_shows_every_step_and_no_note():
    view = build(_run(WALLS[:5]))
    buf = io.StringIO()
    render_profile(view, Console(file=buf, width=160, no_color=True))
    assert len(re.findall(r"^\s*\d+\s+\d+\.\d\d\s+\d+%", buf.getvalue(), re.M)) == 5
    assert "steps (wall" not in buf.getvalue() and "steps (wall" not in markdown.render_run(view)
