"""perfstack explain [ID]: what a check reads, why it matters, how to fix it."""

from __future__ import annotations

import argparse
import difflib
import json
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfstack.checks import BY_SHARE, FAMILIES, LAYER_NAMES, Check, ladder
from perfstack.errors import UsageError
from perfstack.rules import select_checks
from perfstack.sources import name_book


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("explain", parents=[common], help="document one check, or list them all")
    p.add_argument("id", nargs="?", help="a check id, e.g. pcie-link-downgraded")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def _all_checks() -> dict[str, Check]:
    """Every family of the one registry: the doctor's checks (by layer), then the profile's (ranked by
    recoverable time, so no fixed severity), then the load test's."""
    import perfstack.loadtest.findings  # noqa: F401 — registers the load test's checks
    import perfstack.profile.rules  # noqa: F401 — registers the profile's checks

    checks: dict[str, Check] = {c.id: c for c in select_checks()}
    for family in ("profile", "loadtest"):
        checks.update(FAMILIES[family])
    return checks


def _ladder(c: Check) -> list[str]:
    """The severities a check can report, worst first; a profile finding's comes from the share of the
    step it would recover."""
    return [s.value for s in ladder(c)] if c.severity is not None else [BY_SHARE]


def _severity(c: Check) -> str:
    return _ladder(c)[0]  # the worst, as the JSON has always said


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    checks = _all_checks()
    if args.id is None:
        rows: list[dict[str, Any]] = [
            {"id": c.id, "layer": c.layer, "severity": _severity(c), "severities": _ladder(c), "title": c.title}
            for c in checks.values()]
        if args.json:
            out.out(json.dumps(rows, indent=2), highlight=False)
            return 0
        t = Table("id", "layer", "severity", "title", box=None, pad_edge=False)
        for r in rows:
            t.add_row(r["id"], r["layer"], "/".join(r["severities"]), Text(r["title"]))
        out.print(t)
        out.print(Text(f"{len(rows)} checks; 'perfstack explain ID' for one", style="dim"))
        return 0
    c = checks.get(args.id)
    if c is None:
        close = difflib.get_close_matches(args.id, list(checks), n=3)
        raise UsageError(f"no check named {args.id}",
                         hint=(f"did you mean {', '.join(close)}? " if close else "") + "'perfstack explain' lists them")
    doc: dict[str, Any] = {"id": c.id, "layer": c.layer, "severity": _severity(c), "severities": _ladder(c),
                           "title": c.title, "checks": c.doc, "why": c.why, "fix": c.fix, "refs": name_book(c.refs)}
    if c.assumptions:  # a profile check: what its recoverable-time model takes for granted
        doc.update({"assumptions": c.assumptions, "confidence": c.confidence})
    if args.json:
        out.out(json.dumps(doc, indent=2), highlight=False)
        return 0
    # every severity it can report, worst first: which one a finding gets depends on what it finds
    out.print(Text.assemble((c.id, "bold"), f"  ·  {LAYER_NAMES[c.layer]}  ·  severity {'/'.join(_ladder(c))}"))
    out.print(Text(c.title, style="bold"))
    shown = dict(doc)
    if doc.get("confidence"):
        shown["confidence"] = f"{doc['confidence']} at best (a finding says where its trace leaves it lower)"
    for label in ("checks", "assumptions", "confidence", "why", "fix", "refs"):
        if shown.get(label):
            out.print(Text.assemble((f"\n{label}: ", "bold dim"), shown[label]))
    return 0
