"""perfstack.profile(): the in-process API, on CPU torch."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from perfstack.profile.api import Profile, profile

torch = pytest.importorskip("torch")


def steps_in(trace: Path) -> list[str]:
    with gzip.open(trace, "rt") as f:
        doc = json.load(f)
    return sorted({e["name"] for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")})


def train(p: Profile, n: int, fail_at: int | None = None) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(n):
        if i == fail_at:
            raise RuntimeError("bad batch")
        model(torch.randn(8, 16)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        p.step()


def test_profile_records_the_window_and_detaches(tmp_path):
    with profile(steps=2, skip_first=1, out_dir=tmp_path / "prof", gpus=[0], sample=lambda i: {"power_w": 1.0},
                 write_run=False) as p:
        train(p, 8)
        assert p._prof is None  # detached once the window was written
    assert p.steps_seen == 8 and p.run_path is None
    assert [t.name for t in p.trace_paths] == ["profile.pt.trace.json.gz"]
    assert steps_in(p.trace_paths[0]) == ["ProfilerStep#2", "ProfilerStep#3"]
    assert p.telemetry and all(r["gpu"] == 0 and r["power_w"] == 1.0 for r in p.telemetry)
    assert not p._sampler._thread.is_alive()


def test_exception_in_the_block_keeps_complete_steps_and_propagates(tmp_path):
    with pytest.raises(RuntimeError, match="bad batch"):
        with profile(steps=5, skip_first=0, out_dir=tmp_path, gpus=[]) as p:
            train(p, 10, fail_at=3)
    # step 0 warm-up, 1 and 2 recorded; the open step 3 (cut short) is left out
    assert steps_in(p.trace_paths[0]) == ["ProfilerStep#1", "ProfilerStep#2"]


def test_block_ending_in_warmup_writes_no_trace(tmp_path):
    with profile(steps=2, skip_first=2, out_dir=tmp_path, gpus=[]) as p:
        train(p, 3)
    assert p.trace_paths == [] and p.run_path is None


def test_run_json_written_when_the_analysis_is_installed(tmp_path):
    pytest.importorskip("perfstack.profile.analyze")
    with profile(steps=2, skip_first=1, out_dir=tmp_path, gpus=[]) as p:
        train(p, 5)
    assert p.run_path is not None and p.run_path.parent == p.trace_paths[0].parent
    from perfstack.model import Run
    assert Run.load(p.run_path).profile


def test_bad_arguments():
    from perfstack.errors import UsageError
    with pytest.raises(UsageError, match="steps must be at least 1"):
        profile(steps=0)
