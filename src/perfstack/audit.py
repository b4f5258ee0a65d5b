"""The doctor's pipeline: host → probes → facts → rules → findings → Run."""

from __future__ import annotations

import platform
import time
from datetime import datetime, timezone
from typing import Any

from perfstack import __version__
from perfstack.host import Host
from perfstack.model import Facts, Run
from perfstack.probes import collect
from perfstack.rules import Check, evaluate


def audit(host: Host, checks: list[Check], source: str) -> Run:
    t0 = time.perf_counter()
    facts = collect(host)
    findings, results = evaluate(facts, checks)
    meta: dict[str, Any] = {
        "tool": "perfstack",
        "tool_version": __version__,
        "command": "doctor",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "source": source,
        "host_id": facts.value("system.host_id"),
        "python": platform.python_version(),
        "elapsed_s": round(time.perf_counter() - t0, 3),
    }
    return Run(meta=meta, facts=facts, findings=findings, checks=results)


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


