"""Run a trial: the unmodified script and one arm per fix, each in a fresh process per round, rounds
alternating (A B C, A B C, ...), then the fixes that worked together as one more arm.

Every run goes through ``_arm.py`` (the child: fixes applied at the script's ``import torch``, steps timed
without the profiler, the script ended after its timed steps). Runs are started in a session of their
own, so that a Ctrl-C reaches perfstack only: the run under way is stopped (its process group killed) and
what was measured so far is kept. ``budget_s`` bounds the whole trial: a run is not started when the time
left is less than the slowest run so far. Temporary files (the child's status and output) are removed.
"""

from __future__ import annotations

import ctypes.util
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from perfstack.errors import CannotRunHere
from perfstack.profile.capture import Target, Tee
from perfstack.trial import stats
from perfstack.trial.fixes import FIXES, Fix, Setting, environment, predicted_for
from perfstack.records.trial import Applied, ArmResult, ArmRun, Trial

ARM = Path(__file__).with_name("_arm.py")
TAIL_BYTES = 4096


@dataclass
class Plan:
    target: Target
    command: list[str]
    fixes: list[Fix]
    nproc: int = 1
    warmup: int = 5
    steps: int = 20
    rounds: int = 3
    budget_s: Optional[float] = None
    step_at: Optional[str] = None
    keep: int = 5
    combine: bool = True
    predicted: dict[str, float] = field(default_factory=dict)  # finding id -> recoverable % (from a profile)
    replayed: dict[str, float] = field(default_factory=dict)  # fix id -> % the profile replayed for it whole
    profile_from: Optional[str] = None
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))


def setting(plan_environ: dict[str, str], nproc: int, findings: Optional[frozenset[str]] = None) -> Setting:
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return Setting(plan_environ, nproc, cpus, ctypes.util.find_library("jemalloc"), findings)


# -- one run -------------------------------------------------------------------------------------

Runner = Callable[[list[str], dict[str, str], float], tuple[int, str, bool]]


def _spawn(argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, str, bool]:
    """Run ``argv`` in a session of its own, keeping the tail of its output (``capture.Tee``: a flood costs
    nothing); (exit code, output tail, interrupted). A Ctrl-C or the timeout kills its whole process group
    (torchrun's ranks too)."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=env, start_new_session=True)
    tail = Tee(proc.stdout, TAIL_BYTES, echo=False)
    tail.start()
    interrupted = False
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        rc = proc.wait()
    except KeyboardInterrupt:
        interrupted = True
        _kill(proc)
        rc = proc.wait()
    tail.join(5)
    if proc.stdout is not None:
        proc.stdout.close()
    return rc, tail.text(), interrupted


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass


def _argv(plan: Plan, cfg: dict[str, Any]) -> list[str]:
    if plan.nproc > 1:
        return [sys.executable, *plan.target.python_options, "-m", "torch.distributed.run", "--standalone",
                f"--nproc-per-node={plan.nproc}", str(ARM), json.dumps(cfg)]
    return [sys.executable, *plan.target.python_options, str(ARM), json.dumps(cfg)]


def _read(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            d = json.loads(f.read(1 << 22) or "{}")
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def _statuses(path: str, nproc: int) -> list[dict[str, Any]]:
    if nproc > 1:
        return [_read(f"{path}.{r}") for r in range(nproc)]
    return [_read(path)]


def _numbers(v: Any) -> list[float]:
    """The finite numbers of a list the child wrote (the script runs in that process: trust nothing)."""
    if not isinstance(v, list):
        return []
    return [float(x) for x in v if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)]


def _merge(sts: list[dict[str, Any]]) -> dict[str, Any]:
    """The ranks' statuses as one run: each step as long as its slowest rank's, rank 0's values."""
    steps = [_numbers(s.get("step_ms")) for s in sts]
    n = min((len(x) for x in steps), default=0)
    first = sts[0] if sts else {}
    peaks = [float(s["peak_mem_mb"]) for s in sts if isinstance(s.get("peak_mem_mb"), (int, float))]
    return {"step_ms": [max(x[i] for x in steps) for i in range(n)],
            "boundary_s": _numbers(first.get("boundary_s")), "values": _numbers(first.get("values")),
            "peak_mem_mb": max(peaks) if peaks else None,
            "applied": first.get("applied") if isinstance(first.get("applied"), dict) else {},
            "steps_seen": min((int(s.get("steps_seen") or 0) for s in sts), default=0),
            "error": first.get("error") if isinstance(first.get("error"), str) else None,
            "device": str(first["device"])[:200] if isinstance(first.get("device"), str) else None}


def run_once(plan: Plan, fixes: list[Fix], rnd: int, timeout: float, spawn: Runner = _spawn) -> ArmRun:
    fd, status = tempfile.mkstemp(prefix="perfstack-try-", suffix=".json")
    os.close(fd)
    cfg: dict[str, Any] = {"args": plan.target.args, "status": status, "fixes": [f.id for f in fixes],
                           "warmup": plan.warmup, "steps": plan.steps, "step_at": plan.step_at, "keep": plan.keep}
    cfg["module" if plan.target.module else "script"] = plan.target.module or plan.target.script
    env = environment(fixes, setting(plan.environ, plan.nproc))
    t0 = time.monotonic()
    try:
        rc, tail, interrupted = spawn(_argv(plan, cfg), env, timeout)
        st = _merge(_statuses(status, plan.nproc))
    finally:
        for p in [status] + [f"{status}.{r}" for r in range(plan.nproc)]:
            try:
                os.unlink(p)
            except OSError:
                pass
    steps = st["step_ms"] if len(st["step_ms"]) >= plan.steps else []
    bounds = st["boundary_s"]
    applied = {k: Applied(count=int(v.get("count", 0)) if isinstance(v.get("count"), int) else 0,
                          what=str(v.get("what", ""))[:500])
               for k, v in st["applied"].items() if isinstance(k, str) and isinstance(v, dict)}
    error = None
    if not steps:
        error = _why(rc, tail, st, plan)
    return ArmRun(round=rnd, returncode=rc, step_ms=steps, median_ms=round(stats.median(steps), 4) if steps else None,
                  first_step_s=round(bounds[0], 3) if bounds else None,
                  warmup_s=round(bounds[-1] - bounds[0], 3) if len(bounds) > 1 else None,
                  wall_s=round(time.monotonic() - t0, 3), peak_mem_mb=st["peak_mem_mb"], applied=applied,
                  values=st["values"], error=error, interrupted=interrupted, device=st["device"])


def _why(rc: int, tail: str, st: dict[str, Any], plan: Plan) -> str:
    lines = [ln for ln in tail.strip().splitlines() if ln.strip()]
    last = "\n".join(lines[-8:])
    if rc != 0:
        return f"exited with code {rc}: {last}" if last else f"exited with code {rc}"
    seen = st.get("steps_seen", 0)
    return (f"the script ended after {seen} step{'s' if seen != 1 else ''}; the trial needs "
            f"{plan.warmup + plan.steps} ({plan.warmup} warm-up + {plan.steps} timed)")


# -- the trial ------------------------------------------------------------------------------------

Progress = Callable[[str, int, float], None]  # (arm id, round, seconds left, inf without a budget) before each run


class _Clock:
    def __init__(self, budget: Optional[float]) -> None:
        self.t0 = time.monotonic()
        self.budget = budget
        self.longest = 0.0

    def left(self) -> float:
        return float("inf") if self.budget is None else self.budget - (time.monotonic() - self.t0)

    def allows(self) -> bool:
        return self.left() > self.longest

    def timeout(self) -> float:
        """How long one run may take: an hour for the first (start-up, compilation), then ten times the
        slowest run so far (at least 5 minutes), so that a script that hangs under a fix costs minutes, not
        hours; never past the budget."""
        limit = 3600.0 if self.longest == 0 else max(300.0, 10 * self.longest)
        return limit if self.budget is None else min(limit, max(30.0, self.left()))


def run(plan: Plan, progress: Progress = lambda arm, rnd, left: None, spawn: Runner = _spawn) -> Trial:
    """The trial of ``plan`` (see the module doc). Raises CannotRunHere when the unmodified script fails."""
    clock = _Clock(plan.budget_s)
    arms: list[tuple[str, list[Fix]]] = [("baseline", [])] + [(f.id, [f]) for f in plan.fixes]
    runs: dict[str, list[ArmRun]] = {a: [] for a, _ in arms}
    notes: list[str] = []
    interrupted = _rounds(plan, arms, runs, clock, progress, spawn, notes)
    base = runs["baseline"]
    if not any(r.step_ms for r in base):
        why = (base[0].error or "no run finished") if base else "the budget allowed no run"
        raise CannotRunHere(f"the unmodified script did not complete a trial run: {why}",
                            hint="run it as 'python SCRIPT ARGS' to check it, or lower --warmup/--steps")
    results = [_result(a, fixes, runs, plan) for a, fixes in arms]
    noise = stats.noise_pct([r.step_ms for r in base])
    for res in results:
        _judge(res, results[0], noise)
    combo = _combination(plan, results)
    if combo and not interrupted and plan.combine:
        arms2 = [("baseline", []), ("combined", combo)]
        runs["combined"] = []
        interrupted = _rounds(plan, arms2, runs, clock, progress, spawn, notes)
        results[0] = _result("baseline", [], runs, plan)
        noise = stats.noise_pct([r.step_ms for r in runs["baseline"]])
        comb = _result("combined", combo, runs, plan)
        results.append(comb)
        for res in results:
            _judge(res, results[0], noise)
        notes += _interaction(results, comb)
    best = _best(results)
    return Trial(command=plan.command, nproc=plan.nproc, warmup=plan.warmup, steps=plan.steps, rounds=plan.rounds,
                 noise_pct=None if noise is None else round(noise, 2),
                 method=f"median of {plan.steps} steps per run after {plan.warmup} warm-up, best of the rounds; "
                        f"95% interval by a two-level bootstrap ({stats.B} resamples of rounds, then steps)",
                 arms=results, best=best.fixes if best else [],
                 advice=[FIXES[f].advice for f in (best.fixes if best else []) if f in FIXES],
                 notes=notes, profile_from=plan.profile_from, interrupted=interrupted,
                 device=next((r.device for r in base if r.device), None),
                 elapsed_s=round(time.monotonic() - clock.t0, 1))


def _rounds(plan: Plan, arms: Sequence[tuple[str, list[Fix]]], runs: dict[str, list[ArmRun]], clock: _Clock,
            progress: Progress, spawn: Runner, notes: list[str]) -> bool:
    """Run the arms in alternating rounds; True when Ctrl-C stopped them."""
    for rnd in range(1, plan.rounds + 1):
        for arm, fixes in arms:
            if not clock.allows():
                notes.append(f"the budget ended the trial in round {rnd}, before arm {arm}")
                return False
            progress(arm, rnd, clock.left())
            r = run_once(plan, fixes, rnd, clock.timeout(), spawn)
            clock.longest = max(clock.longest, r.wall_s)
            runs[arm].append(r)
            if r.interrupted:
                notes.append(f"interrupted (Ctrl-C) in round {rnd}, arm {arm}")
                return True
            if arm == "baseline" and rnd == 1 and not r.step_ms:
                return False
    return False


def _result(arm: str, fixes: list[Fix], runs: dict[str, list[ArmRun]], plan: Plan) -> ArmResult:
    rs = runs.get(arm, [])
    ok = [r for r in rs if r.step_ms]
    pred: Optional[float] = None
    by: list[str] = []
    if len(fixes) == 1:
        pred, by = predicted_for(fixes[0], plan.predicted, plan.replayed)
    peaks = [r.peak_mem_mb for r in rs if r.peak_mem_mb is not None]
    fastest = min(ok, key=lambda r: r.median_ms or 0.0) if ok else None
    return ArmResult(id=arm, title=fixes[0].title if len(fixes) == 1 else
                     ("the unmodified script" if not fixes else "the fixes that worked, together"),
                     fixes=[f.id for f in fixes], changes_numerics=any(f.changes_numerics for f in fixes),
                     runs=rs, best_ms=stats.best([r.step_ms for r in ok]),
                     predicted_pct=None if pred is None else round(pred, 1), predicted_by=by,
                     peak_mem_mb=max(peaks) if peaks else None,
                     first_step_s=fastest.first_step_s if fastest else None)


def _judge(res: ArmResult, base: ArmResult, noise: Optional[float]) -> None:
    base_runs = [r.step_ms for r in base.runs if r.step_ms]
    if res.id == "baseline":
        res.verdict, res.gain_pct, res.ci_pct = "baseline", None, None
        res.numerics, res.numerics_diff = stats.numerics([r.values for r in base.runs[1:]], base.runs[0].values) \
            if len(base.runs) > 1 else ("", None)
        if res.numerics == "changed":
            res.note = "the unmodified script's first losses differ from run to run (unseeded or nondeterministic)"
        return
    ok = [r.step_ms for r in res.runs if r.step_ms]
    if not res.runs:
        res.verdict, res.note = "not run", "the budget ran out before this arm"
        return
    if not ok:
        res.verdict = "failed"
        res.note = next((r.error for r in res.runs if r.error), "no run finished") or ""
        return
    res.gain_pct = round(100 * (1 - res.best_ms / base.best_ms), 2) if res.best_ms and base.best_ms else None
    ci = stats.gain_ci(base_runs, ok)
    res.ci_pct = [round(ci[0], 2), round(ci[1], 2)] if ci else None
    res.verdict = stats.verdict(res.gain_pct, ci, noise)
    first = next((r.values for r in res.runs if r.values), [])
    res.numerics, res.numerics_diff = stats.numerics([r.values for r in base.runs], first)
    unapplied = _unapplied(res)
    if unapplied:
        res.verdict, res.note = "not applied", unapplied
    elif res.verdict == "no measurable gain" and noise is not None:
        res.note = f"within the noise of this machine ({noise:.1f}% between the two fastest unmodified runs)"


def _unapplied(res: ArmResult) -> str:
    """Why a fix changed nothing in the script (it built no DataLoader, has no convolution, ...), or ''."""
    whys = []
    for fid in res.fixes:
        seen = [r.applied.get(fid) for r in res.runs if r.step_ms]
        if FIXES.get(fid) is not None and FIXES[fid].env is None and not any(a and a.count for a in seen):
            why = next((a.what for a in seen if a and a.what), "the script never built what it patches")
            whys.append(f"{fid}: {why}")
    return "; ".join(whys) if len(whys) == len(res.fixes) else ""


def _combination(plan: Plan, results: list[ArmResult]) -> list[Fix]:
    """The fixes worth combining: each measured to work on its own, in order of gain."""
    good = [r for r in results[1:] if r.verdict == "works" and len(r.fixes) == 1]
    good.sort(key=lambda r: -(r.gain_pct or 0))
    out: list[Fix] = []
    for r in good:
        f = FIXES[r.fixes[0]]
        clash = (f.id == "fused-optimizer" and any(x.id == "foreach-optimizer" for x in out)) or \
                (f.id == "foreach-optimizer" and any(x.id == "fused-optimizer" for x in out))
        if not clash:
            out.append(f)
    return out if len(out) >= 2 else []


def _interaction(results: list[ArmResult], comb: ArmResult) -> list[str]:
    singles = [r for r in results if r.id in comb.fixes and r.gain_pct is not None]
    if comb.gain_pct is None or not singles:
        return []
    expect = 1.0
    for r in singles:
        expect *= 1 - (r.gain_pct or 0) / 100
    expected = 100 * (1 - expect)
    if comb.gain_pct < 0.9 * expected:
        return [f"together the fixes gave {comb.gain_pct:.1f}%, less than the {expected:.1f}% their separate gains "
                "would compound to: they recover some of the same time"]
    return [f"together the fixes gave {comb.gain_pct:.1f}% (their separate gains compound to {expected:.1f}%)"]


def _best(results: list[ArmResult]) -> Optional[ArmResult]:
    """The fastest arm that works and does not change the numbers beyond tolerance."""
    good = [r for r in results if r.verdict == "works" and r.numerics != "changed"]
    return min(good, key=lambda r: r.best_ms or float("inf")) if good else None
