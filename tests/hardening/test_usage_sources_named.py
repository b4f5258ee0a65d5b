"""Texts that cite the book name it in full: title, author and publisher, at its first mention."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from perfstack.cli.explain import _all_checks
from perfstack.cli.main import main

BUNDLES = Path(__file__).resolve().parents[1] / "fixtures" / "bundles"
FULL = "\"AI Systems Performance Engineering\" (Chris Fregly, O'Reilly)"
MENTION = re.compile(r"\bbook\b", re.I)


def _named_at_first_mention(text: str) -> bool:
    first = MENTION.search(text)
    return first is None or text[first.end():].startswith(" " + FULL)


def _unnamed(texts: dict[str, str]) -> list[str]:
    return [f"{where}: {text[:120]}" for where, text in texts.items() if not _named_at_first_mention(text)]


def test_the_title_is_recognised_only_right_after_the_first_mention():
    assert _named_at_first_mention(f"the book {FULL} puts it at 10x. The book recommends 0")
    assert not _named_at_first_mention("the book puts it at 10x")
    assert not _named_at_first_mention(f"the book puts it at 10x; the book {FULL} recommends 0")
    assert not _named_at_first_mention("in the book's example")


def test_every_check_and_its_references_name_the_book(capsys):
    texts: dict[str, str] = {}
    for cid in _all_checks():
        assert main(["explain", "--json", cid]) == 0
        doc = json.loads(capsys.readouterr().out)
        texts.update({f"{cid}.{k}": doc[k] for k in ("checks", "why", "fix", "refs")})
    cited = [k for k, v in texts.items() if MENTION.search(v)]
    assert len(cited) > 40  # most checks cite the book in their references, a dozen in their texts
    assert _unnamed(texts) == []


def test_reference_figures_name_the_book():
    from perfstack.bench.launch import EAGER_REF
    from perfstack.bench.regime import LATENCY_SOURCE
    from perfstack.specs import practical_fraction

    texts = {"nccl latency reference": LATENCY_SOURCE.format(link="NVLink"), "eager launch reference": EAGER_REF}
    texts.update({f"practical {k}": v.source for k, v in practical_fraction.items()})
    assert any(MENTION.search(t) for t in texts.values())
    assert _unnamed(texts) == []


@pytest.mark.parametrize("bundle", ["h100-busy", "h200x2-idle"])
def test_findings_of_a_recorded_machine_name_the_book(bundle, capsys):
    main(["doctor", "--bundle", str(BUNDLES / bundle), "--json", "-q", "--fail-on", "never"])
    run = json.loads(capsys.readouterr().out)
    texts = {f"{f['id']}.{k}": f.get(k) or "" for f in run["findings"] for k in ("evidence", "why", "fix")}
    assert any(MENTION.search(t) for t in texts.values())  # swappiness 60 on both machines
    assert _unnamed(texts) == []
