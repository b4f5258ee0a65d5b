"""The published sources that perfstack's texts cite, named in full.

A finding, a check's documentation or a reference figure that cites the book names it in full once
("the book {BOOK} puts ..."), and may say "the book" after that in the same text.
"""

from __future__ import annotations

import re

BOOK = "\"AI Systems Performance Engineering\" (Chris Fregly, O'Reilly)"

_BOOK_WORD = re.compile(r"\b[Bb]ook\b")


def name_book(refs: str) -> str:
    """A check's references with their first mention of the book named in full
    ("Book ch. 3 (OS tuning)" -> "the book "AI Systems ..." (...), ch. 3 (OS tuning)")."""
    if "Fregly" in refs:
        return refs
    return _BOOK_WORD.sub(lambda m: f"the book {BOOK},", refs, count=1).replace(",:", ":")
