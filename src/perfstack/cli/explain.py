"""perfstack explain [ID]: what a check reads, why it matters, how to fix it."""

from __future__ import annotations

import argparse
import difflib
import json

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfstack.errors import UsageError
from perfstack.model import LAYERS
from perfstack.rules import select_checks


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("explain", parents=[common], help="document one check, or list them all")
    p.add_argument("id", nargs="?", help="a check id, e.g. pcie-link-downgraded")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    checks = {c.id: c for c in select_checks()}
    if args.id is None:
        rows = [{"id": c.id, "layer": c.layer, "severity": c.severity.value, "title": c.title} for c in checks.values()]
        if args.json:
            out.out(json.dumps(rows, indent=2), highlight=False)
            return 0
        t = Table("id", "layer", "severity", "title", box=None, pad_edge=False)
        for r in rows:
            t.add_row(r["id"], r["layer"], r["severity"], r["title"])
        out.print(t)
        out.print(Text(f"{len(rows)} checks; 'perfstack explain ID' for one", style="dim"))
        return 0
    c = checks.get(args.id)
    if c is None:
        close = difflib.get_close_matches(args.id, list(checks), n=3)
        raise UsageError(f"no check named {args.id}",
                         hint=(f"did you mean {', '.join(close)}? " if close else "") + "'perfstack explain' lists them")
    doc = {"id": c.id, "layer": c.layer, "severity": c.severity.value, "title": c.title, "checks": c.doc,
           "why": c.why, "fix": c.fix, "refs": c.refs}
    if args.json:
        out.out(json.dumps(doc, indent=2), highlight=False)
        return 0
    out.print(Text.assemble((c.id, "bold"), f"  ·  {LAYERS[c.layer]}  ·  worst severity {c.severity.value}"))
    out.print(Text(c.title, style="bold"))
    for label in ("checks", "why", "fix", "refs"):
        if doc[label]:
            out.print(Text.assemble((f"\n{label}: ", "bold dim"), doc[label]))
    return 0
