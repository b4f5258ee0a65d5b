"""What a fleet Run's reports show, built once from the Run for the terminal and the HTML report.

The analysis's records (nodes ranked, drift, outliers, uneven findings, heat maps, the all-reduce) are
typed already (``fleet.analysis``), so the view holds them as they are, with what the renderers would
otherwise each compute: the summary counts, where the Runs came from and what the Ray fan-out cost.
The renderers (``fleet_text``, ``fleet_html``) only format a ``FleetView``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfstack.records.fleet import FleetAnalysis
from perfstack.records.meta import FanOut, RunMeta


@dataclass
class FleetView:
    title: str
    source: str  # where the Runs came from: a directory, a Ray cluster
    analysis: FleetAnalysis
    summary: dict[str, Any]  # FleetAnalysis.summary(): nodes, ok, failed, by_severity, drifted_keys, ...
    fanout: str  # what the fan-out through Ray cost per task, or "" (Runs read from files)


def _fanout(fan: FanOut | None) -> str:
    if fan is None or fan.overhead_s_median is None:
        return ""
    return (f"fan-out: {fan.tasks} tasks, overhead per task median {fan.overhead_s_median * 1000:.0f} ms, "
            f"max {(fan.overhead_s_max or 0.0) * 1000:.0f} ms")


def fleet_view(a: FleetAnalysis, meta: RunMeta) -> FleetView:
    """The view of the fleet Run whose analysis is ``a`` and metadata ``meta``."""
    return FleetView(title="perfstack fleet", source=meta.source or "", analysis=a, summary=a.summary(),
                     fanout=_fanout(meta.fanout))
