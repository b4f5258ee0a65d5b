"""benchmarks/fix_matrix.py: the manifest of workloads, the runner's bookkeeping and the table logic.

Runs are hand-built dicts in the shape perfstack writes (a profile Run's findings; a try Run's
"try" section with its arms), so the statistics are checked against numbers worked out by hand.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
_spec = importlib.util.spec_from_file_location("fix_matrix", ROOT / "benchmarks" / "fix_matrix.py")
fm = importlib.util.module_from_spec(_spec)
sys.modules["fix_matrix"] = fm  # dataclasses look their module up while the class is built
_spec.loader.exec_module(fm)


# --- the manifest ---------------------------------------------------------------------------------

def test_the_manifest_has_enough_scripts_and_pairs_with_known_fix_ids():
    scripts = {e.script for e in fm.MANIFEST}
    assert len(scripts) >= 22
    assert fm.pair_count() >= 44
    assert len({e.name for e in fm.MANIFEST}) == len(fm.MANIFEST)
    for e in fm.MANIFEST:
        assert (ROOT / e.script).is_file(), e.script
        assert 1 <= len(e.fixes) <= 4 and len(set(e.fixes)) == len(e.fixes), e.name
        assert set(e.fixes) <= set(fm.FIX_IDS), e.name
        assert e.nproc in (1, 2)
        assert e.steps_by in ("optimizer", "perfstack.step")
    assert {f for e in fm.MANIFEST for f in e.fixes} == set(fm.FIX_IDS)


def test_halves_follow_the_declared_rule_and_both_halves_see_every_multi_member_family():
    by_family: dict[str, list] = {}
    for e in fm.MANIFEST:
        by_family.setdefault(e.family, []).append(e)
    for members in by_family.values():
        assert [m.half for m in members] == ["tune" if i % 2 == 0 else "holdout" for i in range(len(members))]
        if len(members) >= 2:
            assert {m.half for m in members} == {"tune", "holdout"}
    assert fm.pair_count([e for e in fm.MANIFEST if e.half == "holdout"]) >= 22


@pytest.mark.parametrize("script", sorted({e.script for e in fm.MANIFEST}))
def test_each_script_is_a_plain_user_script_that_names_its_fixes(script):
    text = (ROOT / script).read_text()
    doc = ast.get_docstring(ast.parse(text))
    assert doc, script
    named = set(re.findall(r"fix: ([a-z0-9-]+)", doc))
    wanted = {f for e in fm.MANIFEST if e.script == script for f in e.fixes}
    assert wanted <= named, f"{script}: docstring does not name {sorted(wanted - named)}"
    assert named <= set(fm.FIX_IDS)
    for needle in ('"--iters"', "default=100000", '"--small"', "torch.manual_seed(0)", "__main__"):
        assert needle in text, f"{script} lacks {needle}"
    stepped = {e.steps_by for e in fm.MANIFEST if e.script == script}
    if stepped == {"perfstack.step"}:
        assert "perfstack.step" in text and "optim." not in text
    else:
        assert "optimizer.step()" in text
    assert "import perfstack" not in text or "except (ImportError" in text


# --- run: commands, environment, bookkeeping ------------------------------------------------------

def _entry(name="w", nproc=1, fixes=("tf32", "compile"), steps_by="optimizer", env=()):
    return fm.Entry(name=name, script="benchmarks/workloads/x.py", args=("--a", "1"), nproc=nproc, fixes=fixes,
                    family="f", half="tune", env=env, steps_by=steps_by)


def test_commands_for_one_and_two_process_workloads(tmp_path):
    one, two = _entry(), _entry(name="d", nproc=2)
    prof = fm.profile_command(one, tmp_path)
    assert prof[1:4] == ["-m", "perfstack", "profile"] and "--stop-after-window" in prof and "-q" in prof
    assert prof[prof.index("-o") + 1] == str(tmp_path / "w.profile.json")
    assert prof[prof.index("--") + 1:] == [sys.executable, "benchmarks/workloads/x.py", "--a", "1"]
    assert "--window" not in prof and fm.profile_command(one, tmp_path, 20)[5:7] == ["--window", "20"]
    tr = fm.try_command(one, tmp_path, 3, 15, with_profile=True)
    assert tr[tr.index("--from") + 1] == str(tmp_path / "w.profile.json")
    assert tr[tr.index("--fix") + 1] == "tf32,compile" and tr[tr.index("--rounds") + 1] == "3"
    assert tr[tr.index("--steps") + 1] == "15" and "--nproc" not in tr
    tr2 = fm.try_command(two, tmp_path, 3, 15, with_profile=False)
    assert "--from" not in tr2 and tr2[tr2.index("--nproc") + 1] == "2"
    small = fm.try_command(one, tmp_path, 1, 3, with_profile=False, warmup=2, combine=False, extra=("--small",))
    assert small[-3:] == ["--a", "1", "--small"]
    assert small[small.index("--warmup") + 1] == "2" and "--no-combine" in small
    assert prof[prof.index("--out-dir") + 1] == str(tmp_path / "traces" / "w")
    small_prof = fm.profile_command(one, tmp_path, 20, ("--small",))
    assert small_prof[small_prof.index("--") + 1:] == [sys.executable, "benchmarks/workloads/x.py", "--a", "1", "--small"]
    assert small_prof[small_prof.index("--window") + 1] == "20"


def test_child_env_pins_gpus_carries_the_job_env_and_separates_rendezvous_ports():
    e = _entry(nproc=2, env=(("NCCL_P2P_DISABLE", "1"),))
    a = fm.child_env(e, [0, 1], base={"PATH": "/bin"})
    b = fm.child_env(e, [2, 3], base={"PATH": "/bin"})
    assert a["CUDA_VISIBLE_DEVICES"] == "0,1" and b["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert a["NCCL_P2P_DISABLE"] == "1" and a["PYTHONPATH"].startswith(str(ROOT / "src"))
    assert a["MASTER_PORT"] != b["MASTER_PORT"] and a["PET_MASTER_PORT"] == a["MASTER_PORT"]


class FakeRunner:
    """Writes the output a perfstack command names, records calls, checks no GPU is shared."""

    def __init__(self, fail=(), sleep=0.0):
        self.calls, self.fail, self.sleep = [], set(fail), sleep
        self.lock = threading.Lock()
        self.busy: set[str] = set()
        self.overlap = False

    def __call__(self, cmd, env, timeout):
        gpus = set(env["CUDA_VISIBLE_DEVICES"].split(","))
        with self.lock:
            self.overlap |= bool(self.busy & gpus)
            self.busy |= gpus
            self.calls.append((cmd, env["CUDA_VISIBLE_DEVICES"]))
        try:
            time.sleep(self.sleep)
            out = Path(cmd[cmd.index("-o") + 1])
            failed = any(name in out.name for name in self.fail)
            if failed and "raise" in out.name:
                raise RuntimeError("boom")
            if not failed:
                out.write_text("{}")
        finally:
            with self.lock:
                self.busy -= gpus
        return fm.Outcome(1 if failed else 0, "out", "err", 0.01)


def test_run_workload_profiles_then_tries_and_resumes_without_redoing(tmp_path):
    runner = FakeRunner()
    opts = fm.RunOptions(out=tmp_path, runner=runner)
    e = _entry()
    assert fm.run_workload(e, [0], opts) == {"profile": 0, "try": 0}
    assert [c[0][3] for c in runner.calls] == ["profile", "try"]
    assert "--from" in runner.calls[1][0]
    assert fm.run_workload(e, [0], opts) == {} and len(runner.calls) == 2
    log = (tmp_path / "w.log").read_text()
    assert "profile: exit 0" in log and "try: exit 0" in log and "CUDA_VISIBLE_DEVICES=0" in log


def test_two_process_workloads_are_profiled_on_their_ranks_and_step_marked_ones_get_a_window(tmp_path):
    runner = FakeRunner()
    opts = fm.RunOptions(out=tmp_path, runner=runner, profile_window_s=20)
    fm.run_workload(_entry(name="d", nproc=2), [0, 1], opts)
    assert [c[0][3] for c in runner.calls] == ["profile", "try"]
    assert all(c[0][c[0].index("--nproc") + 1] == "2" for c in runner.calls)
    fm.run_workload(_entry(name="g", steps_by="perfstack.step"), [0], opts)
    assert "--window" in runner.calls[2][0]


def test_scheduler_shares_no_gpu_and_one_failure_does_not_stop_the_rest(tmp_path):
    entries = [_entry(name=f"w{i}") for i in range(5)] + [_entry(name="ddp", nproc=2), _entry(name="raise-me")]
    runner = FakeRunner(fail={"raise-me"}, sleep=0.05)
    results = fm.Scheduler(entries, 3, fm.RunOptions(out=tmp_path, runner=runner), margin_s=0, say=lambda s: None).run()
    assert not runner.overlap
    assert set(results) == {e.name for e in entries}
    assert str(results["raise-me"]).startswith("error")
    assert all(fm.done(e, tmp_path) for e in entries if e.name != "raise-me")
    assert [len(g.split(",")) for c, g in runner.calls if "ddp.try.json" in " ".join(c)] == [2]


def test_scheduler_starts_nothing_near_the_deadline_and_says_so(tmp_path):
    entries = [_entry(name="a"), _entry(name="b", nproc=2)]
    opts = fm.RunOptions(out=tmp_path, runner=FakeRunner(), deadline=time.monotonic() + 100)
    fm.Scheduler(entries, 1, opts, margin_s=600, say=lambda s: None).run()
    res = fm.load_results(tmp_path, entries)
    assert fm.status(res["a"]) == "not run (deadline near)"
    assert not (tmp_path / "a.try.json").exists()


# --- table -----------------------------------------------------------------------------------------

def _profile(*findings):
    return {"schema_version": 1, "findings": [
        {"id": fid, "severity": sev, "recoverable_pct": pct, "title": fid} for fid, sev, pct in findings]}


def _arm(aid, gain, predicted=None, by=(), verdict=None, ci=None):
    if verdict is None:
        verdict = "baseline" if aid == "baseline" else ("works" if gain is not None and gain >= 5 else "no measurable gain")
    return {"id": aid, "fixes": [] if aid == "baseline" else [aid], "best_ms": 100.0, "gain_pct": gain,
            "ci_pct": ci, "predicted_pct": predicted, "predicted_by": list(by), "verdict": verdict,
            "numerics": "ok", "peak_mem_mb": 1000.0}


def _trial(*arms, noise=1.5):
    return {"schema_version": 1, "try": {"arms": [_arm("baseline", None), *arms], "noise_pct": noise}}


def _res(profile=None, trial=None):
    return fm.Result(profile=profile, trial=trial)


def test_pair_rows_take_prediction_measurement_ci_and_verdict_from_the_arms():
    e = _entry(fixes=("tf32", "compile", "channels-last"))
    r = _res(_profile(), _trial(_arm("tf32", 12.3, 20.0, ["fp32-matmul"], ci=[10.0, 14.6]), _arm("compile", 1.0)))
    rows = fm.pair_rows(e, r)
    assert [x["fix"] for x in rows] == ["tf32", "compile", "channels-last"]
    assert rows[0]["predicted"] == 20.0 and rows[0]["gain"] == 12.3 and rows[0]["ci"] == (10.0, 14.6)
    assert rows[0]["verdict"] == "works" and rows[0]["predicted_by"] == ["fp32-matmul"]
    assert rows[1]["predicted"] is None and rows[1]["verdict"] == "no measurable gain"
    assert rows[2]["verdict"] == "missing from the try Run"
    assert fm.fmt_gain(12.3, (10.0, 14.6)) == "12.3 [10.0, 14.6]" and fm.fmt_gain(None, None) == "—"


def test_pairs_of_a_workload_without_results_say_why():
    e = _entry()
    assert {x["verdict"] for x in fm.pair_rows(e, _res())} == {"not run"}
    failed = fm.Result(exits={"profile": 0, "try": 3})
    assert {x["verdict"] for x in fm.pair_rows(e, failed)} == {"failed (try exit 3)"}


def test_mean_absolute_error_per_finding():
    rows = [
        {"predicted": 20.0, "gain": 15.0, "predicted_by": ["fp32-matmul"]},
        {"predicted": 10.0, "gain": 30.0, "predicted_by": ["fp32-matmul", "launch-bound"]},
        {"predicted": 5.0, "gain": None, "predicted_by": ["launch-bound"]},  # failed arm: not counted
        {"predicted": None, "gain": 8.0, "predicted_by": []},  # no prediction: not counted
    ]
    errs = fm.finding_errors(rows)
    assert set(errs) == {"fp32-matmul", "launch-bound"}
    assert errs["fp32-matmul"]["mae"] == pytest.approx(12.5) and errs["fp32-matmul"]["n"] == 2
    assert errs["launch-bound"]["mae"] == pytest.approx(20.0)
    assert errs["fp32-matmul"]["mean_measured"] == pytest.approx(22.5)


def test_recall_counts_a_hit_when_the_best_fix_addresses_the_top_finding():
    a, b, c = _entry(name="a"), _entry(name="b"), _entry(name="c")
    results = {
        # top finding fp32-matmul (30%), whose fix tf32 measured the most: hit
        "a": _res(_profile(("optimizer-not-fused", "info", 4.0), ("fp32-matmul", "warning", 30.0)),
                  _trial(_arm("tf32", 25.0, 30.0, ["fp32-matmul"]), _arm("compile", 8.0, 4.0, ["optimizer-not-fused"]),
                         _arm("combined", 40.0))),
        # top finding launch-bound, but bf16-autocast measured the most: miss
        "b": _res(_profile(("launch-bound", "warning", 40.0), ("fp32-matmul", "warning", 10.0)),
                  _trial(_arm("compile", 6.0, 40.0, ["launch-bound"]), _arm("tf32", 18.0, 10.0, ["fp32-matmul"]))),
        # nothing worked: not counted
        "c": _res(_profile(("launch-bound", "warning", 40.0)), _trial(_arm("compile", 1.0, 40.0, ["launch-bound"]))),
    }
    rc = fm.recall([a, b, c], results)
    assert (rc["hits"], rc["counted"]) == (1, 2)
    assert {x["workload"]: x["hit"] for x in rc["rows"]} == {"a": True, "b": False}
    assert rc["rows"][0]["best"] == ["tf32"]  # the combined arm is not a single fix
    assert rc["excluded"] == [("c", "no single fix worked")]


def test_recall_leaves_out_workloads_without_a_profile():
    rc = fm.recall([_entry(name="d", nproc=2)], {"d": _res(None, _trial(_arm("tf32", 20.0)))})
    assert rc["counted"] == 0 and rc["excluded"] == [("d", "no profile")]


def test_findings_map_to_the_fixes_perfstack_declares_for_them():
    arms = {"tf32": {"id": "tf32", "gain_pct": 10.0}, "channels-last": {"id": "channels-last", "gain_pct": 3.0},
            "baseline": {"id": "baseline"}, "combined": {"id": "combined"}}
    assert fm.fixes_for("fp32-conv", arms) == {"channels-last", "tf32"}
    assert fm.fixes_for("fp32-matmul", arms) == {"tf32"}
    assert fm.fixes_for("dataloader-stall", arms) == set()


def test_a_trial_without_predictions_takes_them_from_the_profile_of_the_same_script():
    e = _entry(name="a", fixes=("tf32", "cudnn-benchmark"))
    r = _res(_profile(("fp32-matmul", "critical", 30.0), ("fp32-conv", "warning", 12.0)),
             _trial(_arm("tf32", 25.0, None, []), _arm("cudnn-benchmark", 1.0, None, [])))
    rows = {x["fix"]: x for x in fm.pair_rows(e, r)}
    assert rows["tf32"]["predicted"] == 30.0 and rows["tf32"]["predicted_by"] == ["fp32-conv", "fp32-matmul"]
    assert rows["cudnn-benchmark"]["predicted"] == 12.0


def test_false_claims_are_warning_or_critical_findings_whose_fix_measured_under_5_percent():
    e = _entry(name="a")
    r = _res(_profile(("optimizer-not-fused", "warning", 12.0), ("fp32-matmul", "critical", 30.0),
                      ("launch-bound", "info", 20.0), ("allocator-churn", "warning", 8.0),
                      ("pageable-memcpy", "warning", 6.0)),
             _trial(_arm("fused-optimizer", 2.0, 12.0, ["optimizer-not-fused"]),
                    _arm("tf32", 22.0, 30.0, ["fp32-matmul"]),
                    _arm("compile", 0.5, 20.0, ["launch-bound"]),
                    _arm("pin-memory", None, 6.0, ["pageable-memcpy"], verdict="failed")))
    fc = fm.false_claims([e], {"a": r})
    assert [(c["finding"], c["measured"]) for c in fc["claims"]] == [("optimizer-not-fused", 2.0)]
    assert fc["tested"] == 2  # fp32-matmul and optimizer-not-fused; launch-bound is only info
    assert ("a", "allocator-churn", "no fix for it was tried") in fc["untested"]
    assert ("a", "pageable-memcpy", "its fix did not run") in fc["untested"]


def test_table_works_on_partial_results_and_reports_what_is_missing(tmp_path):
    entries = [_entry(name="good", fixes=("tf32",)), _entry(name="broken"), _entry(name="absent"),
               _entry(name="garbled"), fm.dataclasses.replace(_entry(name="held", fixes=("compile",)), half="holdout")]
    (tmp_path / "good.profile.json").write_text(json.dumps(_profile(("fp32-matmul", "warning", 30.0))))
    (tmp_path / "good.try.json").write_text(json.dumps(
        _trial(_arm("tf32", 12.3, 20.0, ["fp32-matmul"], ci=[10.0, 14.6]), _arm("combined", 12.0))))
    (tmp_path / "broken.log").write_text("### 2026-01-01T00:00:00 profile: exit 0 after 3.0 s\n$ x\n\n"
                                         "### 2026-01-01T00:00:09 try: exit 2 after 1.0 s\n$ y\n\n")
    (tmp_path / "garbled.try.json").write_text("{not json")
    results = fm.load_results(tmp_path, entries)
    assert fm.status(results["good"]) == "ok"
    assert fm.status(results["broken"]) == "failed (try exit 2)"
    assert fm.status(results["absent"]) == "not run"
    assert fm.status(results["garbled"]).startswith("failed (garbled.try.json unreadable")
    md = fm.render_markdown(tmp_path, entries, results)
    assert "| good | tf32 | 20.0 | 12.3 [10.0, 14.6] | works | fp32-matmul | ok |" in md
    assert "| broken | compile | — | — | failed (try exit 2) |" in md
    assert "- absent: not run" in md and "- broken: failed (try exit 2)" in md
    assert "Recall: **1 of 1**" in md and "False claims: **0 of 1**" in md
    assert "## Holdout half: 0 of 1 workloads measured" in md
    assert "| fp32-matmul | 1 | 7.7 | 20.0 | 12.3 |" in md


def test_table_cli_writes_markdown_for_an_empty_directory(tmp_path):
    md = tmp_path / "docs" / "validation.md"
    assert fm.main(["table", "--out", str(tmp_path), "--md", str(md)]) == 0
    text = md.read_text()
    assert text.startswith("# perfstack try: validation matrix")
    assert text.count(": not run") == len(fm.MANIFEST)


def test_score_profiles_kept_traces_again_and_drops_the_trials_stored_predictions(tmp_path):
    (tmp_path / "measured.json").write_text(json.dumps({"runs": [
        {"workload": "kept", "traces": ["kept.pt.trace.json.gz"], "unprofiled_step_ms": 32.5}]}))
    stored = _trial(_arm("compile-cudagraphs", 39.4, 22.3, ["unfused-elementwise"]))
    results = {"kept": _res(_profile(("unfused-elementwise", "warning", 22.3)), stored),
               "other": _res(_profile(("launch-bound", "critical", 87.1)), _trial(_arm("compile", -8.1, 87.1, ["launch-bound"])))}
    seen = []

    def profile(paths, step_ms):
        seen.append(([p.name for p in paths], step_ms))
        prof = _profile(("unfused-elementwise", "warning", 22.6))
        prof["profile"] = {"whatif": {"unfused-elementwise": {"pct": 22.6}, "compile-cudagraphs": {"pct": 43.0}}}
        return prof
    out = fm.rescore(results, tmp_path, profile)
    assert seen == [(["kept.pt.trace.json.gz"], 32.5)]
    kept = {x["fix"]: x for x in fm.pair_rows(_entry(name="kept", fixes=("compile-cudagraphs",)), out["kept"])}
    # the fix replayed as a whole (fusion and CUDA graphs together), not the finding's own figure
    assert kept["compile-cudagraphs"]["predicted"] == 43.0 and kept["compile-cudagraphs"]["gain"] == 39.4
    # a stored profile is read with today's declarations: launch-bound no longer predicts default compile
    other = fm.pair_rows(_entry(name="other", fixes=("compile",)), out["other"])
    assert other[0]["predicted"] is None and other[0]["gain"] == -8.1
    assert results["kept"].trial["try"]["arms"][1]["predicted_pct"] == 22.3  # the stored Run is not changed


def test_score_keeps_the_text_above_the_generated_part_of_a_markdown_file(tmp_path):
    md = tmp_path / "validation.md"
    md.write_text("# by hand\n\nwhat it shows\n\nResults read from `old`: stale\n\n## Tune half\n")
    fm.write_markdown(md, "# perfstack try: validation matrix\n\nResults read from `new`: fresh\n")
    assert md.read_text() == "# by hand\n\nwhat it shows\n\nResults read from `new`: fresh\n"
    fresh = tmp_path / "new.md"
    fm.write_markdown(fresh, "# title\n\nResults read from `x`\n")
    assert fresh.read_text() == "# title\n\nResults read from `x`\n"
