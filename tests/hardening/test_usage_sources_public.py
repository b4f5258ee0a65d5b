"""Texts shown to users cite only public sources, by name: the book, the articles by title and section,
vendor and kernel documentation. No internal source ids ("seed 001", "S002:L1930", "catalog K21",
"[thr]") that a user cannot look up."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from perfstack.cli.explain import _all_checks
from perfstack.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
INTERNAL = re.compile(
    r"\b[Ss]eeds? ?S?0\d\d\b"                            # seed 001, Seed S003
    r"|\bS0\d\d\b"                                       # S001, S002:L1930
    r"|\b[A-Z]\d{0,3}:L\d+"                              # B:L8618: a line of a source file
    r"|\b[Cc]atalog(?: conflict| §| [A-Z]{1,2}\d)"        # catalog K21, Catalog §7, catalog conflict E6
    r"|\bconflict E\d|\(and E\d|\bwith E\d"              # the catalog's conflict notes
    r"|\[(?:thr|impl|conflict|EXT)\b"                    # the catalog's markers
    r"|\bblog S\d|\bskill note|\bprofile reference\b|\bDESIGN\b|\breference/\w+\.md"
)


def _internal(texts: dict[str, str]) -> list[str]:
    return [f"{where}: {m.group(0)!r} in {text[max(0, m.start() - 40):m.end() + 40]!r}"
            for where, text in texts.items() for m in INTERNAL.finditer(text or "")]


@pytest.mark.parametrize("text", ["Catalog A01 (and E15); S001:L329-337", "seed 001", "Seed S003 (PCIe knobs)",
                                  "catalog §7 numa-balancing", "blog S001 §2", "(B:L8618)", "10 or more [thr]",
                                  "S002:L2589", "Book ch. 4 (catalog conflict E6)", "DESIGN measurement method"])
def test_internal_ids_are_recognised(text):
    assert _internal({"t": text})


@pytest.mark.parametrize("text", ["Book ch. 3 (NUMA)", "the article \"Compute Infrastructure for ML Workloads\" "
                                  "(§2 The driver layer)", "NVIDIA Xid error documentation (Xid 79)", "--seed 0",
                                  "the built-in catalog of models", "shuffled by the seed", "pytorch/pytorch#86509"])
def test_public_citations_pass(text):
    assert not _internal({"t": text})


def test_every_check_cites_public_sources(capsys):
    texts: dict[str, str] = {}
    for cid, c in _all_checks().items():
        assert main(["explain", "--json", cid]) == 0
        doc = json.loads(capsys.readouterr().out)
        texts.update({f"{cid}.{k}": doc[k] for k in ("title", "checks", "why", "fix", "refs")})
        texts[f"{cid}.refs (raw)"] = getattr(c, "refs", "")
    assert len(texts) > 100
    assert _internal(texts) == []


def test_reference_figures_cite_public_sources():
    from perfstack.bench.launch import EAGER_REF
    from perfstack.bench.regime import LATENCY_SOURCE
    from perfstack.specs import practical_fraction

    texts = {"nccl latency reference": LATENCY_SOURCE, "eager launch reference": EAGER_REF}
    texts.update({f"practical {k}": f"{v.applies_to} {v.source}" for k, v in practical_fraction.items()})
    assert _internal(texts) == []


def test_sources_and_documentation_carry_no_internal_ids():
    """Every text the package can show (check docs, profile and load-test findings, reports, docstrings and
    comments alike) and the user documentation."""
    files = sorted((ROOT / "src" / "perfstack").rglob("*.py")) + [ROOT / "README.md"] + sorted(
        (ROOT / "docs").rglob("*.md"))
    assert len(files) > 50
    texts = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in files}
    assert _internal(texts) == []
