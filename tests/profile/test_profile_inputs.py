"""Malformed input, a property test of the loader, and the CLI."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfstack.cli.main as cli_main
from perfstack.cli import profile as profile_cli
from perfstack.errors import InputError
from perfstack.profile.analyze import analyze
from perfstack.profile.summary import profile_run
from perfstack.profile.trace import load

T = Path(__file__).parents[1] / "fixtures" / "traces" / "h100"
REAL = T / "pageable-memcpy.pt.trace.json.gz"


def main(argv):
    if profile_cli not in cli_main.COMMANDS:  # until cli/main.py registers it
        cli_main.COMMANDS = cli_main.COMMANDS + (profile_cli,)
    return cli_main.main(argv)


def real_text() -> str:
    return gzip.decompress(REAL.read_bytes()).decode()


@pytest.mark.parametrize("content,msg", [
    (b"", "empty"),
    (b"{not json", "not valid JSON"),
    (b"[1, 2, 3]", "not one from torch.profiler"),
    (b'{"traceEvents": [{"ph": "X", "cat": "foo", "name": "a", "ts": 1, "dur": 2}]}', "not one from torch.profiler"),
    (b'{"schemaVersion": 1, "traceEvents": []}', "empty profiling window"),
    (b'{"nsys_version": "2024.1", "data": []}', "nsys"),
    (b'"hello"', "not a Chrome trace"),
])
def test_bad_files_raise_input_error_naming_the_file(tmp_path, content, msg):
    p = tmp_path / "t.json"
    p.write_bytes(content)
    with pytest.raises(InputError) as e:
        load(p)
    assert str(p) in e.value.message and msg in e.value.message


def test_gz_that_is_not_gzip(tmp_path):
    p = tmp_path / "t.json.gz"
    p.write_text("{}")
    with pytest.raises(InputError, match="not gzip"):
        load(p)


def test_truncated_json_keeps_partial_results(tmp_path):
    text = real_text()
    p = tmp_path / "cut.json"
    p.write_text(text[: len(text) * 2 // 3])
    t = load(p)
    assert t.warnings and "truncated" in t.warnings[0]
    s = analyze(t)
    assert s.section.n_steps >= 1


def test_truncated_gzip_keeps_partial_results(tmp_path):
    raw = REAL.read_bytes()
    p = tmp_path / "cut.json.gz"
    p.write_bytes(raw[: len(raw) // 2])
    t = load(p)
    assert any("truncated" in w for w in t.warnings)


def test_no_profiler_steps_whole_trace_is_one_step(tmp_path):
    d = json.loads(real_text())
    d["traceEvents"] = [e for e in d["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    p = tmp_path / "nosteps.json"
    p.write_text(json.dumps(d))
    run = profile_run([p])
    assert run.profile.n_steps == 1 and run.profile.notes


def test_cpu_only_trace(tmp_path):
    d = json.loads(real_text())
    d["traceEvents"] = [e for e in d["traceEvents"] if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")]
    p = tmp_path / "cpu.json"
    p.write_text(json.dumps(d))
    run = profile_run([p])
    assert run.profile.busy_ms == 0 and any("CPU-only" in n for n in run.profile.notes)
    assert "gpu-idle" not in [f.id for f in run.findings]


def test_duplicate_ranks_rejected():
    with pytest.raises(InputError, match="same rank"):
        profile_run([T.parent / "h200x2" / "ddp-not-overlapped.rank0.pt.trace.json.gz"] * 2)


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
                           lambda c: st.lists(c, max_size=5) | st.dictionaries(st.text(max_size=12), c, max_size=5),
                           max_leaves=30)
event = st.fixed_dictionaries({"ph": st.sampled_from(["X", "i", "s", 1]),
                               "cat": st.sampled_from(["kernel", "gpu_memcpy", "cpu_op", "cuda_runtime",
                                                       "user_annotation", None]),
                               "name": st.sampled_from(["ProfilerStep#1", "aten::mm", "cudaLaunchKernel",
                                                        "Memcpy HtoD (Pageable -> Device)", "x", 3]),
                               "ts": st.one_of(st.floats(-1e3, 1e6), st.text(max_size=3), st.none()),
                               "dur": st.one_of(st.floats(-5, 1e4), st.none()),
                               "args": json_values})


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
          deadline=None)
@given(doc=st.one_of(json_values, st.fixed_dictionaries({"traceEvents": st.lists(event, max_size=12)},
                                                       optional={"deviceProperties": json_values,
                                                                 "distributedInfo": json_values})))
def test_property_any_json_is_a_result_or_input_error(tmp_path, doc):
    p = tmp_path / "prop.json"
    p.write_text(json.dumps(doc))
    try:
        run = profile_run([p])
    except InputError:
        return
    json.dumps(run.to_dict())


def test_cli_json_and_outputs(tmp_path, capsys):
    rc = main(["profile", "--trace", str(REAL), "--json", "-o", str(tmp_path / "r.json"),
               "--html", str(tmp_path / "r.html"), "--model-flops-per-step", "1e12"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["meta"]["command"] == "profile" and doc["findings"][0]["id"] == "pageable-memcpy"
    assert doc["profile"]["mfu"]["source"] == "--model-flops-per-step"
    assert (tmp_path / "r.html").stat().st_size > 1000 and (tmp_path / "r.json").exists()


def test_cli_text_report(capsys):
    assert main(["profile", "--trace", str(REAL), "--no-color"]) == 0
    out = capsys.readouterr().out
    assert "pageable-memcpy" in out and "per step" in out


def test_cli_errors_exit_2_without_traceback(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text("{oops")
    assert main(["profile", "--trace", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "Traceback" not in err
    assert main(["profile"]) == 2
    with pytest.raises(SystemExit) as e:
        main(["profile", "--bogus-option"])
    assert e.value.code == 2


def test_cli_capture_unavailable_exits_3(tmp_path, monkeypatch, capsys):
    # A real run of a script whose interpreter cannot import torch (it drops site-packages from its path,
    # as a Python without torch installed would have): no script can be profiled with that interpreter,
    # so the command cannot run here (3), not a bad input (2).
    script = tmp_path / "train.py"
    script.write_text('import sys\nsys.path[:] = [p for p in sys.path if "-packages" not in p]\nimport torch\n')
    monkeypatch.chdir(tmp_path)
    assert main(["profile", "--", "python", "train.py"]) == 3
    err = capsys.readouterr().err
    assert f"torch is not installed in the Python that perfstack runs scripts with ({sys.executable})" in err
    assert "Traceback" not in err.split("perfstack: error:")[1]


def test_cli_capture_calls_capture_run(monkeypatch, tmp_path, capsys):
    import perfstack.profile.capture as cap
    seen = {}

    def fake(argv, out_dir, plan, nproc=1):
        seen.update(argv=argv, steps=plan.steps, window=plan.window, skip_first=plan.skip_first)
        return cap.CaptureResult(trace_paths=[REAL], telemetry=[
            {"t": i, "sm_clock_mhz": 1400, "power_w": 700, "temperature_c": 88, "clocks_event_reasons": 0x20,
             "utilization_gpu": 100} for i in range(10)], returncode=0, steps_seen=3, stderr_tail="")
    monkeypatch.setattr(cap, "run", fake)
    assert main(["profile", "--steps", "4", "--json", "--", "python", "train.py", "--lr", "1", "--", "x"]) == 0
    assert seen == {"argv": ["python", "train.py", "--lr", "1", "--", "x"], "steps": 4, "window": None,
                    "skip_first": None}
    doc = json.loads(capsys.readouterr().out)
    assert "throttled-during-run" in [f["id"] for f in doc["findings"]]
