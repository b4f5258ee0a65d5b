"""What a multi-rank trace set adds: the straggler (``profile.straggler``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from perfstack import sections
from perfstack.profile.records.base import Record


@dataclass
class Straggler(Record):
    """The rank whose non-communication time per step is the longest, against the others' median."""

    CHECK = sections.STRAGGLER

    rank: int = 0
    non_comm_ms: float = 0.0
    others_median_ms: float = 0.0
    excess_ms: float = 0.0
    cause: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
