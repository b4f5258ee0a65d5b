"""Reports at 80 columns and in narrow HTML columns: no figure is cut, no row takes a screenful, no name
breaks inside a word."""

from __future__ import annotations

import io
import re
from pathlib import Path

from rich.console import Console

from perfstack.cli import output
from perfstack.cli.main import main
from perfstack.report.bench_text import render_bench
from perfstack.report.loadtest_text import render_loadtest
from perfstack.report.loadtest_view import loadtest_view
from perfstack.report.views import build

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ROOT / "docs" / "examples" / "loadtest-h100" / "sweep-default.json"  # recorded against a real server
BENCH = ROOT / "tests" / "fixtures" / "runs" / "h100-bench-full.json"
COLLECTIVES = ROOT / "tests" / "fixtures" / "runs" / "h200x2-bench-full.json"


def terminal(render, width: int = 80) -> list[str]:
    c = Console(width=width, force_terminal=True, color_system=None, record=True, file=io.StringIO())
    render(c)
    return c.export_text().splitlines()


def test_the_load_test_table_at_80_columns_cuts_no_figure():
    view = loadtest_view(output.load_run(str(SWEEP)))
    lines = terminal(lambda c: render_loadtest(view, c))
    text = "\n".join(lines)
    assert "…" not in text and max(len(ln) for ln in lines) <= 80
    for row in view.rows:  # every level's figures, whole: TTFT, TPOT, ITL as p50/p99
        line = next(ln for ln in lines if ln.split()[:1] == row[0].split()[:1] and row[2] in ln)
        assert all(figure in line for figure in row[1:]), (row, line)


def test_bench_at_80_columns_keeps_each_figure_on_its_row_and_its_notes_whole():
    view = build(output.load_run(str(BENCH)))
    lines = terminal(lambda c: render_bench(view, c, findings=False))
    text = "\n".join(lines)
    assert "…" not in text and max(len(ln) for ln in lines) <= 80
    shown = [m for m in view.bench.measurements if not m.params.get("sweep")]
    table = [ln for ln in lines if ln and ln.split()[0] in {m.name for m in shown}]
    assert len(table) == len(shown)  # every figure's name whole, at the start of its own row
    rows = lines.index(table[-1]) - lines.index(table[0]) + 1
    assert rows <= 2 * len(shown)  # a row wraps to two lines at most (was 10-15, the notes a word wide)
    flat = " ".join(text.split())
    assert ("gemm.bf16.misaligned: ±0.3% over 30 runs; 8191³ runs at 20% of the 8192³ throughput (155 vs 787 "
            "TFLOP/s); keep GEMM dimensions multiples of 16") in flat


def test_html_names_break_at_their_separators_only(tmp_path, capsys):
    page = tmp_path / "r.html"
    assert main(["report", "-f", "html", "-o", str(page), str(COLLECTIVES)]) == 0
    html = page.read_text()
    assert "<code>gemm.<wbr>bf16.<wbr>misaligned</code>" in html and "<code>collective." in html
    codes = re.findall(r"<code>(.*?)</code>", html)
    assert codes and all(re.fullmatch(r"(?:[^<]*|<wbr>)*", c) for c in codes)
    # no segment of a name between two break points may break: code in a cell wraps as words do
    assert "overflow-wrap:anywhere" not in re.sub(r"\s", "", html.split("td code", 1)[1].split("}", 1)[0])
