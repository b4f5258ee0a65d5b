"""Fix commands in the terminal report are printed whole, one a line, whatever the width, so that
they can be copied; prose around them wraps at spaces and never splits a word."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from perfstack.cli.main import main
from perfstack.model import Finding, Run, Severity
from perfstack.records.meta import RunMeta
from perfstack.report.text import render_doctor
from perfstack.report.views import build

BUNDLES = Path(__file__).resolve().parents[1] / "fixtures" / "bundles"
LONG = ("echo mq-deadline > /sys/block/nvme0n1/queue/scheduler && "
        "mount -o remount,noatime '/mnt/training data/imagenet-shards' && blockdev --setra 8192 /dev/nvme0n1")
OPTIONS = "MALLOC_CONF=background_thread:true,dirty_decay_ms:10000,muzzy_decay_ms:10000"


def _render(run: Run, width: int, verbose: bool = True) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, no_color=True, highlight=False)
    render_doctor(build(run), console, verbose=verbose)
    return buf.getvalue()


def _run() -> Run:
    f = Finding("io-scheduler", "storage", Severity.WARNING, "Data disk uses a slow I/O scheduler",
                "nvme0n1: scheduler [bfq]", f"run as root: {LONG}, then set LD_PRELOAD with {OPTIONS} (or tcmalloc)",
                why="The scheduler reorders requests.", fix_commands=[LONG, "sysctl -w vm.swappiness=10"])
    return Run(meta=RunMeta(source="bundle"), findings=[f])


def test_each_command_is_one_whole_line_at_60_columns():
    lines = [ln.strip() for ln in _render(_run(), 60).splitlines()]
    assert LONG in lines
    assert "sysctl -w vm.swappiness=10" in lines
    assert not any(ln.endswith(";") for ln in lines)  # not run together on one line either


def test_fix_prose_wraps_at_spaces_without_splitting_a_word():
    out = _render(_run(), 60, verbose=False)
    assert LONG not in out  # without -v only the prose is shown
    words = set(out.split())
    assert OPTIONS in words and "'/mnt/training" in words and "/sys/block/nvme0n1/queue/scheduler" in words
    body = [ln for ln in out.splitlines() if ln.startswith(" " * 11)]
    assert len(body) > 4 and all(len(ln) <= 60 or " " not in ln.strip() for ln in body)


def test_doctor_verbose_prints_every_fix_command_whole(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    main(["doctor", "--bundle", str(BUNDLES / "h100-busy"), "--json", "-q", "--fail-on", "never"])
    commands = [c for f in json.loads(capsys.readouterr().out)["findings"] for c in f.get("fix_commands") or []]
    assert commands
    main(["doctor", "--bundle", str(BUNDLES / "h100-busy"), "-v", "-q", "--fail-on", "never"])
    lines = {ln.strip() for ln in capsys.readouterr().out.splitlines()}
    assert [c for c in commands if c not in lines] == []
