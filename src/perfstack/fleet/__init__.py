"""perfstack fleet: the doctor and the benchmarks across many nodes, and what stands out.

Gathering (``gather``: a directory of Runs or bundles; ``ray_engine``: every node of a Ray cluster)
is separate from the analysis (``analysis.analyze``), a pure function of the nodes' Runs reduced to
``summary.NodeSummary`` records.
"""

from perfstack.fleet.analysis import analyze, analyze_runs
from perfstack.records.fleet import FleetAnalysis
from perfstack.fleet.summary import NodeSummary, summarize

__all__ = ["FleetAnalysis", "NodeSummary", "analyze", "analyze_runs", "summarize"]
