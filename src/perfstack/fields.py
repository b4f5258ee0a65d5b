"""The checks of values read from outside, in words a refusal can quote.

A Run's records check themselves against their annotations (``records.base``, facts included); what is left
here sits below the records: ``KINDS``, ``one_of`` and ``_show`` are the words ``sections`` (the shapes the
profile and estimate sections must have) and the try section refuse in.
"""

from __future__ import annotations

import math
from typing import Any, Callable


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _text(v: Any) -> bool:
    return isinstance(v, str)


# annotation -> (test, what the message says it must be): the scalars ``sections`` builds its shapes from
KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "str": (_text, "a string"),
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
}


def one_of(*allowed: str) -> Callable[[Any], str]:
    return lambda v: "" if v in allowed else f"must be one of {', '.join(allowed)}, not {_show(v)}"


def _show(v: Any) -> str:
    s = repr(v) if not isinstance(v, (dict, list)) else ("an object" if isinstance(v, dict) else "a list")
    return s if len(s) <= 40 else s[:37] + "..."
