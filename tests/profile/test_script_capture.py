"""capture.run on real tiny scripts (CPU torch), the telemetry sampler, and argv parsing."""

from __future__ import annotations

import gzip
import json
import os
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from perfstack.errors import InputError, UsageError
from perfstack.profile import capture
from perfstack.profile.capture import parse_argv
from perfstack.profile.sampler import TelemetrySampler

torch = pytest.importorskip("torch")

MLP = """
import sys, json
import torch, torch.nn as nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range({n}):
    loss = model(torch.randn(16, 32)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
print("script stdout: done", sys.argv[1:])
open(sys.argv[1], "w").write(json.dumps({{"argv": sys.argv, "name": __name__}}))
"""


def script(tmp_path: Path, body: str, name: str = "train.py") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


def fake_sample(i: int) -> dict:
    return {"sm_clock_mhz": 1980, "power_w": 100.0 + i}


def step_names(trace: Path) -> list[str]:
    with gzip.open(trace, "rt") as f:
        doc = json.load(f)
    return sorted({e["name"] for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")})


def test_run_records_a_window_of_steps(tmp_path, capfd):
    s = script(tmp_path, MLP.format(n=10))
    marker = tmp_path / "ran.json"
    r = capture.run(["python", str(s), str(marker)], tmp_path / "out", capture.Plan(steps=3, skip_first=2), gpus=[0, 1], sample=fake_sample)
    assert r.returncode == 0 and not r.interrupted
    assert r.steps_seen == 10  # >= steps
    assert [p.name for p in r.trace_paths] == ["train.pt.trace.json.gz"]
    assert r.trace_paths[0].parent == tmp_path / "out"
    # 2 skipped (0, 1), 1 warm-up (2), 3 recorded: labelled with the script's own step numbers
    assert step_names(r.trace_paths[0]) == ["ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"]
    ran = json.loads(marker.read_text())  # the script ran to its end, unmodified, as __main__
    assert ran == {"argv": [str(s), str(marker)], "name": "__main__"}
    assert {t["gpu"] for t in r.telemetry} == {0, 1}
    assert all({"time", "t", "sm_clock_mhz"} <= t.keys() for t in r.telemetry)
    out, err = capfd.readouterr()
    assert "script stdout: done" not in out and "script stdout: done" in err  # our stdout is the report's
    assert not list((tmp_path / "out").glob(".perfstack*"))


@pytest.mark.slow
def test_script_that_raises_before_any_step(tmp_path):
    s = script(tmp_path, """
        import torch
        raise ValueError("boom: no data at /data/train")
    """)
    with pytest.raises(InputError, match=r"exited with code 1 before any optimizer step: "
                                         r"ValueError: boom: no data at /data/train"):
        capture.run([sys.executable, str(s)], tmp_path / "out", gpus=[])


@pytest.mark.slow
def test_script_without_optimizer_needs_window(tmp_path):
    s = script(tmp_path, """
        import torch
        x = torch.randn(64, 64)
        for _ in range(5):
            x = torch.tanh(x @ x)
    """, name="infer.py")
    with pytest.raises(InputError, match="without calling an optimizer's step") as e:
        capture.run(["python3", "-u", str(s)], tmp_path / "out", gpus=[])
    assert "--window" in (e.value.hint or "")


@pytest.mark.slow
def test_window_records_one_span_without_optimizer(tmp_path):
    s = script(tmp_path, """
        import time, torch
        x = torch.randn(64, 64)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2:
            x = torch.tanh(x @ x)
            time.sleep(0.01)
    """, name="infer.py")
    t0 = time.monotonic()
    r = capture.run([str(s)], tmp_path / "out", capture.Plan(window=1), gpus=[])
    assert r.returncode == 0 and r.steps_seen == 0
    assert step_names(r.trace_paths[0]) == ["ProfilerStep#0"]
    assert time.monotonic() - t0 < 60


@pytest.mark.slow
def test_script_ending_before_the_window(tmp_path):
    s = script(tmp_path, MLP.format(n=3))
    with pytest.raises(InputError, match="after 3 optimizer steps, before the profile window"):
        capture.run(["python", str(s), str(tmp_path / "m.json")], tmp_path / "out", capture.Plan(steps=3, skip_first=2), gpus=[])


@pytest.mark.slow
def test_crash_inside_the_window_keeps_what_was_recorded(tmp_path):
    s = script(tmp_path, MLP.format(n=5).replace("opt.zero_grad()", "opt.zero_grad()\n    if i == 4: raise SystemExit(3)"))
    r = capture.run(["python", str(s), str(tmp_path / "m.json")], tmp_path / "out", capture.Plan(steps=3, skip_first=2), gpus=[])
    assert r.returncode == 3 and r.steps_seen == 5
    assert step_names(r.trace_paths[0]) == ["ProfilerStep#3", "ProfilerStep#4"]


@pytest.mark.slow
def test_stop_after_window_ends_the_script(tmp_path):
    s = script(tmp_path, MLP.format(n=100000))
    marker = tmp_path / "ran.json"
    r = capture.run(["python", str(s), str(marker)], tmp_path / "out", capture.Plan(steps=2, skip_first=1, stop_after_window=True), gpus=[])
    # 1 skipped, 1 warm-up, 2 recorded, then 5 timed without the profiler before the script ends
    assert r.returncode == 0 and r.steps_seen == 9 and r.trace_paths
    assert not marker.exists()
    assert r.unprofiled["after_steps"] == 5 and r.unprofiled["before_ms"] is None


DECODE = """
import sys
import torch
import perfstack
model = torch.nn.Linear(16, 16).eval()
x = torch.randn(1, 16)
with torch.no_grad():
    for i in range(100000):
        x = torch.tanh(model(x))
        perfstack.step()
        if i == 20 and sys.argv[1:] == ["both"]:
            opt = torch.optim.SGD(model.parameters(), lr=0.0)
        if i >= 20 and sys.argv[1:] == ["both"]:
            opt.step()  # a second kind of boundary after the markers: not counted twice
open(sys.argv[0] + ".ran", "w").write("the script ran to its end")
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["markers", "both"])
def test_step_markers_of_an_inference_loop_are_its_steps(tmp_path, mode):
    # perfstack.step() marks a loop that no optimizer steps; without it the window never starts
    # and --stop-after-window never ends the script
    s = script(tmp_path, DECODE)
    r = capture.run(["python", str(s), mode], tmp_path / "out", capture.Plan(steps=2, skip_first=1, stop_after_window=True), gpus=[])
    assert r.returncode == 0 and r.steps_seen == 9 and r.trace_paths
    assert step_names(r.trace_paths[0]) == ["ProfilerStep#2", "ProfilerStep#3"]
    assert not Path(str(s) + ".ran").exists()


DDP = """
import os
import torch, torch.distributed as dist, torch.nn as nn
dist.init_process_group("gloo")
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(100000):
    model(torch.randn(16, 32)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
"""


@pytest.mark.slow
def test_nproc_profiles_every_rank(tmp_path):
    s = script(tmp_path, DDP)
    r = capture.run(["python", str(s)], tmp_path / "out", capture.Plan(steps=2, skip_first=1, stop_after_window=True, timed_steps=2), nproc=2, gpus=[])
    assert r.returncode == 0 and r.steps_seen >= 4
    names = sorted(p.name for p in r.trace_paths)
    assert names == ["train.rank0.pt.trace.json.gz", "train.rank1.pt.trace.json.gz"]
    for p in r.trace_paths:
        assert step_names(p) == ["ProfilerStep#2", "ProfilerStep#3"]
    assert r.unprofiled is not None and r.unprofiled["step_ms"] > 0


SLEEPY = """
import sys, time
import torch
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(int(sys.argv[1])):
    time.sleep(0.01)
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
"""


@pytest.mark.slow
def test_step_time_is_measured_without_the_profiler_before_and_after(tmp_path):
    s = script(tmp_path, SLEEPY)
    r = capture.run(["python", str(s), "25"], tmp_path / "out", capture.Plan(steps=3), gpus=[])
    u = r.unprofiled
    assert set(u) == set(capture.UNPROFILED_KEYS)
    # the default: 2 warm-up steps, 5 timed, then the profiler (warm-up 8, recorded 9-11), then 5 timed
    assert step_names(r.trace_paths[0]) == sorted(["ProfilerStep#8", "ProfilerStep#9", "ProfilerStep#10"])
    assert u["before_steps"] == 5 and u["after_steps"] == 5
    assert 5 < u["before_ms"] < 100 and 5 < u["after_ms"] < 100  # a 10 ms sleep per step
    assert u["step_ms"] == min(u["before_ms"], u["after_ms"])
    assert 5 < u["profiled_ms"] < 200


@pytest.mark.slow
def test_windows_cut_short_keep_what_they_have(tmp_path):
    s = script(tmp_path, SLEEPY)
    r = capture.run(["python", str(s), "13"], tmp_path / "out", capture.Plan(steps=3), gpus=[])
    assert (r.unprofiled["before_steps"], r.unprofiled["after_steps"]) == (5, 2)  # steps 12 and 13
    # an explicit skip of 2 times step 2 only (the first holds the script's start-up)
    r = capture.run(["python", str(s), "6"], tmp_path / "out", capture.Plan(steps=3, skip_first=2), gpus=[])
    assert r.trace_paths and r.unprofiled["before_steps"] == 1 and r.unprofiled["after_ms"] is None
    assert r.unprofiled["step_ms"] == r.unprofiled["before_ms"]
    # nothing to time: no step before the profiler, none after the window
    r = capture.run(["python", str(s), "5"], tmp_path / "out", capture.Plan(steps=3, skip_first=1), gpus=[])
    assert r.trace_paths and r.returncode == 0 and r.unprofiled is None


@pytest.mark.slow
def test_default_skip_says_so_when_the_script_is_too_short(tmp_path):
    s = script(tmp_path, SLEEPY)
    with pytest.raises(InputError, match=r"after 4 optimizer steps, before the profile window \(steps 9-11, "
                                         r"after up to 7 skipped \(2 warm-up, then up to 5 timed"):
        capture.run(["python", str(s), "4"], tmp_path / "out", capture.Plan(steps=3), gpus=[])


@pytest.mark.slow
def test_ctrl_c_is_forwarded_and_keeps_the_trace(tmp_path):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers need the main thread")
    s = script(tmp_path, MLP.format(n=10**9))
    seen: list = []

    def interrupt(paths):
        seen.extend(paths)
        os.kill(os.getpid(), signal.SIGINT)  # as a Ctrl-C at the terminal reaches perfstack

    before = signal.getsignal(signal.SIGINT)  # Python's own, or SIG_IGN where the tests were started with & by a script
    r = capture.run(["python", str(s), str(tmp_path / "m.json")], tmp_path / "out", capture.Plan(steps=2, skip_first=1), gpus=[], on_trace=interrupt)
    assert r.interrupted and r.returncode == 130
    assert seen == r.trace_paths and r.trace_paths[0].exists()
    assert "KeyboardInterrupt" in r.stderr_tail
    assert signal.getsignal(signal.SIGINT) is before  # the handler it found, given back


class _NoCuda:
    class cuda:
        @staticmethod
        def is_initialized():
            return False


@pytest.mark.parametrize("skip_first, budget_s, started_at, before_steps", [
    (None, 60.0, 7, 5),  # the default: 2 untimed warm-up steps, 5 timed
    (None, 0.0, 3, 1),  # slow steps: the budget is spent after one timed step
    (0, 60.0, 0, 0), (1, 60.0, 1, 0),  # nothing before the profiler, or only the start-up step
    (2, 60.0, 2, 1), (3, 60.0, 3, 1), (4, 60.0, 4, 2), (10, 60.0, 10, 5),  # the last ones, from the 3rd
])
def test_step_clock_plan(skip_first, budget_s, started_at, before_steps):
    from perfstack.profile._bootstrap import StepClock
    clock = StepClock(_NoCuda, skip_first, 5, budget_s)
    k = 0
    while clock.started_at is None:
        k += 1
        clock.before(k)
    assert clock.started_at == k == started_at
    clock.profiled_begin()
    clock.profiled_mark()
    assert clock.after_begin()
    after_steps = 5 if budget_s else 1
    assert [clock.after() for _ in range(after_steps)] == [False] * (after_steps - 1) + [True]
    clock.finish()
    u = clock.result()
    assert (u["before_steps"], u["after_steps"]) == (before_steps, after_steps)
    assert u["profiled_ms"] is not None


@pytest.mark.gpu
def test_gpu_example_is_slower_under_the_profiler(tmp_path):
    example = Path(__file__).parents[2] / "examples" / "train_mlp.py"
    r = capture.run([sys.executable, str(example), "--steps", "30"], tmp_path / "out", capture.Plan(stop_after_window=True))
    u = r.unprofiled
    assert r.returncode == 0 and u["before_steps"] >= 1 and u["after_steps"] >= 1
    assert u["step_ms"] < u["profiled_ms"]


def test_sampler_samples_and_stops_cleanly():
    calls: list[int] = []

    def sample(i):
        calls.append(i)
        if i == 1:
            raise RuntimeError("GPU is lost")
        return {"power_w": 300.0}

    s = TelemetrySampler(gpus=[0, 1], sample=sample, interval=0.02).start()
    time.sleep(0.2)
    t0 = time.monotonic()
    records = s.stop()
    assert time.monotonic() - t0 < 1 and not s._thread.is_alive()
    assert len(records) >= 4 and {r["gpu"] for r in records} == {0, 1}
    assert {r.get("error") for r in records if r["gpu"] == 1} == {"RuntimeError: GPU is lost"}
    ts = [r["t"] for r in records if r["gpu"] == 0]
    assert ts == sorted(ts) and all(r["time"] > 1e9 for r in records)
    n = len(calls)
    time.sleep(0.1)
    assert len(calls) == n  # really stopped


def test_sampler_without_gpus_starts_no_thread():
    s = TelemetrySampler(gpus=[], sample=fake_sample).start()
    assert s._thread is None and s.stop() == []


@pytest.mark.parametrize("argv, script, args, opts", [
    (["python", "train.py", "--lr", "3"], "train.py", ["--lr", "3"], []),
    (["python3", "-u", "train.py"], "train.py", [], ["-u"]),
    (["python3.11", "-X", "dev", "-W", "error", "train.py", "-u"], "train.py", ["-u"], ["-X", "dev", "-W", "error"]),
    (["train.py", "a", "b"], "train.py", ["a", "b"], []),
    ([sys.executable, "-O", "train.py"], "train.py", [], ["-O"]),
])
def test_parse_argv(tmp_path, monkeypatch, argv, script, args, opts):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    t = parse_argv(argv)
    assert (t.script, t.module, t.args, t.python_options) == (script, None, args, opts)


def test_parse_argv_module():
    t = parse_argv(["python", "-m", "pkg.train", "--x"])
    assert (t.script, t.module, t.args, t.name) == (None, "pkg.train", ["--x"], "train")


@pytest.mark.parametrize("argv, message", [
    (["torchrun", "--nproc-per-node", "2", "train.py"], "torchrun.*starts the processes itself"),
    (["/usr/bin/torchrun", "train.py"], "torchrun.*starts the processes itself"),
    (["python", "-m", "torch.distributed.run", "train.py"], "torch.distributed.run.*starts the processes itself"),
    (["python", "-c", "print(1)"], "script file"),
    (["python", "missing.py"], "script not found: missing.py"),
    (["python"], "names no script"),
    (["ls", "-l"], "not one"),
    ([], "no command"),
])
def test_parse_argv_refuses(tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=message):
        parse_argv(argv)
