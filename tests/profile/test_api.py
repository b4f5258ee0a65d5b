"""perfstack.profile(): the in-process API, on CPU torch."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pytest

from perfstack.profile.api import Profile, profile

torch = pytest.importorskip("torch")


def steps_in(trace: Path) -> list[str]:
    with gzip.open(trace, "rt") as f:
        doc = json.load(f)
    return sorted({e["name"] for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")})


def train(p: Profile, n: int, fail_at: int | None = None, sleep: float = 0.0) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(n):
        if i == fail_at:
            raise RuntimeError("bad batch")
        time.sleep(sleep)
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
    # skip 1: no step to time before (the first holds the start-up); steps 5-8 after the window
    assert (p.unprofiled["before_steps"], p.unprofiled["after_steps"]) == (0, 4)
    assert p.unprofiled["step_ms"] == p.unprofiled["after_ms"]


def test_step_time_without_the_profiler_before_and_after(tmp_path):
    with profile(steps=3, out_dir=tmp_path, gpus=[], write_run=False) as p:
        train(p, 20, sleep=0.01)
    u = p.unprofiled
    # the default: 2 warm-up steps, 5 timed, then the profiler (warm-up 8, recorded 9-11), then 5 timed
    assert steps_in(p.trace_paths[0]) == sorted(["ProfilerStep#8", "ProfilerStep#9", "ProfilerStep#10"])
    assert u["before_steps"] == 5 and u["after_steps"] == 5
    # a 10 ms sleep per step, in milliseconds (not seconds, not µs); the upper bound leaves room for a loaded
    # machine, where a 10 ms sleep took 128 ms
    assert 5 < u["before_ms"] < 2000 and 5 < u["after_ms"] < 2000
    assert u["step_ms"] == min(u["before_ms"], u["after_ms"]) and 5 < u["profiled_ms"] < 4000


def test_unprofiled_step_reaches_the_run(tmp_path, monkeypatch):
    import perfstack.profile.summary as summary
    from perfstack.model import Run
    from perfstack.records.meta import RunMeta
    from perfstack.records.profile import load
    seen = {}

    def fake_profile_run(paths, telemetry=None, command="profile", **kw):
        seen.update(kw)
        return Run(meta=RunMeta(command=command), profile=load({"step_ms": 1.0}))
    monkeypatch.setattr(summary, "profile_run", fake_profile_run)
    with profile(steps=2, out_dir=tmp_path, gpus=[], unprofiled_steps=3) as p:
        train(p, 12)
    assert (p.unprofiled["before_steps"], p.unprofiled["after_steps"]) == (3, 3)
    assert seen["unprofiled_step_ms"] == p.unprofiled["step_ms"]
    assert seen["unprofiled_note"] == ("measured without the profiler over 3 steps before and 3 after the "
                                       "profiled window; the faster window is used (python api)")
    assert Run.load(p.run_path).profile.unprofiled == p.unprofiled


def test_no_timing_when_the_block_is_too_short_or_timing_is_off(tmp_path):
    with profile(steps=2, skip_first=1, out_dir=tmp_path, gpus=[], write_run=False) as p:
        train(p, 4)  # skip 1, warm-up 2, recorded 3-4, then the block ends
    assert p.trace_paths and p.unprofiled is None
    with profile(steps=2, out_dir=tmp_path, gpus=[], write_run=False, unprofiled_steps=0) as p:
        train(p, 8)
    assert p.unprofiled is None  # the profiler starts after the 2 warm-up steps
    assert steps_in(p.trace_paths[0]) == ["ProfilerStep#3", "ProfilerStep#4"]


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
    assert p.unprofiled["before_steps"] == 1  # step 2, timed before the profiler started


def test_run_json_written_when_the_analysis_is_installed(tmp_path):
    pytest.importorskip("perfstack.profile.analyze")
    with profile(steps=2, skip_first=1, out_dir=tmp_path, gpus=[]) as p:
        train(p, 8)
    assert p.run_path is not None and p.run_path.parent == p.trace_paths[0].parent
    from perfstack.model import Run
    run = Run.load(p.run_path)
    assert run.profile and run.profile.unprofiled == p.unprofiled


def test_bad_arguments():
    from perfstack.errors import UsageError
    with pytest.raises(UsageError, match="steps must be at least 1"):
        profile(steps=0)
    with pytest.raises(UsageError, match="unprofiled_steps must be 0 or more"):
        profile(unprofiled_steps=-1)
