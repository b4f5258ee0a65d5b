"""Terminal output: control characters from outside are spelled out, rich markup in outside strings
is printed as is, and a Markdown link in a kernel-class name is not a live hyperlink."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from perfstack.cli.main import main
from perfstack.cli.report import render_text
from perfstack.model import Run
from perfstack.report.html import render_report
from perfstack.report.inert import protect, visible
from perfstack.report.views import build

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\\x9b31m\u202eevil"


def test_visible_spells_out_controls_and_keeps_text():
    assert visible("a\tb\nc") == "a\tb\nc"
    assert visible("\x1b[2J") == "\\x1b[2J"
    assert visible("\x9b\x00\x7f\u202e") == "\\x9b\\x00\\x7f\\u202e"


def _write(tmp_path: Path, name: str, data: dict) -> str:
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return str(p)


def _terminal(render) -> str:
    buf = io.StringIO()
    c = Console(file=buf, force_terminal=True, color_system="standard", width=160)
    protect(c)
    render(c)
    return buf.getvalue()


def test_doctor_run_escapes_do_not_reach_the_terminal(tmp_path, capsys):
    data = json.loads((RUNS / "h100-doctor.json").read_text())
    f = data["findings"][0]
    f.update(evidence=ESCAPES, title=ESCAPES, fix=ESCAPES, subject="[/x]" + ESCAPES)
    data["meta"]["source"] = ESCAPES
    assert main(["report", _write(tmp_path, "r.json", data)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x9b" not in out and "\u202e" not in out
    assert "\\x1b]0;pwned" in out  # (the escaped form is longer: the line may be cropped after it)
    run = Run.from_dict(data)
    styled = _terminal(lambda c: render_text(build(run), c, verbose=True))
    assert "\x1b]0;" not in styled and "\x1b[2J" not in styled and "\x1b]8;;http://evil" not in styled
    assert "\x1b[" in styled  # perfstack's own styles still work
    html = render_report(run)
    assert "\x1b" not in html and "\\x1b]0;pwned" in html


def test_markup_in_a_measurement_name_is_printed_as_is(tmp_path, capsys):
    data = json.loads((RUNS / "h100-bench-full.json").read_text())
    m = data["measurements"][0]
    m.update(name="gemm[/x][bold red]" + ESCAPES, bench="[/]", unit="[link=http://e]u")
    assert main(["report", _write(tmp_path, "b.json", data)]) == 0
    out = capsys.readouterr().out
    assert "gemm[/x][" in out and "[/]" in out and "[link=ht" in out and "\x1b" not in out


def test_a_markdown_link_in_a_kernel_class_is_not_a_hyperlink(tmp_path):
    data = json.loads((RUNS / "h100-profile-capture.json").read_text())
    data["profile"]["kernel_classes"].append({"name": "[click me](http://evil.example)", "time_ms": 9.0,
                                              "flops": 1e12, "bytes": 1e9, "tflops": 100.0})
    run = Run.from_dict(data)
    styled = _terminal(lambda c: render_text(build(run), c, verbose=True))
    assert "evil.example" in styled and "\x1b]8;" not in styled


def test_an_error_message_with_escapes_is_printed_inert(tmp_path, capsys):
    bad = tmp_path / ("x\x1b[2J" + ".json")
    bad.write_text("[]")
    assert main(["report", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[2J" in err
