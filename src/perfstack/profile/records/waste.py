"""What each candidate fix recovers (``profile.whatif``, by finding id).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from perfstack.profile.records.base import Record


@dataclass
class WhatIf(Record):
    """A candidate fix replayed (``summary.whatifs``): the time it recovers per step and its share of the
    step, without the profiler (the corrected CPU speed) and as profiled."""

    ms: float = 0.0
    pct: float = 0.0
    ms_profiled: float = 0.0
    pct_profiled: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
