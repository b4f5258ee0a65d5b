"""Rules: one module per stack layer; ``evaluate`` runs the selected checks over facts."""

from __future__ import annotations

import difflib
from typing import Iterable

from perfstack.discover import import_submodules
from perfstack.errors import UsageError
from perfstack.model import (
    LAYERS,
    CheckResult,
    Facts,
    Finding,
    NotApplicable,
    NotChecked,
    Severity,
    layer_rank,
)
from perfstack.checks import Check
from perfstack.rules.registry import CHECKS, Hit
from perfstack.rules.shell import UnsafeValue, lines


def load() -> dict[str, Check]:
    """Every check: each module of this package registers its own with ``@check``."""
    import_submodules(__name__)
    return CHECKS


def _layer(name: str) -> str | None:
    """A layer by its id (``pcie-topology``) or by the name the report shows (``PCIe / topology / NUMA``,
    in any case and spacing)."""
    if name in LAYERS:
        return name
    def squash(s: str) -> str:
        return "".join(ch for ch in s.lower() if ch.isalnum())
    return next((lid for lid, title in LAYERS.items() if squash(name) in (squash(title), squash(lid))), None)


def select_checks(select: Iterable[str] = (), ignore: Iterable[str] = ()) -> list[Check]:
    """Checks chosen by id or layer name, like a linter's --select/--ignore."""
    checks = load()

    def expand(names: Iterable[str], flag: str) -> set[str]:
        ids: set[str] = set()
        for name in names:
            if name in checks:
                ids.add(name)
            elif _layer(name) is not None:
                ids |= {c.id for c in checks.values() if c.layer == _layer(name)}
            else:
                close = difflib.get_close_matches(name, list(checks) + list(LAYERS), n=3)
                raise UsageError(f"{flag} {name}: no check or layer of that name",
                                 hint=(f"did you mean {', '.join(close)}? " if close else "")
                                 + "'perfstack explain' lists every check")
        return ids

    chosen = expand(select, "--select") if select else set(checks)
    chosen -= expand(ignore, "--ignore")
    return sorted((checks[i] for i in chosen), key=lambda c: (layer_rank(c.layer), c.id))


def _finding(c: Check, hit: Hit, sources: list[str]) -> Finding:
    fix = hit.fix or c.fix
    try:
        commands = lines(hit.commands)
    except UnsafeValue as e:
        # A value from the machine or a bundle that no quoting makes safe: no script line.
        commands, fix = [], f"{fix} (not scripted: {e}; do it by hand)"
    severity = Severity(hit.severity) if hit.severity else c.severity
    assert severity is not None  # a doctor check always names its default severity
    return Finding(
        id=c.id, layer=c.layer, severity=severity,
        title=c.title, evidence=hit.evidence, fix=fix, why=hit.why or c.why,
        sources=sources, fix_commands=commands, subject=hit.subject, host_action=hit.host_action,
    )


def run_check(c: Check, facts: Facts) -> tuple[list[Finding], CheckResult]:
    view = facts.view()
    try:
        hits = list(c.fn(view))
    except NotChecked as e:
        return [], CheckResult(c.id, "not-checked", e.reason)
    except NotApplicable as e:
        return [], CheckResult(c.id, "not-applicable", e.reason)
    except Exception as e:  # a bug in one check must not cost the user the rest of the audit
        return [], CheckResult(c.id, "not-checked", f"internal error in this check: {type(e).__name__}: {e}")
    findings = [_finding(c, h, view.sources()) for h in hits]
    return findings, CheckResult(c.id, "found" if findings else "passed")


def order(findings: list[Finding]) -> list[Finding]:
    """Bottom-up by layer, then worst first: the order a user should fix in."""
    return sorted(findings, key=lambda f: (layer_rank(f.layer), -f.severity.rank, f.id, f.subject))


def evaluate(facts: Facts, checks: list[Check]) -> tuple[list[Finding], list[CheckResult]]:
    findings: list[Finding] = []
    results: list[CheckResult] = []
    for c in checks:
        fs, r = run_check(c, facts)
        findings += fs
        results.append(r)
    return order(findings), results


def fix_first(findings: list[Finding]) -> list[Finding]:
    """The critical findings of the lowest layer that has any: everything above them waits.
    Tuning kernels on a GPU stuck at PCIe x4 is wasted work."""
    critical = [f for f in findings if f.severity is Severity.CRITICAL]
    if not critical:
        return []
    lowest = min(layer_rank(f.layer) for f in critical)
    return [f for f in critical if layer_rank(f.layer) == lowest]
