"""Markdown output holds strings from Runs, bundles and traces: each must read as the same
characters and open nothing (no heading, link, image, raw HTML, emphasis, code span, table cell).
The checks parse the output with markdown-it-py, the parser rich itself renders Markdown with."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from perfstack.compare import diff_runs
from perfstack.model import Run
from perfstack.report import markdown, md_blocks
from perfstack.report.inert import md_code, md_text, visible
from perfstack.report.views import build

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
MD = MarkdownIt("commonmark").enable("table").enable("strikethrough")
HOSTILE = ["<img src=x onerror=alert(1)>", "[click](javascript:alert(1))", "![i](http://e/x.png)", "# head",
           "> quote", "- item", "1. item", "*em* _em_ **b** ~~s~~", "`code`", "a|b|c", "&lt;script&gt;",
           "<https://evil.example>", "\x1b]0;title\x07\x1b[2J", "x\n# not a heading\n", "    indented",
           "\\", "$x^2$", "[^1]", "<!-- c -->", "===", "---", "text <br> more", "\u202eevil"]
ALPHABET = st.sampled_from(list("\\`*_~[]()<>&|#!$-+=.:;'\"/ \n\tax1\x1b\x07\u202e") + ["http://", "www.", "&amp;"])


def inline_tokens(text: str) -> list:
    return [c for tok in MD.parse(text) if tok.type == "inline" for c in tok.children or []]


def plain(text: str) -> str:
    """The characters a reader sees in an inline run (text and hard/soft breaks)."""
    return "".join(c.content if c.type == "text" else "" for c in inline_tokens(text))


def expected(s: str) -> str:
    return " ".join(x.strip() for x in visible(s).splitlines() if x.strip())


def assert_only_text(text: str, allow_br: bool = False) -> None:
    for c in inline_tokens(text):
        ok = c.type == "text" or (allow_br and c.type == "html_inline" and c.content == "<br>")
        assert ok, (c.type, c.content, text)


@settings(max_examples=300, deadline=None)
@given(st.lists(ALPHABET, max_size=30).map("".join))
def test_text_in_a_paragraph_is_the_same_characters_and_nothing_else(s):
    doc = "lead " + md_text(s)
    blocks = [t.type for t in MD.parse(doc) if t.nesting >= 0 and t.type != "inline"]
    assert blocks in (["paragraph_open"], []), (s, doc)
    assert_only_text(doc)
    assert plain(doc) == ("lead " + expected(s)).rstrip(), (s, doc)


@settings(max_examples=300, deadline=None)
@given(st.lists(ALPHABET, max_size=30).map("".join))
def test_text_as_a_heading_stays_one_heading(s):
    doc = f"## {md_text(s)}\n\nafter"
    types = [t.type for t in MD.parse(doc)]
    assert types.count("heading_open") == 1 and types.count("paragraph_open") == 1, (s, doc)
    assert_only_text(doc)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(ALPHABET, max_size=12).map("".join), min_size=3, max_size=3))
def test_cells_stay_in_their_columns(values):
    doc = md_blocks.table(("a", "b", "c"), [values, values])
    toks = MD.parse(doc)
    assert [t.type for t in toks].count("td_open") == 6, doc
    assert_only_text(doc, allow_br=True)


@settings(max_examples=200, deadline=None)
@given(st.lists(ALPHABET, max_size=20).map("".join))
def test_code_span_holds_exactly_the_value(s):
    doc = md_blocks.table(("x",), [[md_code(s)]])
    codes = [c for c in inline_tokens(doc) if c.type == "code_inline"]
    want = " ".join(visible(s).split())
    if want:
        assert len(codes) == 1 and codes[0].content.strip() == want.strip(), (s, doc)
    inline = f"> - {md_code(s, table=False)}: x"
    codes = [c for c in inline_tokens(inline) if c.type == "code_inline"]
    if want:
        assert len(codes) == 1 and codes[0].content.strip() == want.strip(), (s, inline)


def _hostile_doctor_run() -> Run:
    data = json.loads((RUNS / "h100-doctor.json").read_text())
    f0 = copy.deepcopy(data["findings"][0])
    for i, s in enumerate(HOSTILE):
        f = dict(f0, id=f"x{i}`{s}", subject=s, evidence=s, fix=s, title=s, severity="critical", layer="kernel")
        data["findings"].append(f)
    data["meta"]["source"] = HOSTILE[0]
    data["meta"]["note"] = "\n# injected heading\n<script>x</script>"
    for k in list(data["facts"])[:3]:
        data["facts"][k]["value"] = HOSTILE[1]
    return Run.from_dict(data)


def _our_headings(text: str) -> list[str]:
    toks = MD.parse(text)
    return [toks[i + 1].content for i, t in enumerate(toks) if t.type == "heading_open"]


def _assert_inert_document(text: str) -> None:
    for tok in MD.parse(text):
        if tok.type == "html_block":
            assert re.fullmatch(r"(</?details>|<details><summary>[^<>]*</summary>)\s*", tok.content), tok.content
        for c in tok.children or []:
            assert c.type not in ("link_open", "image"), c
            if c.type == "html_inline":
                assert c.content in ("<br>",), c.content
    assert "\x1b" not in text and "\u202e" not in text


def test_doctor_markdown_is_inert():
    text = markdown.render_run(build(_hostile_doctor_run()))
    _assert_inert_document(text)
    heads = _our_headings(text)
    assert all(h.startswith(("perfstack", "Doctor", "Machine", "Benchmarks", "Roofline", "Profile", "Estimates"))
               or h.endswith(" report") for h in heads), heads
    assert "injected heading" not in heads
    # the fix-first blockquote holds the hostile evidence as text
    assert "onerror" in text and "\\<img" in text


def test_profile_markdown_kernel_classes_are_inert():
    data = json.loads((RUNS / "h100-profile-capture.json").read_text())
    for i, s in enumerate(HOSTILE):
        data["profile"]["kernel_classes"].append({"name": s, "time_ms": 0.1 + i, "flops": None, "tflops": None})
    text = markdown.render_run(build(Run.from_dict(data)))
    _assert_inert_document(text)
    assert "javascript" in text


def test_diff_header_is_inert():
    run = _hostile_doctor_run()
    run.meta.extra["gpus"] = HOSTILE[0]
    d = diff_runs(run, run, "[a](javascript:x).json", "<img src=x onerror=y>.json")
    _assert_inert_document(markdown.render_diff(d))
