"""The doctor's pipeline: host → probes → facts → (benchmarks) → rules → findings → Run."""

from __future__ import annotations

import time
from typing import Any, Callable

from perfstack.host import Host
from perfstack.model import Fact, Facts, Measurement, Run, Severity
from perfstack.records.meta import run_meta
from perfstack.probes import collect
from perfstack.checks import Check
from perfstack.rules import evaluate

BenchFn = Callable[[Facts], "list[Measurement]"]
FAIL_ON = ("critical", "warning", "info", "never")


def audit(host: Host, checks: list[Check], source: str, bench: BenchFn | None = None,
          command: str = "doctor") -> Run:
    t0 = time.perf_counter()
    facts = collect(host)
    measurements = bench(facts) if bench else []
    if measurements:
        facts.add(results_fact(measurements))
    findings, results = evaluate(facts, checks)
    meta = run_meta(command, source=source, host_id=facts.value("system.host_id"),
                    elapsed_s=round(time.perf_counter() - t0, 3))
    return Run(meta=meta, facts=facts, findings=findings, checks=results, measurements=measurements)


def results_fact(measurements: list[Measurement]) -> Fact:
    """Benchmark figures as one fact, so rules stay pure functions of facts."""
    keep = ("value", "unit", "peak", "fraction", "expected_fraction", "verdict", "params", "notes", "telemetry")
    return Fact("bench.results", {m.name: {k: getattr(m, k) for k in keep} for m in measurements if m.status == "ok"},
                "perfstack bench")


def summary(run: Run) -> dict[str, Any]:
    """Counts the report's summary line shows."""
    by_sev = {s: sum(1 for f in run.findings if f.severity.value == s) for s in ("critical", "warning", "info")}
    by_status: dict[str, int] = {}
    reasons: dict[str, dict[str, int]] = {"not-checked": {}, "not-applicable": {}}
    for c in run.checks:
        by_status[c.status] = by_status.get(c.status, 0) + 1
        if c.status in reasons:
            reasons[c.status][c.reason] = reasons[c.status].get(c.reason, 0) + 1
    return {"findings": by_sev, "checks": len(run.checks), "status": by_status,
            "reasons": {k: dict(sorted(v.items(), key=lambda kv: -kv[1])) for k, v in reasons.items()}}


def exit_code(run: Run, fail_on: str) -> int:
    """1 when a finding is at or above ``fail_on`` ("never" disables), else 0."""
    if fail_on == "never":
        return 0
    bar = Severity(fail_on).rank
    return 1 if any(f.severity.rank >= bar for f in run.findings) else 0
