"""Recompute a saved load test's figures, sweep verdict and findings from its request records with the
current rules (the records are what was measured; everything else is derived from them).

    python benchmarks/loadtest_rejudge.py RUN.json [...] [--model-config CONFIG --gpu NAME] [--in-place]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from perfstack.cli.loadtest import _bound
from perfstack.loadtest import findings, metrics, sweep
from perfstack.model import Run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--model-config")
    ap.add_argument("--gpu")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--in-place", action="store_true")
    a = ap.parse_args()
    bound = _bound(a)
    for path in a.runs:
        run = Run.load(path)
        lt = run.loadtest
        if lt is None:
            raise SystemExit(f"{path} is not a load-test Run")
        for lv in lt.levels:
            lv.summary = metrics.summarize(lv.requests, lt.slo)
        if lt.sweep:
            lt.sweep = sweep.summary(lt.levels, lt.slo, lt.sweep.get("stopped"))
        lt.notes = [n for n in lt.notes if not n.startswith("decode bound not computed")]
        run.findings = findings.findings(lt, bound)
        out = Path(path) if a.in_place else Path(tempfile.mkdtemp()) / Path(path).name
        run.save(out)
        print(f"{path}: {', '.join(f.id for f in run.findings) or 'no findings'} -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
