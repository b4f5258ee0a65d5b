"""Validate `perfstack try` on a zoo of ordinary PyTorch scripts: run the matrix, then tabulate it.

Every workload in MANIFEST is a plain user script under benchmarks/workloads/ with its natural
performance anti-patterns, and the fixes (perfstack fix ids) that should address them. For each
one, `run` profiles it (`perfstack profile`, one-process workloads only) and then measures each
fix on it (`perfstack try --from PROFILE`); `table` compares what the profile predicted with what
`try` measured, separately for the two halves of the manifest.

Run the matrix on a GPU machine (one workload per GPU, two for the 2-GPU ones; resumable: a
workload whose outputs exist in DIR is skipped, so the same command continues an interrupted run):

    PYTHONPATH=$PWD/src python benchmarks/fix_matrix.py run --out fixrun --gpus 4 --deadline-s 5400
    python benchmarks/fix_matrix.py run --out fixrun --only resnet18,gpt2 --rounds 3 --steps 15

Tabulate whatever is there (missing workloads are listed as not run), on any machine:

    python benchmarks/fix_matrix.py table --out fixrun --md docs/validation.md
    PYTHONPATH=$PWD/src python benchmarks/fix_matrix.py score --out benchmarks/results/fix-matrix-h200 \
        --md docs/validation.md   # the predictions of this perfstack: kept traces profiled again
    python benchmarks/fix_matrix.py manifest      # the workloads, their fixes and halves

Halves. The manifest is split into a "tune" half (look at it while adjusting how perfstack
predicts) and a "holdout" half (judge the result on it only). The rule is fixed here, before any
result exists: within each family, in manifest order, the 1st, 3rd, 5th ... member is "tune" and
the 2nd, 4th ... is "holdout" (HALF_RULE, assign_halves).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from perfstack.trial.fixes import FIXES, predicted_for, replayed_fixes

ROOT = Path(__file__).resolve().parents[1]

FIX_IDS = tuple(FIXES)  # every fix perfstack try can apply (perfstack.trial.fixes)

HALF_RULE = ("within each family, in manifest order, the 1st, 3rd, 5th ... member is 'tune' and the "
             "2nd, 4th ... is 'holdout'")

# A fix that measured less than this (% of the step) does not back a warning or critical finding.
FALSE_CLAIM_PCT = 5.0

# Which fixes address a profile finding, and what the profile predicts for each: perfstack's own declarations
# (perfstack.trial.fixes: each fix names the findings it would recover), the one source for try and this table.


def findings_of(profile: Optional[dict[str, Any]]) -> dict[str, float]:
    """A profile Run's findings as finding id -> recoverable % (the largest where an id repeats)."""
    out: dict[str, float] = {}
    for f in (profile or {}).get("findings") or []:
        if isinstance(f, dict) and isinstance(f.get("id"), str):
            pct = _num(f.get("recoverable_pct")) or 0.0
            out[f["id"]] = max(out.get(f["id"], 0.0), pct)
    return out


@dataclass(frozen=True)
class Entry:
    name: str
    script: str  # relative to the repository root
    args: tuple[str, ...]
    nproc: int  # 1, or 2 (launched by `perfstack try --nproc 2`)
    fixes: tuple[str, ...]
    family: str
    half: str = ""
    env: tuple[tuple[str, str], ...] = ()  # the job's launch environment, as a user's job script sets it
    steps_by: str = "optimizer"  # or "perfstack.step" for inference loops without an optimizer

    def command(self, extra: tuple[str, ...] = ()) -> list[str]:
        return [sys.executable, self.script, *self.args, *extra]


def _w(name: str, script: str, fixes: str, family: str, args: tuple[str, ...] = (), nproc: int = 1,
       env: tuple[tuple[str, str], ...] = (), steps_by: str = "optimizer") -> Entry:
    return Entry(name=name, script=f"benchmarks/workloads/{script}", args=args, nproc=nproc,
                 fixes=tuple(fixes.split()), family=family, env=env, steps_by=steps_by)


_STALE_P2P = (("NCCL_P2P_DISABLE", "1"),)
_STALE_P2P_IB = (("NCCL_P2P_DISABLE", "1"), ("NCCL_IB_DISABLE", "1"))

# Order matters within a family: it decides the halves (HALF_RULE). The fixes are the 1-3 each workload's
# natural anti-patterns call for, trimmed so that the matrix fits few device calls of 4 GPUs (a compile arm
# costs a minute of compilation per fresh process: it is kept where the profile's launch-bound or fusion
# claims are to be checked: the small-kernel step, the conv nets and the two decoders).
_ENTRIES = [
    _w("resnet18", "resnet18_train.py", "channels-last bf16-autocast cudnn-benchmark compile-cudagraphs", "cnn"),
    _w("resnet50", "resnet50_train.py", "channels-last tf32 compile-cudagraphs", "cnn"),
    _w("mobilenet-v3", "mobilenet_train.py", "channels-last cudnn-benchmark", "cnn"),
    _w("vit-b16", "vit_b16_train.py", "tf32 bf16-autocast", "vit"),
    _w("vit-scratch", "vit_scratch_train.py", "bf16-autocast fused-optimizer", "vit"),
    _w("bert-mlm", "bert_mlm_train.py", "tf32 fused-optimizer", "encoder"),
    _w("bert-classify", "bert_classify_train.py", "bf16-autocast pin-memory", "encoder"),
    _w("gpt2", "gpt2_train.py", "tf32 fused-optimizer compile", "decoder"),
    _w("llama", "llama_train.py", "tf32 bf16-autocast compile", "decoder"),
    _w("t5", "t5_train.py", "tf32 fused-optimizer", "seq2seq"),
    _w("bart", "bart_train.py", "tf32 bf16-autocast", "seq2seq"),
    _w("kv-cat-b1", "kv_cat_decode.py", "static-kv-cache bf16-autocast", "decode",
       args=("--batch-size", "1"), steps_by="perfstack.step"),
    _w("kv-cat-b32", "kv_cat_decode.py", "static-kv-cache bf16-autocast", "decode",
       args=("--batch-size", "32"), steps_by="perfstack.step"),
    _w("hf-generate-b32", "hf_generate.py", "static-kv-cache bf16-autocast", "decode",
       args=("--batch-size", "32"), steps_by="perfstack.step"),
    _w("hf-generate-b1", "hf_generate.py", "static-kv-cache", "decode",
       args=("--batch-size", "1"), steps_by="perfstack.step"),
    _w("unet-diffusion", "unet_diffusion_train.py", "channels-last bf16-autocast", "conv-generative"),
    _w("conv-vae", "conv_vae_train.py", "channels-last cudnn-benchmark", "conv-generative"),
    _w("moe-loop", "moe_loop_train.py", "bf16-autocast fused-optimizer", "moe"),
    _w("mixtral", "mixtral_train.py", "bf16-autocast tf32", "moe"),
    _w("dataloader-heavy", "dataloader_heavy_train.py", "dataloader-workers pin-memory omp-threads jemalloc",
       "input-pipeline"),
    _w("text-loader", "text_loader_train.py", "dataloader-workers pin-memory", "input-pipeline"),
    _w("ckpt-transformer", "ckpt_transformer_train.py", "no-checkpointing tf32", "checkpointing"),
    _w("hf-grad-ckpt", "hf_grad_ckpt_train.py", "no-checkpointing fused-optimizer", "checkpointing"),
    _w("mlp-fp32", "mlp_fp32_train.py", "tf32 bf16-autocast", "gemm"),
    _w("dlrm", "dlrm_train.py", "fused-optimizer tf32", "gemm"),
    _w("adam-many-params", "adam_many_params_train.py", "foreach-optimizer fused-optimizer", "small-kernels"),
    _w("tiny-launch-bound", "tiny_launch_bound_train.py", "compile compile-cudagraphs fused-optimizer",
       "small-kernels"),
    _w("empty-cache-loop", "empty_cache_loop_train.py", "expandable-segments", "allocator"),
    _w("varlen-churn", "varlen_churn_train.py", "expandable-segments bf16-autocast", "allocator"),
    _w("ddp-accum", "ddp_accum_train.py", "ddp-no-sync nccl-defaults", "distributed",
       nproc=2, env=_STALE_P2P),
    _w("fsdp", "fsdp_train.py", "nccl-defaults bf16-autocast", "distributed", nproc=2, env=_STALE_P2P_IB),
    _w("ddp-accum-8", "ddp_accum_train.py", "ddp-no-sync bf16-autocast", "distributed", nproc=2,
       args=("--micro-batch", "4", "--accum", "8")),
]


def assign_halves(entries: list[Entry]) -> list[Entry]:
    """HALF_RULE: alternate tune/holdout within each family, in the given order."""
    seen: dict[str, int] = {}
    out = []
    for e in entries:
        k = seen.get(e.family, 0)
        seen[e.family] = k + 1
        out.append(dataclasses.replace(e, half="tune" if k % 2 == 0 else "holdout"))
    return out


MANIFEST: list[Entry] = assign_halves(_ENTRIES)


def pair_count(entries: list[Entry] = MANIFEST) -> int:
    return sum(len(e.fixes) for e in entries)


# ---------------------------------------------------------------------------------------------
# run: profile and try every workload, in parallel over the GPUs
# ---------------------------------------------------------------------------------------------

def perfstack_cmd() -> list[str]:
    return [sys.executable, "-m", "perfstack"]


def profile_command(e: Entry, out: Path, window_s: Optional[int] = None, extra: tuple[str, ...] = (),
                    steps: int = 3) -> list[str]:
    """`perfstack profile` of one workload; window_s for a step-marked script the profiler cannot step."""
    window = ["--window", str(window_s)] if window_s else []
    window += ["--steps", str(steps)] if steps != 3 else []
    ranks = ["--nproc", str(e.nproc)] if e.nproc > 1 else []
    return [*perfstack_cmd(), "profile", "--stop-after-window", *window, *ranks, "-q",
            "--out-dir", str(out / "traces" / e.name), "-o", str(out / f"{e.name}.profile.json"), "--",
            *e.command(extra)]


def try_command(e: Entry, out: Path, rounds: int, steps: int, with_profile: bool, warmup: int = 5,
                combine: bool = True, extra: tuple[str, ...] = ()) -> list[str]:
    cmd = [*perfstack_cmd(), "try"]
    if with_profile:
        cmd += ["--from", str(out / f"{e.name}.profile.json")]
    cmd += ["--fix", ",".join(e.fixes), "--rounds", str(rounds), "--steps", str(steps), "--warmup", str(warmup)]
    if not combine:
        cmd.append("--no-combine")
    if e.nproc > 1:
        cmd += ["--nproc", str(e.nproc)]
    return [*cmd, "-q", "-o", str(out / f"{e.name}.try.json"), "--", *e.command(extra)]


def child_env(e: Entry, gpus: list[int], base: Optional[dict[str, str]] = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    env["PYTHONUNBUFFERED"] = "1"
    src = str(ROOT / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    port = str(29500 + 10 * (gpus[0] if gpus else 0))  # concurrent 2-GPU jobs must not share a rendezvous port
    env["MASTER_PORT"] = port
    env["PET_MASTER_PORT"] = port  # torchrun's --master-port
    env.update(dict(e.env))
    return env


@dataclass
class Outcome:
    rc: int
    stdout: str
    stderr: str
    seconds: float


def run_command(cmd: list[str], env: dict[str, str], timeout_s: float) -> Outcome:
    """Run in its own process group; on timeout end that group (TERM, then KILL) and report rc 124."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        out, err = "", ""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                out, err = proc.communicate(timeout=15)
                break
            except subprocess.TimeoutExpired:
                continue
        rc = 124
        err = (err or "") + f"\n[fix_matrix] timed out after {timeout_s:.0f} s; process group ended\n"
    return Outcome(rc, out or "", err or "", time.monotonic() - t0)


def tail(text: str, lines: int = 60, chars: int = 8000) -> str:
    return "\n".join(text.splitlines()[-lines:])[-chars:]


def log_block(kind: str, cmd: list[str], env_note: str, o: Outcome) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    return (f"### {stamp} {kind}: exit {o.rc} after {o.seconds:.1f} s\n$ {env_note}{' '.join(cmd)}\n"
            f"--- stdout (tail) ---\n{tail(o.stdout)}\n--- stderr (tail) ---\n{tail(o.stderr)}\n\n")


def append_log(out: Path, name: str, text: str) -> None:
    with open(out / f"{name}.log", "a", encoding="utf-8") as f:
        f.write(text)


@dataclass
class RunOptions:
    out: Path
    rounds: int = 3
    steps: int = 15
    warmup: int = 5
    combine: bool = True
    timeout_s: float = 3600.0
    profile_window_s: Optional[int] = None  # passed to step-marked workloads when profile cannot step them
    deadline: Optional[float] = None  # time.monotonic() after which nothing may run
    script_args: tuple[str, ...] = ()  # appended to every workload's own arguments (e.g. --small)
    profile_steps: int = 3  # steps in each profiled window (fewer keep the traces small enough to keep)
    runner: Callable[[list[str], dict[str, str], float], Outcome] = run_command


def _timeout(opts: RunOptions) -> float:
    if opts.deadline is None:
        return opts.timeout_s
    return max(30.0, min(opts.timeout_s, opts.deadline - time.monotonic()))


def run_workload(e: Entry, gpus: list[int], opts: RunOptions) -> dict[str, int]:
    """Profile then try; outputs already in opts.out are kept, not redone."""
    out = opts.out
    env = child_env(e, gpus)
    note = " ".join(f"{k}={v}" for k, v in [("CUDA_VISIBLE_DEVICES", env["CUDA_VISIBLE_DEVICES"]), *e.env]) + " "
    rcs: dict[str, int] = {}
    prof = out / f"{e.name}.profile.json"
    if not prof.exists():
        window = opts.profile_window_s if e.steps_by == "perfstack.step" else None
        cmd = profile_command(e, out, window, opts.script_args, opts.profile_steps)
        o = opts.runner(cmd, env, _timeout(opts))
        rcs["profile"] = o.rc
        append_log(out, e.name, log_block("profile", cmd, note, o))
    if not (out / f"{e.name}.try.json").exists():
        cmd = try_command(e, out, opts.rounds, opts.steps, with_profile=prof.exists(), warmup=opts.warmup,
                          combine=opts.combine, extra=opts.script_args)
        o = opts.runner(cmd, env, _timeout(opts))
        rcs["try"] = o.rc
        append_log(out, e.name, log_block("try", cmd, note, o))
    return rcs


def done(e: Entry, out: Path) -> bool:
    return (out / f"{e.name}.try.json").exists() and (out / f"{e.name}.profile.json").exists()


class Scheduler:
    """Start workloads as GPUs free up (2-GPU ones first), never past the deadline's margin."""

    def __init__(self, entries: list[Entry], gpus: int, opts: RunOptions, margin_s: float, first_gpu: int = 0,
                 say: Callable[[str], None] = print):
        self.pending = sorted(entries, key=lambda e: -e.nproc)
        self.free = list(range(first_gpu, first_gpu + gpus))
        self.gpus, self.opts, self.margin_s, self.say = gpus, opts, margin_s, say
        self.cond = threading.Condition()
        self.running = 0
        self.results: dict[str, Any] = {}

    def _near_deadline(self) -> bool:
        return self.opts.deadline is not None and time.monotonic() > self.opts.deadline - self.margin_s

    def _not_started(self, e: Entry, why: str) -> None:
        self.results[e.name] = why
        append_log(self.opts.out, e.name, f"### {time.strftime('%Y-%m-%dT%H:%M:%S')} not started: {why}\n\n")
        self.say(f"{e.name}: not started ({why})")

    def _work(self, e: Entry, ids: list[int]) -> None:
        try:
            self.results[e.name] = run_workload(e, ids, self.opts)
        except Exception as exc:  # one broken workload never stops the rest
            self.results[e.name] = f"error: {type(exc).__name__}: {exc}"
            append_log(self.opts.out, e.name, f"### {time.strftime('%Y-%m-%dT%H:%M:%S')} driver error: {exc!r}\n\n")
        finally:
            self.say(f"{e.name}: finished {self.results[e.name]}")
            with self.cond:
                self.free = sorted(self.free + ids)
                self.running -= 1
                self.cond.notify_all()

    def _start_what_fits(self) -> None:
        for e in list(self.pending):
            if self._near_deadline():
                for rest in self.pending:
                    self._not_started(rest, "deadline near")
                self.pending.clear()
                return
            if e.nproc > self.gpus:
                self.pending.remove(e)
                self._not_started(e, f"needs {e.nproc} GPUs, {self.gpus} given")
                continue
            if e.nproc <= len(self.free):
                ids, self.free = self.free[:e.nproc], self.free[e.nproc:]
                self.pending.remove(e)
                self.running += 1
                self.say(f"{e.name}: starting on GPU {','.join(map(str, ids))}")
                threading.Thread(target=self._work, args=(e, ids), daemon=True).start()

    def run(self) -> dict[str, Any]:
        with self.cond:
            while self.pending or self.running:
                self._start_what_fits()
                if self.pending or self.running:
                    self.cond.wait(timeout=5.0)
        return self.results


def profile_knows_step_marker() -> bool:
    """Whether this perfstack's profile finds steps by perfstack.step() (else a --window is needed)."""
    try:
        r = subprocess.run([*perfstack_cmd(), "profile", "--help"], cwd=ROOT, env=child_env(MANIFEST[0], []),
                           capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "perfstack.step" in r.stdout


def count_gpus() -> int:
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
        n = sum(1 for line in r.stdout.splitlines() if line.startswith("GPU "))
    except (OSError, subprocess.TimeoutExpired):
        n = 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip():
        n = min(n, len(visible.split(","))) if n else len(visible.split(","))
    return max(n, 1)


def select(names: Optional[str], entries: list[Entry] = MANIFEST) -> list[Entry]:
    if not names:
        return list(entries)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {e.name: e for e in entries}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise SystemExit(f"unknown workload(s): {', '.join(unknown)}; known: {', '.join(known)}")
    return [known[n] for n in wanted]


def cmd_run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    entries = select(args.only)
    todo = [e for e in entries if not done(e, out)]
    for e in entries:
        if e not in todo:
            print(f"{e.name}: outputs already in {out}, skipped")
    window = None if profile_knows_step_marker() else args.profile_window_s
    opts = RunOptions(out=out, rounds=args.rounds, steps=args.steps, warmup=args.warmup, combine=not args.no_combine,
                      timeout_s=args.timeout_s,
                      profile_window_s=window, deadline=(t0 + args.deadline_s) if args.deadline_s else None,
                      script_args=tuple(args.script_args.split()), profile_steps=args.profile_steps)
    gpus = args.gpus or count_gpus()
    print(f"{len(todo)} workload(s) to run on {gpus} GPU(s) into {out}", flush=True)
    results = Scheduler(todo, gpus, opts, args.margin_s, first_gpu=args.first_gpu, say=lambda s: print(s, flush=True)).run()
    finished = sum(1 for e in entries if done(e, out))
    print(f"{finished} of {len(entries)} workload(s) have their outputs; {time.monotonic() - t0:.0f} s", flush=True)
    return 0 if all(isinstance(r, dict) and not any(r.values()) for r in results.values()) else 1


# ---------------------------------------------------------------------------------------------
# table: what the profile predicted against what try measured
# ---------------------------------------------------------------------------------------------

_LOG_LINE = re.compile(r"^### \S+ (profile|try): exit (-?\d+)", re.M)
_NOT_STARTED = re.compile(r"^### \S+ not started: (.*)$", re.M)


@dataclass
class Result:
    profile: Optional[dict[str, Any]] = None
    trial: Optional[dict[str, Any]] = None
    exits: dict[str, int] = field(default_factory=dict)  # last exit code of each command, from the log
    not_started: Optional[str] = None
    problems: list[str] = field(default_factory=list)


def _read_json(path: Path, problems: list[str]) -> Optional[dict[str, Any]]:
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        problems.append(f"{path.name} unreadable: {exc}")
        return None
    if not isinstance(data, dict):
        problems.append(f"{path.name} is not a JSON object")
        return None
    return data


def load_results(out: Path, entries: list[Entry] = MANIFEST) -> dict[str, Result]:
    results = {}
    for e in entries:
        r = Result()
        r.profile = _read_json(out / f"{e.name}.profile.json", r.problems)
        r.trial = _read_json(out / f"{e.name}.try.json", r.problems)
        log = out / f"{e.name}.log"
        if log.exists():
            text = log.read_text(encoding="utf-8", errors="replace")
            for kind, rc in _LOG_LINE.findall(text):
                r.exits[kind] = int(rc)
            starts = _NOT_STARTED.findall(text)
            if starts and not r.exits:
                r.not_started = starts[-1]
        results[e.name] = r
    return results


def status(r: Result) -> str:
    """'ok', or why there is no try result: 'failed (try exit 1)', 'not run (deadline near)', 'not run'."""
    if r.trial is not None:
        return "ok"
    for kind in ("try", "profile"):
        if r.exits.get(kind):
            return f"failed ({kind} exit {r.exits[kind]})"
    if r.problems:
        return "failed (" + "; ".join(r.problems) + ")"
    if r.not_started:
        return f"not run ({r.not_started})"
    return "not run"


def arms(trial: Optional[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    section = (trial or {}).get("try") or {}
    return {str(a.get("id")): a for a in section.get("arms") or [] if isinstance(a, dict)}


def _num(x: Any) -> Optional[float]:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def pair_rows(e: Entry, r: Result) -> list[dict[str, Any]]:
    """One row per (workload, fix) of the manifest, whatever exists of its result."""
    st = status(r)
    by_id = arms(r.trial)
    rows = []
    for fix in e.fixes:
        a = by_id.get(fix)
        row: dict[str, Any] = {"workload": e.name, "family": e.family, "half": e.half, "fix": fix,
                               "predicted": None, "gain": None, "ci": None, "verdict": st, "numerics": "",
                               "predicted_by": [], "peak_mem_mb": None}
        if st == "ok" and a is None:
            row["verdict"] = "missing from the try Run"
        elif a is not None:
            ci = a.get("ci_pct")
            row.update(predicted=_num(a.get("predicted_pct")), gain=_num(a.get("gain_pct")),
                       ci=tuple(ci) if isinstance(ci, (list, tuple)) and len(ci) == 2 else None,
                       verdict=str(a.get("verdict", "")), numerics=str(a.get("numerics") or ""),
                       predicted_by=list(a.get("predicted_by") or []), peak_mem_mb=_num(a.get("peak_mem_mb")))
        if row["predicted"] is None and r.profile is not None and fix in FIXES:
            # the trial ran without --from (or is scored afresh): the profile of the same script predicts for it
            pct, by = predicted_for(FIXES[fix], findings_of(r.profile), replayed_of(r.profile))
            row.update(predicted=pct, predicted_by=by)
        rows.append(row)
    return rows


def finding_errors(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per finding id: mean absolute error |predicted - measured| over the pairs it predicted."""
    acc: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        if row["predicted"] is None or row["gain"] is None:
            continue
        for fid in row["predicted_by"] or ["(unattributed)"]:
            acc.setdefault(fid, []).append((row["predicted"], row["gain"]))
    out = {}
    for fid, pairs in sorted(acc.items()):
        n = len(pairs)
        out[fid] = {"n": n, "mae": sum(abs(p - g) for p, g in pairs) / n,
                    "mean_predicted": sum(p for p, _ in pairs) / n, "mean_measured": sum(g for _, g in pairs) / n}
    return out


def replayed_of(profile: Optional[dict[str, Any]]) -> dict[str, float]:
    """The fixes a profile Run replayed as a whole (its what-ifs named after a fix), as fix id -> %."""
    whatif = ((profile or {}).get("profile") or {}).get("whatif")
    return replayed_fixes(whatif) if isinstance(whatif, dict) else {}


def ranked_findings(profile: Optional[dict[str, Any]]) -> list[dict[str, Any]]:
    """The profile's findings as perfstack ranks them: largest recoverable share first, low-confidence ones
    (a figure the trace cannot back) after the others (ties keep the profile's order)."""
    found = [f for f in (profile or {}).get("findings") or [] if isinstance(f, dict) and f.get("id")]
    return sorted(found, key=lambda f: (f.get("confidence") == "low", -(_num(f.get("recoverable_pct")) or -1.0)))


def fixes_for(fid: str, by_id: dict[str, dict[str, Any]]) -> set[str]:
    """The tried single fixes that address a finding, as perfstack declares them (FIXES[...].predicted_by)."""
    return {k for k in by_id if k in FIXES and fid in FIXES[k].predicted_by}


def best_fixes(by_id: dict[str, dict[str, Any]]) -> tuple[set[str], Optional[float]]:
    """The single fix(es) that measured the largest gain among those that work."""
    works = {k: _num(a.get("gain_pct")) for k, a in by_id.items()
             if k not in ("baseline", "combined") and a.get("verdict") == "works" and _num(a.get("gain_pct")) is not None}
    if not works:
        return set(), None
    top = max(v for v in works.values() if v is not None)
    return {k for k, v in works.items() if v == top}, top


def recall(entries: list[Entry], results: dict[str, Result]) -> dict[str, Any]:
    """Share of workloads whose best measured fix is a fix of the profile's top-ranked finding."""
    rows, excluded = [], []
    for e in entries:
        r = results.get(e.name) or Result()
        if r.profile is None or r.trial is None:
            excluded.append((e.name, "no profile" if r.trial is not None else status(r)))
            continue
        by_id = arms(r.trial)
        best, gain = best_fixes(by_id)
        if not best:
            excluded.append((e.name, "no single fix worked"))
            continue
        ranked = ranked_findings(r.profile)
        top = ranked[0] if ranked else None
        top_fixes = fixes_for(top["id"], by_id) if top else set()
        rows.append({"workload": e.name, "top_finding": top["id"] if top else None,
                     "top_pct": _num(top.get("recoverable_pct")) if top else None,
                     "top_fixes": sorted(top_fixes), "best": sorted(best), "best_gain": gain,
                     "hit": bool(best & top_fixes)})
    hits = sum(1 for x in rows if x["hit"])
    return {"hits": hits, "counted": len(rows), "rows": rows, "excluded": excluded}


def false_claims(entries: list[Entry], results: dict[str, Result],
                 threshold: float = FALSE_CLAIM_PCT) -> dict[str, Any]:
    """Warning/critical findings whose fix(es) were tried and measured below threshold %."""
    claims, tested, untested = [], 0, []
    for e in entries:
        r = results.get(e.name) or Result()
        if r.profile is None or r.trial is None:
            continue
        by_id = arms(r.trial)
        for f in ranked_findings(r.profile):
            if f.get("severity") not in ("warning", "critical"):
                continue
            fixes = fixes_for(f["id"], by_id)
            gains = [g for g in (_num(by_id[k].get("gain_pct")) for k in fixes) if g is not None]
            if not gains:
                untested.append((e.name, f["id"], "no fix for it was tried" if not fixes else "its fix did not run"))
                continue
            tested += 1
            if max(gains) < threshold:
                claims.append({"workload": e.name, "finding": f["id"], "severity": f["severity"],
                               "recoverable_pct": _num(f.get("recoverable_pct")), "fixes": sorted(fixes),
                               "measured": max(gains)})
    return {"claims": claims, "tested": tested, "untested": untested}


# ---------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------

def fmt(x: Optional[float], digits: int = 1) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def fmt_gain(gain: Optional[float], ci: Optional[tuple[Any, Any]]) -> str:
    if gain is None:
        return "—"
    if ci is None or _num(ci[0]) is None or _num(ci[1]) is None:
        return f"{gain:.1f}"
    return f"{gain:.1f} [{float(ci[0]):.1f}, {float(ci[1]):.1f}]"


def _workload_table(entries: list[Entry], results: dict[str, Result]) -> list[str]:
    lines = ["| workload | family | status | baseline ms | noise % | top finding (recoverable %) | combined gain % |",
             "|---|---|---|---|---|---|---|"]
    for e in entries:
        r = results.get(e.name) or Result()
        by_id = arms(r.trial)
        base, comb = by_id.get("baseline") or {}, by_id.get("combined") or {}
        ranked = ranked_findings(r.profile)
        top = (f"{ranked[0]['id']} ({fmt(_num(ranked[0].get('recoverable_pct')))})" if ranked
               else ("none" if r.profile is not None else ("not profiled (2 GPUs)" if e.nproc > 1 else "no profile")))
        noise = _num(((r.trial or {}).get("try") or {}).get("noise_pct"))
        lines.append(f"| {e.name} | {e.family} | {status(r)} | {fmt(_num(base.get('best_ms')), 2)} | {fmt(noise)} "
                     f"| {top} | {fmt_gain(_num(comb.get('gain_pct')), comb.get('ci_pct'))} |")
    return lines


def _pair_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| workload | fix | predicted % | measured gain % [CI] | verdict | predicted by | numerics |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['workload']} | {row['fix']} | {fmt(row['predicted'])} | {fmt_gain(row['gain'], row['ci'])} "
                     f"| {row['verdict']} | {', '.join(row['predicted_by']) or '—'} | {row['numerics'] or '—'} |")
    return lines


def _error_table(rows: list[dict[str, Any]]) -> list[str]:
    errs = finding_errors(rows)
    if not errs:
        return ["No pair has both a prediction and a measurement yet."]
    lines = ["| finding | pairs | mean abs error (points) | mean predicted % | mean measured % |", "|---|---|---|---|---|"]
    for fid, s in errs.items():
        lines.append(f"| {fid} | {int(s['n'])} | {s['mae']:.1f} | {s['mean_predicted']:.1f} | {s['mean_measured']:.1f} |")
    missed = [r for r in rows if r["predicted"] is None and r["verdict"] == "works"]
    if missed:
        lines += ["", "Gains no finding predicted: " + ", ".join(
            f"{r['workload']}/{r['fix']} ({fmt(r['gain'])}%)" for r in missed) + "."]
    return lines


def _recall_lines(entries: list[Entry], results: dict[str, Result]) -> list[str]:
    rc = recall(entries, results)
    share = f"{100.0 * rc['hits'] / rc['counted']:.0f}%" if rc["counted"] else "n/a"
    lines = [f"Recall: **{rc['hits']} of {rc['counted']}** workloads ({share}) measured their largest gain from a "
             "fix of the profile's top-ranked finding."]
    if rc["rows"]:
        lines += ["", "| workload | top finding | its fixes | best measured fix (gain %) | hit |", "|---|---|---|---|---|"]
        for x in rc["rows"]:
            lines.append(f"| {x['workload']} | {x['top_finding'] or '—'} | {', '.join(x['top_fixes']) or '—'} "
                         f"| {', '.join(x['best'])} ({fmt(x['best_gain'])}) | {'yes' if x['hit'] else 'no'} |")
    if rc["excluded"]:
        lines += ["", "Not counted: " + "; ".join(f"{n} ({why})" for n, why in rc["excluded"]) + "."]
    return lines


def _claim_lines(entries: list[Entry], results: dict[str, Result]) -> list[str]:
    fc = false_claims(entries, results)
    lines = [f"False claims: **{len(fc['claims'])} of {fc['tested']}** warning/critical findings whose fix was "
             f"measured gained less than {FALSE_CLAIM_PCT:.0f}%."]
    if fc["claims"]:
        lines += ["", "| workload | finding | severity | recoverable % | fix(es) | best measured % |", "|---|---|---|---|---|---|"]
        for c in fc["claims"]:
            lines.append(f"| {c['workload']} | {c['finding']} | {c['severity']} | {fmt(c['recoverable_pct'])} "
                         f"| {', '.join(c['fixes'])} | {fmt(c['measured'])} |")
    if fc["untested"]:
        lines += ["", "Warning/critical findings not tested: " + "; ".join(
            f"{n}/{fid} ({why})" for n, fid, why in fc["untested"]) + "."]
    return lines


def half_section(half: str, entries: list[Entry], results: dict[str, Result]) -> list[str]:
    mine = [e for e in entries if e.half == half]
    rows = [row for e in mine for row in pair_rows(e, results.get(e.name) or Result())]
    have = sum(1 for e in mine if (results.get(e.name) or Result()).trial is not None)
    return [f"## {half.capitalize()} half: {have} of {len(mine)} workloads measured, {len(rows)} workload×fix pairs",
            "", "### Workloads", "", *_workload_table(mine, results),
            "", "### Fixes: predicted against measured", "", *_pair_table(rows),
            "", "### Prediction error per finding", "", *_error_table(rows),
            "", "### Ranking", "", *_recall_lines(mine, results),
            "", "### False claims", "", *_claim_lines(mine, results), ""]


def render_markdown(out: Path, entries: list[Entry], results: dict[str, Result]) -> str:
    measured = sum(1 for e in entries if (results.get(e.name) or Result()).trial is not None)
    head = ["# perfstack try: validation matrix", "",
            f"Results read from `{out}`: {measured} of {len(entries)} workloads measured, "
            f"{pair_count(entries)} workload×fix pairs in the manifest (benchmarks/fix_matrix.py). "
            f"Halves are fixed by rule: {HALF_RULE}.", "",
            "Predicted % is what `perfstack try` attributes to the fix from the profile's findings; measured gain is "
            "the step-time gain over the baseline arm with its confidence interval. Recall counts a workload when the "
            "fix that measured the largest working gain addresses the profile's top-ranked finding; a false claim is "
            f"a warning or critical finding whose fix measured under {FALSE_CLAIM_PCT:.0f}%.", ""]
    body = half_section("tune", entries, results) + half_section("holdout", entries, results)
    missing = [(e.name, status(results.get(e.name) or Result())) for e in entries
               if status(results.get(e.name) or Result()) != "ok"]
    tail_lines = ["## Not measured", ""] + ([f"- {n}: {st}" for n, st in missing] if missing else ["None."])
    return "\n".join(head + body + tail_lines) + "\n"


def cmd_table(args: argparse.Namespace) -> int:
    out = Path(args.out)
    md = render_markdown(out, MANIFEST, load_results(out))
    if args.md:
        Path(args.md).parent.mkdir(parents=True, exist_ok=True)
        Path(args.md).write_text(md, encoding="utf-8")
        print(f"wrote {args.md}")
    else:
        sys.stdout.write(md)
    return 0


def rescore(results: dict[str, Result], library: Path,
            profile: Optional[Callable[[list[Path], Optional[float]], dict[str, Any]]] = None) -> dict[str, Result]:
    """The results with every prediction as this perfstack makes it, so that a change to the models shows in the
    table without a GPU: a measured workload whose traces ``library`` keeps (its measured.json names them, with
    the step measured without the profiler) is profiled again from them; the others keep their stored profile,
    read with the current fixes' declarations. The trials' stored predictions (made when they ran) are dropped."""
    doc = json.loads((library / "measured.json").read_text(encoding="utf-8"))
    kept = {r["workload"]: r for r in doc.get("runs") or [] if isinstance(r, dict) and r.get("traces")}
    profile = profile or _profile_traces
    out = {}
    for name, r in results.items():
        prof = r.profile
        if name in kept and r.trial is not None:
            k = kept[name]
            prof = profile([library / t for t in k["traces"]], _num(k.get("unprofiled_step_ms")))
        trial = r.trial
        if trial is not None:
            section = dict(trial.get("try") or {})
            section["arms"] = [{k: v for k, v in a.items() if k not in ("predicted_pct", "predicted_by")}
                               if isinstance(a, dict) else a for a in section.get("arms") or []]
            trial = {**trial, "try": section}
        out[name] = dataclasses.replace(r, profile=prof, trial=trial)
    return out


def _profile_traces(paths: list[Path], step_ms: Optional[float]) -> dict[str, Any]:
    from perfstack.profile.summary import profile_run
    return json.loads(profile_run(paths, unprofiled_step_ms=step_ms).to_json())


GENERATED = "Results read from "  # where the generated part of a Markdown file starts (the text above it is kept)


def write_markdown(path: Path, md: str) -> None:
    """Write the generated Markdown to ``path``, keeping what the file has above the generated part."""
    head = ""
    if path.exists():
        old = path.read_text(encoding="utf-8")
        if GENERATED in old:
            head = old[:old.index(GENERATED)]
            md = md[md.index(GENERATED):]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head + md, encoding="utf-8")


def cmd_score(args: argparse.Namespace) -> int:
    out = Path(args.out)
    results = rescore(load_results(out), Path(args.library))
    md = render_markdown(out, MANIFEST, results)
    if args.md:
        write_markdown(Path(args.md), md)
        print(f"wrote {args.md}")
    else:
        sys.stdout.write(md)
    return 0


def cmd_manifest(args: argparse.Namespace) -> int:
    for e in MANIFEST:
        env = " ".join(f"{k}={v}" for k, v in e.env)
        print(f"{e.name:18} {e.half:8} {e.family:16} nproc={e.nproc} {','.join(e.fixes)}"
              f"{'  [' + env + ']' if env else ''}  {' '.join([e.script, *e.args])}")
    print(f"{len(MANIFEST)} workloads, {len({e.script for e in MANIFEST})} scripts, {pair_count()} pairs "
          f"(tune {pair_count([e for e in MANIFEST if e.half == 'tune'])}, "
          f"holdout {pair_count([e for e in MANIFEST if e.half == 'holdout'])})")
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("run", help="profile and try every workload into DIR (resumable)")
    r.add_argument("--out", required=True, metavar="DIR")
    r.add_argument("--gpus", type=int, default=0, help="GPUs to use (default: all that nvidia-smi lists)")
    r.add_argument("--deadline-s", type=float, default=0, help="start nothing new once this is near (seconds from now)")
    r.add_argument("--margin-s", type=float, default=600, help="how near is near: no start within this of the deadline")
    r.add_argument("--only", metavar="NAME,...", help="these workloads only")
    r.add_argument("--first-gpu", type=int, default=0, help="use GPUs first-gpu .. first-gpu+gpus-1")
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--profile-steps", type=int, default=3, help="steps in each profiled window")
    r.add_argument("--steps", type=int, default=15)
    r.add_argument("--warmup", type=int, default=5)
    r.add_argument("--no-combine", action="store_true", help="do not try the fixes that worked together")
    r.add_argument("--timeout-s", type=float, default=3600, help="per perfstack command")
    r.add_argument("--profile-window-s", type=int, default=10,
                   help="profile window for step-marked inference scripts, if profile cannot step them (seconds "
                        "from the script's import of torch: start-up plus a few seconds of decoding; longer windows "
                        "of per-token decoding make very large traces)")
    r.add_argument("--script-args", default="", metavar="ARGS",
                   help="appended to every workload's arguments, e.g. --script-args=--small for a CPU smoke run")
    r.set_defaults(func=cmd_run)
    t = sub.add_parser("table", help="the Markdown comparison of predicted and measured gains")
    t.add_argument("--out", required=True, metavar="DIR")
    t.add_argument("--md", metavar="FILE", help="write here instead of standard output")
    t.set_defaults(func=cmd_table)
    sc = sub.add_parser("score", help="the table with the predictions of this perfstack: kept traces profiled "
                                      "again, stored profiles read with the current fix declarations")
    sc.add_argument("--out", required=True, metavar="DIR")
    sc.add_argument("--library", default=str(ROOT / "tests" / "fixtures" / "traces" / "validation" / "h200-holdout"),
                    metavar="DIR", help="traces kept of the same workloads, with measured.json (default: the H200 "
                                        "hold-out library)")
    sc.add_argument("--md", metavar="FILE", help="write here (above the generated part, the file's text is kept)")
    sc.set_defaults(func=cmd_score)
    m = sub.add_parser("manifest", help="list the workloads, their fixes and halves")
    m.set_defaults(func=cmd_manifest)
    args = p.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
