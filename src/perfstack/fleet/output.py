"""The fleet's own Run: the analysis with the metadata of how it was gathered."""

from __future__ import annotations

from typing import Any

from perfstack.errors import InputError
from perfstack.records.fleet import FleetAnalysis
from perfstack.model import Run
from perfstack.records.meta import run_meta


def fleet_run(analysis: FleetAnalysis, subcommand: str, source: str, elapsed_s: float,
              extra: dict[str, Any] | None = None) -> Run:
    meta = run_meta("fleet", subcommand=subcommand, source=source, elapsed_s=round(elapsed_s, 3), **(extra or {}))
    return Run(meta=meta, fleet=analysis)


def analysis_of(run: Run, label: str) -> FleetAnalysis:
    """The fleet section of a Run (checked when the Run was loaded); InputError naming the file when it has none."""
    if run.fleet is None:
        raise InputError(f"{label} is not a fleet Run (it has no fleet section)",
                         hint="give a file written by 'perfstack fleet ... -o FILE'")
    return run.fleet
