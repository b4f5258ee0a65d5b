"""Comparing Runs: ``diff_runs(before, after) -> Diff`` (pure), and the statistics behind its verdicts."""

from perfstack.compare.diff import diff_runs
from perfstack.records.diff import Diff, FindingChange, MeasurementDelta
from perfstack.compare.stats import bootstrap_ratio, compare, mann_whitney

__all__ = ["Diff", "FindingChange", "MeasurementDelta", "bootstrap_ratio", "compare", "diff_runs", "mann_whitney"]
