"""--select and --ignore take a layer by the name the report shows as well as by its id; a finding read
twice from the same place says so once."""

from __future__ import annotations

import pytest

from perfstack.errors import UsageError
from perfstack.model import Finding, Severity
from perfstack.report.text_blocks import finding as text_finding
from perfstack.rules import select_checks


@pytest.mark.parametrize("name", ["pcie-topology", "PCIe / topology / NUMA", "pcie/topology/numa", "Kernel / OS"])
def test_a_layer_by_its_id_or_its_shown_name(name):
    chosen = select_checks([name])
    assert chosen and len({c.layer for c in chosen}) == 1


def test_the_shown_name_selects_what_the_id_selects():
    assert [c.id for c in select_checks(["Math libraries & NCCL"])] == [c.id for c in select_checks(["mathlib-nccl"])]
    assert select_checks(ignore=["Kernel / OS"]) == [c for c in select_checks() if c.layer != "kernel"]


def test_an_unknown_name_is_still_a_usage_error():
    with pytest.raises(UsageError):
        select_checks(["Kernel / OS / GPU"])


def test_sources_are_named_once():
    f = Finding(id="x", layer="kernel", severity=Severity.INFO, title="t", evidence="e", fix="f",
                sources=["environment", "environment", "/proc/sys/vm/swappiness"])
    from rich.console import Console
    con = Console(width=200, record=True, no_color=True)
    con.print(text_finding(f, verbose=False))
    text = con.export_text()
    assert "environment, environment" not in text and "environment, /proc/sys/vm/swappiness" in text
