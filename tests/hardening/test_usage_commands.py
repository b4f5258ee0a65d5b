"""A user's mistakes and dead ends, each one line with the right exit code."""

from __future__ import annotations

from pathlib import Path

import pytest

import perfstack.bench as benches
from perfstack.cli.main import main
from perfstack.model import Measurement

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def test_bench_that_measured_nothing_exits_3_with_the_reason_once(monkeypatch, capsys):
    def nothing(chosen, ctx):
        why = "no CUDA device (torch is a CPU-only build)"
        return [Measurement(bench=b.name, name=b.name, value=None, unit="", status="skipped", reason=why)
                for b in chosen]

    monkeypatch.setattr(benches, "run", nothing)
    assert main(["bench", "host", "p2p"]) == 3
    err = capsys.readouterr().err
    line = next(ln for ln in err.splitlines() if ln.startswith("perfstack: error:"))
    assert line.count("no CUDA device") == 1 and "nothing could be measured" in line


def test_gpu_benchmark_skipped_without_cuda_says_why_once(monkeypatch):
    monkeypatch.setattr(benches, "cuda_devices", lambda: (0, "no CUDA device (torch is a CPU-only build)"))
    ctx = benches.BenchContext(suite="quick", facts=None, device=0, storage_path=None, progress=lambda n: None)
    out = benches.run(benches.select(["p2p"], "quick", None) + [_Quiet()], ctx)
    (p2p,) = [m for m in out if m.bench == "p2p"]
    assert p2p.status == "skipped" and p2p.reason == "no CUDA device (torch is a CPU-only build)"


class _Quiet:
    """A host benchmark that measures nothing, so that not every chosen one needs CUDA."""

    name, needs_cuda, min_gpus = "quiet", False, 0

    def run(self, ctx):
        return []


def test_unknown_model_hint_names_the_real_command(tmp_path, capsys):
    assert main(["estimate", "infer", "-m", str(tmp_path / "nope" / "config.json")]) == 2
    err = capsys.readouterr().err
    assert "--list-models" not in err and "perfstack estimate models" in err


def test_estimate_defaults_fit_a_short_context(capsys):
    assert main(["estimate", "infer", "-m", "gpt2"]) == 0
    assert "prompt 896 · gen 128" in capsys.readouterr().out
    assert main(["estimate", "train", "-m", "gpt2"]) == 0
    assert main(["estimate", "infer", "-m", "gpt2", "--prompt", "1000"]) == 0
    assert "prompt 1000 · gen 24" in capsys.readouterr().out
    # a length the user gave is checked as given, and the message says what to change
    assert main(["estimate", "infer", "-m", "gpt2", "--prompt", "2000"]) == 2
    assert "--prompt" in capsys.readouterr().err


def test_diff_of_runs_of_different_kinds_says_so(capsys):
    before, after = str(RUNS / "h100-doctor.json"), str(RUNS / "h100-profile-capture.json")
    assert main(["diff", before, after]) == 0
    assert "different kinds (doctor before, profile after)" in " ".join(capsys.readouterr().out.split())
    assert main(["diff", before, after, "-f", "md"]) == 0
    assert "different kinds" in capsys.readouterr().out
    assert main(["diff", before, before]) == 0
    assert "different kinds" not in capsys.readouterr().out


@pytest.mark.parametrize("url", ["http://[::1", "http://[::1/v1", "[fe80::1"])
def test_loadtest_url_that_cannot_be_parsed_is_a_usage_error(url, capsys):
    pytest.importorskip("aiohttp")
    assert main(["loadtest", url, "--requests", "3"]) == 2
    err = capsys.readouterr().err
    assert "not a valid URL" in err and "internal error" not in err
