"""perfstack try: the plan's order, the statistics, the verdicts and the record, with a fake child that
writes what the real one writes; and real arms of a small CPU script (tests/trial/scripts/tiny_train.py)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from perfstack.cli.main import main
from perfstack.errors import CannotRunHere, UsageError
from perfstack.model import Run
from perfstack.records.meta import run_meta
from perfstack.profile.capture import parse_argv
from perfstack.trial import fixes as fx
from perfstack.trial import runner, stats

SCRIPT = Path(__file__).with_name("scripts") / "tiny_train.py"


def _plan(fixes: list[str], **kw: object) -> runner.Plan:
    cmd = ["python", str(SCRIPT)]
    return runner.Plan(target=parse_argv(cmd), command=cmd, fixes=[fx.FIXES[f] for f in fixes],
                       warmup=2, steps=5, **kw)  # type: ignore[arg-type]


class FakeChild:
    """Stands in for _spawn: records the order of arms and writes the status file the child would.
    ``ms[arm]`` is the step time of that arm; ``crash``/``interrupt`` name arms that fail or get Ctrl-C."""

    def __init__(self, ms: dict[str, float], crash: str = "", interrupt: str = "", values: dict[str, list[float]] | None = None,
                 unapplied: str = "") -> None:
        self.ms, self.crash, self.interrupt, self.unapplied = ms, crash, interrupt, unapplied
        self.values = values or {}
        self.order: list[str] = []
        self.envs: list[dict[str, str]] = []

    def __call__(self, argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, str, bool]:
        cfg = json.loads(argv[-1])
        arm = "+".join(cfg["fixes"]) or "baseline"
        self.order.append(arm)
        self.envs.append(env)
        if arm == self.crash:
            return 1, "Traceback...\nRuntimeError: boom", False
        n = len([a for a in self.order if a == arm])
        base = self.ms.get(arm, self.ms.get("*", 10.0))
        steps = [base * (1 + 0.01 * ((i + n) % 3)) for i in range(cfg["steps"])]
        applied = {f: {"count": 0 if f == self.unapplied else 1, "what": "x"} for f in cfg["fixes"]}
        Path(cfg["status"]).write_text(json.dumps({
            "step_ms": steps, "boundary_s": [3.0, 3.5], "values": self.values.get(arm, [2.0, 1.9, 1.8]),
            "peak_mem_mb": 100.0, "applied": applied, "steps_seen": cfg["warmup"] + cfg["steps"], "error": None}))
        return (130, "", True) if arm == self.interrupt else (0, "", False)


def test_rounds_alternate_arms_in_fresh_runs():
    fake = FakeChild({"baseline": 10.0, "*": 10.0})
    runner.run(_plan(["tf32", "cudnn-benchmark"], rounds=3, combine=False), spawn=fake)
    assert fake.order == ["baseline", "tf32", "cudnn-benchmark"] * 3


def test_a_real_gain_works_and_a_gain_within_noise_does_not():
    fake = FakeChild({"baseline": 10.0, "tf32": 6.0, "cudnn-benchmark": 9.99})
    t = runner.run(_plan(["tf32", "cudnn-benchmark"], rounds=3, combine=False), spawn=fake)
    tf32, cudnn = t.arm("tf32"), t.arm("cudnn-benchmark")
    assert tf32 is not None and cudnn is not None
    assert tf32.verdict == "works" and tf32.gain_pct == pytest.approx(40.0, abs=0.5)
    assert tf32.ci_pct is not None and tf32.ci_pct[0] > 30
    assert cudnn.verdict == "no measurable gain"
    assert t.best == ["tf32"] and t.advice == [fx.FIXES["tf32"].advice]


def test_a_slower_fix_is_called_slower():
    t = runner.run(_plan(["tf32"], rounds=3), spawn=FakeChild({"baseline": 10.0, "tf32": 14.0}))
    arm = t.arm("tf32")
    assert arm is not None and arm.verdict == "slower" and arm.gain_pct is not None and arm.gain_pct < -30
    assert t.best == []


def test_an_arm_that_crashes_is_its_result_not_an_error():
    t = runner.run(_plan(["tf32", "cudnn-benchmark"], rounds=2), spawn=FakeChild({"*": 10.0}, crash="tf32"))
    arm = t.arm("tf32")
    assert arm is not None and arm.verdict == "failed" and "RuntimeError: boom" in arm.note
    assert t.arm("cudnn-benchmark") is not None


def test_a_baseline_that_fails_cannot_run_here_with_its_output():
    with pytest.raises(CannotRunHere, match="RuntimeError: boom"):
        runner.run(_plan(["tf32"], rounds=2), spawn=FakeChild({"*": 10.0}, crash="baseline"))


def test_ctrl_c_keeps_what_was_measured():
    fake = FakeChild({"*": 10.0}, interrupt="cudnn-benchmark")
    t = runner.run(_plan(["tf32", "cudnn-benchmark", "pin-memory"], rounds=3), spawn=fake)
    assert t.interrupted and fake.order == ["baseline", "tf32", "cudnn-benchmark"]
    assert t.arm("tf32") is not None and t.arm("tf32").best_ms is not None  # type: ignore[union-attr]
    assert t.arm("pin-memory").verdict == "not run"  # type: ignore[union-attr]


def test_the_budget_stops_the_trial_before_a_run_it_cannot_finish(monkeypatch):
    clock = iter(range(0, 1000, 10))  # every reading of the clock is 10 s later
    monkeypatch.setattr(runner.time, "monotonic", lambda: float(next(clock)))
    t = runner.run(_plan(["tf32", "cudnn-benchmark"], rounds=3, budget_s=45), spawn=FakeChild({"*": 10.0}))
    assert any("budget" in n for n in t.notes)
    assert sum(len(a.runs) for a in t.arms) < 9


def test_a_fix_that_changed_nothing_is_not_applied():
    t = runner.run(_plan(["pin-memory"], rounds=2), spawn=FakeChild({"*": 10.0}, unapplied="pin-memory"))
    assert t.arm("pin-memory").verdict == "not applied"  # type: ignore[union-attr]


def test_numerics_guard_compares_the_first_losses():
    fake = FakeChild({"baseline": 10.0, "tf32": 5.0, "bf16-autocast": 5.0},
                     values={"baseline": [2.0, 1.9], "tf32": [2.0001, 1.9002], "bf16-autocast": [2.5, 1.2]})
    t = runner.run(_plan(["tf32", "bf16-autocast"], rounds=2, combine=False), spawn=fake)
    assert t.arm("tf32").numerics == "within tolerance"  # type: ignore[union-attr]
    assert t.arm("bf16-autocast").numerics == "changed"  # type: ignore[union-attr]
    assert t.best == ["tf32"]  # the faster arm changed the numbers: never recommended silently


def test_the_fixes_that_worked_are_tried_together():
    fake = FakeChild({"baseline": 10.0, "tf32": 8.0, "cudnn-benchmark": 8.0, "cudnn-benchmark+tf32": 7.9,
                      "tf32+cudnn-benchmark": 7.9})
    t = runner.run(_plan(["tf32", "cudnn-benchmark"], rounds=2), spawn=fake)
    comb = t.arm("combined")
    assert comb is not None and sorted(comb.fixes) == ["cudnn-benchmark", "tf32"]
    assert any("less than" in n for n in t.notes)  # 21% < the 36% two 20% gains compound to


def test_environment_fixes_set_and_unset_variables():
    s = fx.Setting({"NCCL_P2P_DISABLE": "1", "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}, nproc=2, cpus=16)
    env = fx.environment([fx.FIXES["nccl-defaults"], fx.FIXES["expandable-segments"], fx.FIXES["omp-threads"]], s)
    assert "NCCL_P2P_DISABLE" not in env
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:128,expandable_segments:True"
    assert env["OMP_NUM_THREADS"] == "8"
    assert fx.FIXES["nccl-defaults"].applies(fx.Setting({})) is not None
    assert fx.FIXES["ddp-no-sync"].applies(fx.Setting({}, nproc=1)) is not None


def test_unknown_fix_is_a_usage_error():
    with pytest.raises(UsageError, match="no such fix"):
        fx.parse("tf32,warp-drive")


def test_predictions_come_from_the_findings_that_name_the_fix():
    assert fx.predicted_for(fx.FIXES["tf32"], {"fp32-matmul": 12.0, "fp32-conv": 30.0, "gpu-idle": 50.0}) == \
        (30.0, ["fp32-conv", "fp32-matmul"])


def test_a_fix_the_profile_replayed_whole_is_predicted_by_that_replay_not_the_largest_finding():
    found = {"launch-bound": 1.3, "unfused-elementwise": 22.6}
    graphs = fx.FIXES["compile-cudagraphs"]
    # fusion and CUDA graphs together (ResNet-50 on an H200: 43% replayed, 39.4% measured), not max(1.3, 22.6)
    assert fx.predicted_for(graphs, found, {"compile-cudagraphs": 43.0}) == (43.0, ["launch-bound", "unfused-elementwise"])
    assert fx.predicted_for(graphs, found) == (22.6, ["launch-bound", "unfused-elementwise"])
    # a replay counts only where a finding names the fix
    assert fx.predicted_for(graphs, {"fp32-conv": 9.9}, {"compile-cudagraphs": 43.0}) == (None, [])
    assert fx.replayed_fixes({"compile-cudagraphs": {"pct": 43.0, "ms": 14.0}, "launch-bound": {"pct": 1.3},
                              "tf32": {"pct": True}}) == {"compile-cudagraphs": 43.0}


def test_default_compile_is_not_predicted_by_launch_bound_the_cuda_graph_mode_is():
    # a launch-bound step measured -8% with default compile (tiny-launch-bound, H200): it fuses, it does not graph
    assert fx.predicted_for(fx.FIXES["compile"], {"launch-bound": 87.1}) == (None, [])
    assert fx.predicted_for(fx.FIXES["compile-cudagraphs"], {"launch-bound": 87.1}) == (87.1, ["launch-bound"])


def test_stats_ci_and_noise():
    base = [[10.0, 10.1, 9.9], [10.4, 10.5, 10.3]]
    assert stats.noise_pct(base) == pytest.approx(4.0)
    lo, hi = stats.gain_ci(base, [[5.0, 5.1, 4.9]]) or (0, 0)
    assert 45 < lo <= hi < 55
    assert stats.verdict(3.0, (1.0, 5.0), 4.0) == "no measurable gain"
    assert stats.verdict(6.0, (1.0, 9.0), 4.0) == "works"


def test_the_try_section_round_trips_and_refuses_a_wrong_type():
    t = runner.run(_plan(["tf32"], rounds=2), spawn=FakeChild({"baseline": 10.0, "tf32": 6.0}))
    run = Run(trial=t)
    d = json.loads(run.to_json())
    d["try"]["from_the_future"] = {"x": 1}
    assert Run.from_dict(d).to_dict()["try"]["from_the_future"] == {"x": 1}
    d["try"]["arms"][1]["gain_pct"] = "40"
    from perfstack.errors import InputError
    with pytest.raises(InputError, match=r"try\.arms\[1\]\.gain_pct must be a number"):
        Run.from_dict(d)
    d["try"]["arms"][1]["gain_pct"] = 40.0
    d["try"]["arms"][1]["verdict"] = "great"
    with pytest.raises(InputError, match=r"try\.arms\[1\]\.verdict must be one of"):
        Run.from_dict(d)


def test_hostile_from_run_is_refused_naming_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": 1, "findings": [{"id": 3}]}))
    assert main(["try", "--from", str(bad), "--", "python", str(SCRIPT)]) == 2
    assert "bad.json" in capsys.readouterr().err
    doctor = tmp_path / "doctor.json"
    doctor.write_text(json.dumps({"schema_version": 1, "findings": []}))
    assert main(["try", "--from", str(doctor), "--list"]) == 2
    assert "not a 'perfstack profile' Run" in capsys.readouterr().err


def test_wrong_flags_are_usage_errors(capsys):
    assert main(["try", "--steps", "1", "--fix", "tf32", "--", "python", str(SCRIPT)]) == 2
    assert main(["try", "--step-at", "nocolon", "--fix", "tf32", "--", "python", str(SCRIPT)]) == 2
    assert main(["try", "--fix", "tf32"]) == 2
    assert main(["try", "--fix", "tf32", "--", "torchrun", str(SCRIPT)]) == 2


# -- real arms: the child, on a CPU -----------------------------------------------------------------

def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.slow
def test_real_arms_apply_their_fixes_only_in_the_child_and_leave_the_script_alone(tmp_path, capsys):
    before = _digest(SCRIPT)
    out = tmp_path / "try.json"
    rc = main(["-q", "try", "--fix", "dataloader-workers,foreach-optimizer", "--rounds", "1", "--warmup", "2",
               "--steps", "3", "--no-combine", "-o", str(out), "--", sys.executable, str(SCRIPT), "--crash-if-workers"])
    assert rc == 0
    assert _digest(SCRIPT) == before
    t = Run.load(out).trial
    assert t is not None
    base, workers, foreach = t.arm("baseline"), t.arm("dataloader-workers"), t.arm("foreach-optimizer")
    assert base is not None and workers is not None and foreach is not None
    assert base.runs[0].applied == {} and len(base.runs[0].step_ms) == 3
    assert base.runs[0].values and base.runs[0].values[0] > 0  # the first loss, seen through backward()
    # the patched DataLoader had workers, which this script refuses: the arm failed, the trial went on
    assert workers.verdict == "failed" and "cannot run with workers" in workers.note
    assert foreach.runs[0].applied["foreach-optimizer"].count == 1
    assert foreach.numerics == "identical"
    assert "torch" not in sys.modules or not hasattr(sys.modules["torch"].optim.Adam.__init__, "__wrapped__")


@pytest.mark.slow
def test_real_inference_steps_from_the_marker(tmp_path):
    out = tmp_path / "try.json"
    rc = main(["-q", "try", "--fix", "omp-threads", "--rounds", "1", "--warmup", "1", "--steps", "3", "--no-combine",
               "-o", str(out), "--", sys.executable, str(SCRIPT), "--infer"])
    assert rc == 0
    t = Run.load(out).trial
    assert t is not None and len(t.arms[0].runs[0].step_ms) == 3


def test_a_script_broken_at_baseline_exits_3_with_its_output(capsys):
    rc = main(["try", "--fix", "tf32", "--rounds", "1", "--", sys.executable, str(SCRIPT), "--fail"])
    assert rc == 3
    assert "broken on purpose" in capsys.readouterr().err


def test_two_trials_diff_arm_by_arm(tmp_path, capsys):
    runs = []
    for i, ms in enumerate((10.0, 7.0)):
        t = runner.run(_plan(["tf32"], rounds=2), spawn=FakeChild({"baseline": ms, "tf32": ms * 0.8}))
        p = tmp_path / f"{i}.json"
        Run(meta=run_meta("try", gpu="NVIDIA H200"), trial=t).save(p)
        runs.append(str(p))
    assert main(["diff", *runs, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    rows = {m["name"]: m for m in d["measurements"]}
    assert rows["try.baseline.step"]["verdict"] == "improved"
    assert rows["try.baseline.step"]["delta_pct"] == pytest.approx(-30, abs=1)
    assert d["before"]["gpus"] == "NVIDIA H200"  # the header names the GPU the trial ran on


@pytest.mark.slow
def test_step_at_marks_steps_of_an_inference_script(tmp_path):
    out = tmp_path / "try.json"
    rc = main(["-q", "try", "--fix", "omp-threads", "--rounds", "1", "--warmup", "1", "--steps", "3", "--no-combine",
               "--step-at", "torch.nn.modules.container:Sequential.forward", "-o", str(out), "--",
               sys.executable, str(SCRIPT), "--infer"])
    assert rc == 0
    t = Run.load(out).trial
    assert t is not None and len(t.arms[0].runs[0].step_ms) == 3
    assert t.arms[0].runs[0].values  # the step function's results are kept for the numerics guard


def test_a_status_file_with_hostile_values_keeps_only_finite_numbers_and_bounded_text():
    class Hostile(FakeChild):
        def __call__(self, argv, env, timeout):
            cfg = json.loads(argv[-1])
            rc = super().__call__(argv, env, timeout)
            d = json.loads(Path(cfg["status"]).read_text())
            d["values"] = [float("nan"), "x", True, 1.5]
            d["peak_mem_mb"] = "lots"
            d["applied"] = {"tf32": {"count": "many", "what": "y" * 10_000}, 3: 4}
            Path(cfg["status"]).write_text(json.dumps(d))
            return rc
    t = runner.run(_plan(["tf32"], rounds=2), spawn=Hostile({"*": 10.0}))
    r = t.arm("tf32").runs[0]  # type: ignore[union-attr]
    assert r.values == [1.5] and r.peak_mem_mb is None
    assert r.applied["tf32"].count == 0 and len(r.applied["tf32"].what) <= 500
    Run.from_dict(json.loads(Run(trial=t).to_json()))  # what was kept loads back


def test_without_fix_the_profile_findings_choose_the_fixes_and_opt_in_ones_are_named(capsys):
    import argparse

    from rich.console import Console

    from perfstack.cli import try_
    err = Console(stderr=True, width=200)
    args = argparse.Namespace(fix=None, all=False)
    s = fx.Setting({}, nproc=1, cpus=8)
    chosen = try_._choose(args, {"dataloader-stall": 40.0, "launch-bound": 60.0, "gpu-idle": 10.0}, s, err)
    assert [f.id for f in chosen] == ["dataloader-workers"]
    said = capsys.readouterr().err
    assert "compile" in said and "compile-cudagraphs" in said and "opt-in" in said
    chosen = try_._choose(argparse.Namespace(fix="nccl-defaults,tf32", all=False), {}, s, err)
    assert [f.id for f in chosen] == ["tf32"]  # no NCCL variable is set here: skipped, and said why
    assert "skipping nccl-defaults" in capsys.readouterr().err


@pytest.mark.slow
def test_model_fixes_wrap_the_model_alone_and_hand_back_fp32(tmp_path):
    """bf16 autocast and channels_last apply to the model's own calls only: Module.__call__ is torch's own
    again once the model is found (no other module call pays for the fix), and the model's bf16 output
    comes back fp32 for a loss computed outside it."""
    import subprocess
    patches = Path(runner.__file__).with_name("_patches.py")
    out = subprocess.run([sys.executable, str(SCRIPT.with_name("patch_check.py")), str(patches),
                          "bf16-autocast,channels-last"], capture_output=True, text=True, check=True).stdout
    assert out.split()[:4] == ["True", "Sequential", "True", "torch.float32"]
    assert "'bf16-autocast': 1" in out and "'channels-last': 1" in out


def test_a_run_that_floods_its_output_keeps_only_the_tail_and_one_that_hangs_is_killed():
    import os
    import time
    flood = [sys.executable, "-c", "import sys; sys.stdout.write('x' * 30_000_000); print('END')"]
    rc, tail, interrupted = runner._spawn(flood, dict(os.environ), 60)
    assert rc == 0 and tail.rstrip().endswith("END") and len(tail) <= runner.TAIL_BYTES and not interrupted
    t0 = time.monotonic()
    rc, _, _ = runner._spawn([sys.executable, "-c", "import time; time.sleep(120)"], dict(os.environ), 1)
    assert rc != 0 and time.monotonic() - t0 < 30


def test_a_run_may_take_ten_times_the_slowest_so_far_and_never_past_the_budget():
    c = runner._Clock(None)
    assert c.timeout() == 3600.0  # the first run: start-up and compilation
    c.longest = 12.0
    assert c.timeout() == 300.0
    c.longest = 90.0
    assert c.timeout() == 900.0
    b = runner._Clock(100.0)
    b.longest = 90.0
    assert b.timeout() <= 100.0
