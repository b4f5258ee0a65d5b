"""The report's views and its HTML and Markdown renderers, on the recorded Runs."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from synthetic import ESTIMATES, doctor, full_run

from perfstack.compare import diff_runs
from perfstack.records import estimates as estimate_record
from perfstack.model import Measurement, Run
from perfstack.report import charts, html, markdown, md_blocks, numbers
from perfstack.report.views import build, gemm_intensity, series_key

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Checker(HTMLParser):
    """Fails on unbalanced tags; collects charts, their series and external references."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.charts: list[str] = []
        self.series: dict[str, set[str]] = {}
        self.external: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "figure" and a.get("data-chart"):
            self.charts.append(a["data-chart"])
        if "data-series" in a and self.charts:
            self.series.setdefault(self.charts[-1], set()).add(a["data-series"])
        for key in ("src", "href"):
            if a.get(key) and not a[key].startswith(("#", "data:")):
                self.external.append(a[key])
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
            return
        self.stack.pop()


def check(page: str) -> Checker:
    c = Checker()
    c.feed(page)
    c.close()
    assert not c.errors, c.errors[:5]
    assert c.stack == [], c.stack
    assert c.external == [], "the report must not fetch anything"
    assert page.startswith("<!DOCTYPE html>")
    return c


def md_tables(text: str) -> list[list[str]]:
    """Each Markdown table as its lines; every line of a table must have the header's column count."""
    tables, cur = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cur.append(line)
        elif cur:
            tables.append(cur)
            cur = []
    return tables


def columns(line: str) -> int:
    return len(re.split(r"(?<!\\)\|", line.strip())) - 2


# -- views ------------------------------------------------------------------------------------
def test_doctor_only_run_renders_what_is_there():
    view = build(doctor("h100"))
    assert view.doctor is not None and view.bench is None and view.roofline is None
    assert view.absent == ["bench", "profile", "estimates"]
    assert view.doctor.summary["findings"] == {"critical": 0, "warning": 1, "info": 6}
    assert [n for _, n, fs in view.doctor.layers if fs][0] == "Kernel / OS"


def test_full_view_has_every_section_with_series():
    v = build(full_run("h200x2"))
    assert v.absent == []
    assert {c.bench for c in v.bench.curves} == {"transfer", "collective"}
    coll = next(c for c in v.bench.curves if c.bench == "collective")
    assert {"all_reduce", "all_gather"} <= {s for s, _ in coll.series}
    assert v.roofline.gpu == "NVIDIA H200 SXM 141GB"
    assert ("bf16/fp16", pytest.approx(989.4)) in [(label, x) for label, x in v.roofline.ceilings]
    assert any(g == "profile kernel classes" for *_, g in v.roofline.points)
    assert v.roofline.ridges["bf16/fp16"] == pytest.approx(989.4 / 4.8)
    # perfstack's analysis of the recorded 2xH200 DDP traces: the unoverlapped all-reduces lead
    assert v.profile.ranked[0].id == "comm-not-overlapped"
    assert [f.recoverable_ms for f in v.profile.ranked] == sorted((f.recoverable_ms for f in v.profile.ranked),
                                                                  reverse=True)
    est = v.estimates  # perfstack estimate's sheet for Llama-2-7B on an H200
    assert est.capacity == ("NVIDIA H200 SXM 141GB capacity", pytest.approx(141.0))
    sheet = full_run("h200x2").estimates.memory
    parts = dict(est.memory[0][1])
    assert parts["weights"] == pytest.approx(sheet["weights_bytes"] / 1e9)
    assert "decode working set" not in parts  # the peak is in the prefill phase: its working set counts
    assert est.memory_totals[0][1] == pytest.approx(sheet["total_bytes"] / 1e9)  # the estimate's own total
    assert [t[0] for t in est.latency][:2] == ["TTFT lower bound (prefill)", "ITL lower bound (per decode step)"]
    assert not any(b["label"].startswith("launch") for b in v.bench.bars)  # latencies have no peak to fill


def test_nested_estimates_render_generically():
    run = doctor("h100")
    run.estimates = estimate_record.from_dict(ESTIMATES)
    est = build(run).estimates
    assert est.memory[0][0] == "memory" and dict(est.memory[0][1])["kv_cache"] == pytest.approx(17.18)
    assert est.capacity == ("NVIDIA H100 80GB HBM3 memory", pytest.approx(85.520809984))  # from the facts
    assert {r.path for r in est.rows} >= {"memory.weights", "latency.decode_memory_bound", "model"}
    check(html.render_run(build(run)))


def test_gpu_missing_from_spec_table_gives_measured_points_only():
    run = full_run("h100")
    for g in run.facts["gpu.list"].value:
        g["name"] = "NVIDIA Imaginary X1"
    v = build(run)
    assert v.roofline.ceilings == [] and not any(not measured for _, _, measured in v.roofline.slopes)
    assert v.roofline.points
    page = html.render_run(v)
    assert "not in the spec table" in page
    check(page)


def test_helpers():
    assert gemm_intensity({"m": 8192, "n": 8192, "k": 8192, "dtype": "bf16"}) == pytest.approx(8192 / 3)
    assert gemm_intensity({"dtype": "bf16"}) is None
    m = Measurement(bench="h2d", name="h2d.pinned.256MiB", value=1.0, unit="GB/s", params={"bytes": 2**28})
    assert series_key(m) == "h2d.pinned"
    assert charts.nice_ticks(0, 68)[-1] >= 68
    assert numbers.num(1234.5, "GB/s") == "1,234 GB/s" and numbers.num(8) == "8" and numbers.num(None) == "—"


# -- HTML -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["h100", "h200x2"])
def test_html_report_is_well_formed_and_self_contained(name):
    page = html.render_run(build(full_run(name)))
    c = check(page)
    expected = {"peak-bars", "curve-transfer", "roofline", "profile-steps", "recoverable", "memory", "latency"}
    if name == "h200x2":
        expected.add("curve-collective")
    assert expected <= set(c.charts)
    assert {"h2d.pinned", "d2h.pageable"} <= c.series["curve-transfer"]
    assert "ceiling bf16/fp16" in c.series["roofline"] and "GEMM bf16" in c.series["roofline"]
    assert {"gemm", "idle"} <= c.series["profile-steps"]
    assert {"weights", "KV cache (all sequences)"} <= c.series["memory"]
    assert "<script" in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")


def test_html_fix_first_banner_and_escaping():
    run = doctor("h100")
    crit = run.findings[0]
    crit.severity = type(crit.severity)("critical")
    crit.evidence = "<script>alert(1)</script> & more"
    page = html.render_run(build(run))
    check(page)
    assert 'id="fix-first"' in page and "Fix this first — Kernel / OS" in page
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page


def test_empty_run_still_renders():
    page = html.render_run(build(Run()))
    check(page)
    assert "Not in this Run: doctor, bench, profile, estimates" in page
    assert "no NVIDIA GPU seen" in page


def test_html_diff_is_well_formed():
    before, after = full_run("h100", recorded=False), full_run("h100", seed=2, scale=0.9, recorded=False)
    c = check(html.render_diff(diff_runs(before, after, "a.json", "b.json")))
    assert {"deltas", "profile-diff"} <= set(c.charts)
    page = html.render_diff(diff_runs(doctor("h100"), doctor("h200x2")))
    check(page)
    assert "The hardware differs" in page


# -- Markdown ---------------------------------------------------------------------------------
def test_markdown_tables_have_the_right_columns():
    text = markdown.render_run(build(full_run("h200x2")))
    tables = md_tables(text)
    assert len(tables) >= 8
    for t in tables:
        n = columns(t[0])
        assert all(columns(line) == n for line in t), t[:3]
        assert re.fullmatch(r"\|(---:?\|)+", t[1]) and t[1].count("---") == n
    heads = [t[0] for t in tables]
    assert "| layer | severity | finding | observed | fix |" in heads
    assert "| figure | measured | peak | % of peak | verdict | notes |" in heads
    assert any(h.startswith("| size | all_reduce | all_gather |") for h in heads)
    assert "![" not in text  # no images


def test_markdown_escapes_cells():
    assert md_blocks.cell("a|b") == "a\\|b"
    assert md_blocks.cell("DataLoader.__next__") == "DataLoader.\\_\\_next\\_\\_"
    assert md_blocks.cell("LD_PRELOAD <x>") == "LD_PRELOAD \\<x\\>"
    assert md_blocks.cell("`a_b|c`") == "\\`a_b\\|c\\`"  # backticks from outside open no code span
    assert md_blocks.cell("two\nlines") == "two<br>lines"


def test_markdown_diff():
    d = diff_runs(full_run("h100", recorded=False), full_run("h100", seed=2, scale=0.9, recorded=False))
    text = markdown.render_diff(d)
    assert "❌ regressed" in text and "## Benchmarks" in text
    for t in md_tables(text):
        assert all(columns(line) == columns(t[0]) for line in t)
    text = markdown.render_diff(diff_runs(doctor("h100"), doctor("h200x2")))
    assert "[!WARNING]" in text and "The hardware differs" in text
