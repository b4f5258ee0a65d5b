"""The published sources that perfstack's texts cite, named in full.

A finding, a check's documentation or a reference figure that cites the book names it in full once
("the book {BOOK} puts ..."), and may say "the book" after that in the same text. The articles are
cited by title and section heading ("{INFRA_ARTICLE} (§2 The driver layer)").
"""

from __future__ import annotations

import re

BOOK = "\"AI Systems Performance Engineering\" (Chris Fregly, O'Reilly)"
INFRA_ARTICLE = "the article \"Compute Infrastructure for ML Workloads\""
KERNEL_ARTICLE = "the article \"Tuning the Linux Kernel for AI & GPU Servers\""
LLM_LINUX_ARTICLE = ("the article \"Advanced Optimization Techniques for Linux Systems: Running Large Language "
                     "Models (LLMs)\"")

_BOOK_WORD = re.compile(r"\b[Bb]ook\b")


def name_book(refs: str) -> str:
    """A check's references with their first mention of the book named in full
    ("Book ch. 3 (OS tuning)" -> "the book "AI Systems ..." (...), ch. 3 (OS tuning)")."""
    if "Fregly" in refs:
        return refs
    m = _BOOK_WORD.search(refs)
    if m is None:
        return refs
    rest = refs[m.end():]
    comma = "" if rest[:1] in ("", ",", ":", ";", ")") else ","  # "Book ch. 3" reads "..., ch. 3"; "Book;" no comma
    return f"{refs[:m.start()]}the book {BOOK}{comma}{rest}"
