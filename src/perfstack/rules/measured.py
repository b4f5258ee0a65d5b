"""Checks judged from benchmark results (perfstack bench, doctor --bench): measured, not read."""

from __future__ import annotations

from perfstack.model import Facts, NotApplicable
from perfstack.rules.registry import Hit, Hits, check

MEASURED = ("h2d-bandwidth-low", "gemm-throughput-low", "hbm-bandwidth-low", "collective-bandwidth-low")
NO_BENCH = "no benchmark results (run 'perfstack doctor --bench quick' or 'perfstack bench')"


def result(f: Facts, name: str) -> dict:
    results = f.value("bench.results")
    if not results:
        raise NotApplicable(NO_BENCH)
    r = results.get(name)
    if r is None or r.get("value") is None:
        raise NotApplicable(f"benchmark figure {name} was not measured")
    return r
