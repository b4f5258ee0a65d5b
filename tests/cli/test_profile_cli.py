"""perfstack profile's step time without the profiler: --step-ms in trace mode, the measured one in
capture mode, and what reaches the analysis (profile_run is replaced: the analysis is tested elsewhere)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import perfstack.profile.capture as cap
import perfstack.profile.summary as summary
from perfstack.cli.main import main
from perfstack.model import Run
from perfstack.records.meta import RunMeta
from perfstack.records import profile as records

TRACE = Path(__file__).parents[1] / "fixtures" / "traces" / "h100" / "pageable-memcpy.pt.trace.json.gz"
U = {"before_ms": 4.25, "after_ms": 4.31, "before_steps": 5, "after_steps": 5, "step_ms": 4.25, "profiled_ms": 7.1}


@pytest.fixture
def seen(monkeypatch):
    calls: dict = {}

    def fake_profile_run(paths, model_flops_per_step=None, telemetry=None, command="profile", **kw):
        calls.update(kw, paths=list(paths))
        return Run(meta=RunMeta(command=command), profile=records.load({"step_ms": 7.1}))
    monkeypatch.setattr(summary, "profile_run", fake_profile_run)
    return calls


def fake_capture(unprofiled):
    def run(argv, out_dir, plan, nproc=1):
        return cap.CaptureResult(trace_paths=[TRACE], telemetry=[], returncode=0, steps_seen=20, stderr_tail="",
                                 unprofiled=unprofiled)
    return run


@pytest.mark.parametrize("value", ["0", "-3", "abc", "nan", "inf"])
def test_step_ms_must_be_a_positive_number(value, seen, capsys):
    assert main(["profile", "--trace", str(TRACE), "--step-ms", value]) == 2
    err = capsys.readouterr().err
    assert f"--step-ms {value}: must be a finite number of milliseconds greater than 0" in err
    assert "Traceback" not in err and not seen


def test_step_ms_reaches_the_analysis_in_trace_mode(seen, capsys):
    assert main(["profile", "--trace", str(TRACE), "--step-ms", "4.5", "--json"]) == 0
    assert seen["unprofiled_step_ms"] == 4.5 and seen["unprofiled_note"] == "given with --step-ms"
    assert "unprofiled" not in json.loads(capsys.readouterr().out)["profile"]


def test_trace_mode_without_step_ms(seen, capsys):
    assert main(["profile", "--trace", str(TRACE), "--json"]) == 0
    assert seen["unprofiled_step_ms"] is None and seen["unprofiled_note"] is None


def test_capture_mode_passes_the_measured_step_and_prints_the_overhead(monkeypatch, seen, capsys):
    monkeypatch.setattr(cap, "run", fake_capture(dict(U)))
    assert main(["profile", "--json", "--", "python", "train.py"]) == 0
    out, err = capsys.readouterr()
    assert "profiler overhead: 7.10 ms per step profiled vs 4.25 ms without (1.67×)" in err
    assert seen["unprofiled_step_ms"] == 4.25
    assert seen["unprofiled_note"] == ("measured without the profiler over 5 steps before and 5 after the "
                                       "profiled window; the faster window is used (capture mode)")
    assert json.loads(out)["profile"]["unprofiled"] == U


def test_step_ms_replaces_the_measured_step_in_capture_mode(monkeypatch, seen, capsys):
    monkeypatch.setattr(cap, "run", fake_capture(dict(U)))
    assert main(["profile", "--step-ms", "5", "--json", "--", "python", "train.py"]) == 0
    assert seen["unprofiled_step_ms"] == 5.0 and seen["unprofiled_note"] == "given with --step-ms"
    assert json.loads(capsys.readouterr().out)["profile"]["unprofiled"] == U


def test_capture_mode_without_a_measurement(monkeypatch, seen, capsys):
    monkeypatch.setattr(cap, "run", fake_capture(None))
    assert main(["profile", "--json", "--", "python", "train.py"]) == 0
    assert "profiler overhead" not in capsys.readouterr().err
    assert seen["unprofiled_step_ms"] is None and seen["unprofiled_note"] is None
