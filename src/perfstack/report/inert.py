"""Strings from elsewhere (bundles, traces, saved Runs, model configs) shown as text, never obeyed.

A kernel name or a bundle value can carry terminal escape sequences (a new window title, a cleared
screen, an OSC 8 hyperlink) or bidirectional-override characters that make text read differently
from what it is. ``visible`` spells every such character out (``\\x1b``, ``\\u202e``), so the reader
sees that it was there. Terminal output gets it through ``InertHook`` on every Console: it works on
the segments rich is about to write, so it covers every renderer at once, while the escape codes of
perfstack's own styles are added after it and still work. The Markdown and HTML renderers call
``visible`` inside their own escape functions.
"""

from __future__ import annotations

import html
import re

from rich.console import (
    Console,
    ConsoleOptions,
    ConsoleRenderable,
    RenderHook,
    RenderResult,
)
from rich.segment import Segment

# C0 controls except tab and newline, DEL, C1 controls (0x9b is CSI on 8-bit terminals), and the
# bidirectional embeddings, overrides and isolates.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _spell(m: re.Match[str]) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def visible(s: str) -> str:
    """``s`` with every control character written out as an escape (tab and newline kept)."""
    return _CONTROL.sub(_spell, s) if _CONTROL.search(s) else s


class _Inert:
    """A renderable that renders another one with its text made visible."""

    def __init__(self, inner: ConsoleRenderable) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for seg in console.render(self.inner, options):
            if seg.control or not _CONTROL.search(seg.text):
                yield seg
            else:
                yield Segment(visible(seg.text), seg.style)


class InertHook(RenderHook):
    """Installed on every Console perfstack prints with (``protect``)."""

    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [_Inert(r) for r in renderables]


def protect(*consoles: Console) -> None:
    """Make everything later printed on these consoles inert."""
    for c in consoles:
        c.push_render_hook(InertHook())


def html_text(s: str) -> str:
    """Text and attribute values for HTML: control characters spelled out, then entity-escaped."""
    return html.escape(visible(s), quote=True)


class Md(str):
    """Markdown that perfstack wrote itself (a code span, emphasis): passed through as is."""


# Inline Markdown a string could open: escapes, code spans, emphasis, strikethrough, links and
# images, raw HTML and autolinks, entities, table cells, headings, math ($ on GitHub). An
# underscore inside a word never opens emphasis, so snake_case stays readable.
_MD_INLINE = re.compile(r"[\\`*~\[\]<>&|#!$]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
# What opens a block at the start of a line: a list item, a setext underline, an ordered item. A figure
# (-5%, +1.2, 1.36) opens none of them (a marker needs a blank or the line's end after it), so a marker
# followed by a digit is left as written.
_MD_LINE_START = re.compile(r"^([-+=])(?![0-9.])|^(\d{1,9})([.)])(?![0-9])")


def md_text(v: object, breaks: bool = False) -> Md:
    """``v`` as inert Markdown text: it reads as the same characters and opens nothing. Line breaks
    become ``<br>`` (``breaks``, for table cells) or spaces; leading blanks, which could start a code
    block, are dropped."""
    if isinstance(v, Md):
        return v
    lines = []
    for line in visible("" if v is None else str(v)).splitlines():
        line = _MD_INLINE.sub(lambda m: "\\" + m.group(0), line.strip())
        lines.append(_MD_LINE_START.sub(lambda m: "\\" + m.group(1) if m.group(1) else m.group(2) + "\\" + m.group(3),
                                        line))
    return Md(("<br>" if breaks else " ").join(x for x in lines if x))


def md_code(v: object, table: bool = True) -> Md:
    """``v`` as one inline code span, however many backticks it holds; in a ``table`` its pipes are
    escaped (GFM reads ``\\|`` in a cell as a pipe, even inside code)."""
    s = " ".join(visible("" if v is None else str(v)).split())
    if not s:
        return Md("")
    ticks = max((len(r) for r in re.findall(r"`+", s)), default=0)
    fence = "`" * (ticks + 1)
    pad = " " if s[0] in "` " or s[-1] in "` " else ""
    if table:
        s = s.replace("|", "\\|")
    return Md(f"{fence}{pad}{s}{pad}{fence}")
