"""How bad a finding is: the one vocabulary of severities, from the doctor's checks to the fleet's ranking.

It sits below every record that names a severity (the Run's findings in ``model``, the fleet's section in
``records.fleet``); ``model`` re-exports it."""

from __future__ import annotations

from enum import Enum


class Severity(str, Enum):
    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """Higher is worse; used for sorting and for --fail-on."""
        return {"info": 1, "warning": 2, "critical": 3}[self.value]
