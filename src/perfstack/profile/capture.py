"""Run a user's training script unmodified under torch.profiler, with GPU telemetry sampled alongside.

``run(["python", "train.py", "--lr", "3e-4"], Path("out"))`` starts ``sys.executable`` on
_bootstrap.py, which runs the script with runpy as ``__main__`` (sys.argv and sys.path[0] as
``python train.py`` would set them). Step boundaries are the steps of the script's optimizer (a
global ``register_optimizer_step_post_hook``): the profiler skips ``skip_first`` steps, warms up
one, records ``steps``, writes ``<script>.pt.trace.json.gz`` into ``out_dir``, and detaches. The
script then runs to its end (``stop_after_window=True`` ends it with exit 0 once the steps timed
after the window are done; a Ctrl-C while or after the trace is written also keeps the trace: the
script finishes writing it before its KeyboardInterrupt). A Ctrl-C never leaves the script running
unwatched, nor perfstack's own temporary files behind (see interrupt.ctrl_c_held).

The profiler slows the CPU side of every step, so the step time is also measured without it:
``timed_steps`` (5) steps just before the profiler starts and as many just after it detaches,
each window fewer once it has taken ``timed_budget_s`` (5 s), never fewer than one step. A window
synchronizes the GPU at its start and end only (``torch.cuda.synchronize()`` where the script uses
CUDA, around ``time.perf_counter()``); its step time is its wall time over its steps. The default
``skip_first=None`` lets 2 warm-up steps pass untimed, times the next ones, then starts the profiler
(so the profiler starts after 7 steps when steps are fast, after 3 when they are slow); an explicit
``skip_first`` N times the last steps of those N (from the 3rd where N allows). The profiled
steps are timed the same way (``profiled_ms``: from a synchronize at the end of the profiler's
warm-up step to when the CPU and the GPU have both finished the last recorded step, read from a
CUDA event so that no synchronize lands in the trace). ``CaptureResult.unprofiled`` holds the
figures (see UNPROFILED_KEYS), or None when no unprofiled step could be timed (the script ended
first); a window cut short by the end of the script keeps the steps it had. A script that never calls
an optimizer's ``step()`` (inference, a custom update) has no step boundaries: pass ``window``
(seconds) to record one span of that length from the script's ``import torch``, or use the Python
API (``perfstack.profile``) and call ``p.step()`` yourself. Steps are never invented from a timer.

While the child runs, the parent samples NVML telemetry (clocks, power, temperature, throttle
reasons, utilization) every 100 ms for the GPUs the child can see, from the start until the trace
is written (a long run after the window does not grow it). ``nproc`` > 1 starts the script on that
many local ranks through torch's own launcher (as ``torchrun --standalone`` would): each rank writes
its own trace and status, the steps seen are the fewest any rank saw, and the step time without the
profiler is the slowest rank's (the job waits for it). Other launchers given as the command
(torchrun, accelerate, deepspeed, mpirun) are refused: ``nproc`` says what they would.
"""

from __future__ import annotations

import codecs
import collections
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from perfstack.errors import CannotRunHere, InputError, UsageError
from perfstack.profile._bootstrap import TIMED_BUDGET_S, TIMED_STEPS, WARMUP_STEPS
from perfstack.profile.interrupt import CtrlC, ctrl_c_held
from perfstack.profile.sampler import INTERVAL_S, TelemetrySampler

BOOTSTRAP = Path(__file__).with_name("_bootstrap.py")
LAUNCHERS = ("torchrun", "accelerate", "deepspeed", "mpirun", "mpiexec", "srun", "horovodrun", "colossalai")
LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch", "accelerate.commands.launch",
                    "deepspeed.launcher.runner")
_PY = re.compile(r"^python(\d+(\.\d+)*)?[a-z]?(\.exe)?$")
_OPT_WITH_VALUE = ("-W", "-X")
# CaptureResult.unprofiled / Profile.unprofiled: milliseconds per step of the window before the
# profiler and the one after it (None where absent) and their step counts (0 where absent);
# step_ms = the faster window's, the figure to correct the profiled step with; profiled_ms = the
# profiled steps timed the same way
UNPROFILED_KEYS = ("before_ms", "after_ms", "before_steps", "after_steps", "step_ms", "profiled_ms")


@dataclass(frozen=True)
class Plan:
    """Which steps a capture records, and how it times steps without the profiler (see the module doc)."""

    steps: int = 3  # recorded
    window: int | None = None  # seconds to record instead, for a script without optimizer steps
    skip_first: int | None = None  # steps let pass first (None: warm-up, then the steps timed before)
    stop_after_window: bool = False  # end the script once the window and the timing after it are done
    timed_steps: int = TIMED_STEPS  # timed without the profiler, before and after the window
    timed_budget_s: float = TIMED_BUDGET_S  # at most this long timing each side


@dataclass
class CaptureResult:
    trace_paths: list[Path]
    telemetry: list[dict[str, Any]]
    returncode: int
    steps_seen: int
    stderr_tail: str
    interrupted: bool = False  # Ctrl-C ended the script after the trace was written
    unprofiled: dict[str, Any] | None = None  # step time without the profiler (UNPROFILED_KEYS), or None


def unprofiled_note(u: dict[str, Any], where: str) -> str:
    """How the unprofiled step time was measured, for the analysis to quote:
    'measured without the profiler over 5 steps before and 5 after the profiled window (capture mode)'."""
    def steps(k: int, word: bool) -> str:
        return f"{k} step{'s' if k != 1 else ''}" if word else str(k)
    parts = []
    if u.get("before_ms") is not None:
        parts.append(f"{steps(u['before_steps'], True)} before")
    if u.get("after_ms") is not None:
        parts.append(f"{steps(u['after_steps'], not parts)} after")
    both = "; the faster window is used" if len(parts) == 2 else ""
    return f"measured without the profiler over {' and '.join(parts)} the profiled window{both} ({where})"


def overhead_line(u: dict[str, Any] | None) -> str | None:
    """'profiler overhead: 7.10 ms per step profiled vs 4.25 ms without (1.67×)', or None."""
    if not u or not u.get("profiled_ms") or not u.get("step_ms"):
        return None
    p, q = u["profiled_ms"], u["step_ms"]
    return f"profiler overhead: {p:.2f} ms per step profiled vs {q:.2f} ms without ({p / q:.2f}×)"


@dataclass
class Target:
    """What to run: a script path or a module (``python -m pkg.train``), its arguments, and the
    interpreter options given before it (``-u``, ``-X dev``, ``-W error``) passed on to the child."""
    script: str | None
    module: str | None
    args: list[str]
    python_options: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        if self.module:
            return self.module.rsplit(".", 1)[-1]
        return Path(self.script or "script").stem or "script"


def _is_python(arg: str) -> bool:
    if _PY.match(os.path.basename(arg)):
        return True
    try:
        return os.path.realpath(arg) == os.path.realpath(sys.executable)
    except OSError:
        return False


def _launcher_error(what: str) -> UsageError:
    return UsageError(
        f"'{what}' starts the processes itself; perfstack profile starts them to put its profiler in each",
        hint="give the script and the number of local ranks: 'perfstack profile --nproc N -- python train.py "
             "...' (as torchrun --standalone --nproc-per-node N), or call perfstack.profile() inside the script")


def parse_argv(argv: Sequence[str]) -> Target:
    """``python train.py ARGS``, ``python3 -u train.py ARGS``, ``/venv/bin/python -m pkg.train``,
    or ``train.py ARGS`` (the script itself) → Target. Raises UsageError for anything else."""
    argv = list(argv)
    if not argv:
        raise UsageError("no command to profile", hint="perfstack profile python train.py [ARGS...]")
    first = argv[0]
    if os.path.basename(first) in LAUNCHERS:
        raise _launcher_error(os.path.basename(first))
    if not _is_python(first):
        return Target(_script(first), None, argv[1:])
    opts: list[str] = []
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == "-m" or (a.startswith("-m") and not a.startswith("--")):
            mod = a[2:] or (argv[i + 1] if i + 1 < len(argv) else "")
            rest = argv[i + 2:] if a == "-m" else argv[i + 1:]
            if not mod:
                raise UsageError("'-m' needs a module name", hint="perfstack profile python -m pkg.train [ARGS...]")
            if mod in LAUNCHER_MODULES:
                raise _launcher_error(f"python -m {mod}")
            return Target(None, mod, rest, opts)
        if a in ("-c", "-") or (a.startswith("-c") and not a.startswith("--")):
            raise UsageError(f"perfstack profile runs a script file, not 'python {a}'",
                             hint="save the code to a file: perfstack profile python train.py")
        if a == "--":
            i += 1
            break
        if not a.startswith("-"):
            break
        if a in _OPT_WITH_VALUE:
            if i + 1 >= len(argv):
                raise UsageError(f"python option {a} needs a value")
            opts += [a, argv[i + 1]]
            i += 2
            continue
        if a.startswith("--") or not (a[:2] in _OPT_WITH_VALUE or set(a[1:]) <= set("bBdEiIOPqsSuvxR")):
            raise UsageError(f"unknown python option {a!r} before the script",
                             hint="perfstack profile python [-u] [-X opt] [-W arg] train.py [ARGS...]")
        opts.append(a)
        i += 1
    if i >= len(argv):
        raise UsageError(f"'{' '.join(argv)}' names no script to run",
                         hint="perfstack profile python train.py [ARGS...]")
    return Target(_script(argv[i]), None, argv[i + 1:], opts)


def _script(path: str) -> str:
    if os.path.basename(path) in LAUNCHERS:
        raise _launcher_error(os.path.basename(path))
    if not os.path.isfile(path):
        if not path.endswith(".py") and os.sep not in path:
            raise UsageError(f"perfstack profile runs a Python script; '{path}' is not one",
                             hint="perfstack profile python train.py [ARGS...]")
        raise UsageError(f"script not found: {path}", hint="check the path (relative to the current directory)")
    if not path.endswith(".py"):
        try:
            with open(path, "rb") as f:
                head = f.readline(200)
        except OSError as e:
            raise UsageError(f"cannot read {path}: {e.strerror}") from None
        if not (head.startswith(b"#!") and b"python" in head):
            raise UsageError(f"perfstack profile runs a Python script; '{path}' does not look like one",
                             hint="perfstack profile python train.py [ARGS...]")
    return path


# -- the child's stderr: shown live, tail kept ---------------------------------------------

class Tee(threading.Thread):
    """Reads a child's output to its end, keeping only the last ``keep_bytes`` (a script that floods its
    output costs no memory or disk), and shows it live on our stderr when ``echo``."""

    def __init__(self, src: Any, keep_bytes: int = 16384, echo: bool = True) -> None:
        super().__init__(name="perfstack-stderr", daemon=True)
        self.src = src
        self.echo = echo
        self.tail: collections.deque[str] = collections.deque()
        self.size = 0
        self.keep = keep_bytes

    def run(self) -> None:
        dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        fd = self.src.fileno()
        while True:
            chunk = os.read(fd, 65536)
            text = dec.decode(chunk, final=not chunk)
            if text:
                if self.echo:
                    try:
                        sys.stderr.write(text)
                        sys.stderr.flush()
                    except Exception:
                        pass
                self.tail.append(text)
                self.size += len(text)
                while self.size > self.keep and len(self.tail) > 1:
                    self.size -= len(self.tail.popleft())
            if not chunk:
                return

    def text(self) -> str:
        return "".join(self.tail)[-self.keep:]


def _stdout_target() -> Any:
    """The child's stdout goes to our stderr: perfstack's stdout carries only its report."""
    try:
        return sys.stderr.fileno()
    except Exception:
        return 2


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "(nothing on stderr)"


# -- run -----------------------------------------------------------------------------------

def run(argv: list[str], out_dir: Path, plan: Plan = Plan(), *, nproc: int = 1, gpus: Sequence[int] | None = None,
        sample: Callable[[int], dict[str, Any]] | None = None, interval: float = INTERVAL_S,
        env: dict[str, str] | None = None,
        on_trace: Callable[[list[Path]], None] | None = None) -> CaptureResult:
    """Run ``argv`` (a Python script and its arguments) under the profiler; see the module doc.

    Raises UsageError for a command it cannot run (torchrun, ``python -c``, a missing script),
    InputError when no trace was recorded (the script crashed or ended before the window, never
    imported torch, or never stepped an optimizer and no ``window`` was given), and
    KeyboardInterrupt when Ctrl-C ended the script before a trace was written. ``on_trace`` is
    called from this thread as soon as the trace files exist (the script may still be running).
    """
    target = parse_argv(argv)
    check_plan(plan.steps, plan.skip_first, plan.timed_steps, plan.window)
    if nproc < 1:
        raise UsageError(f"--nproc must be at least 1, got {nproc}")
    out_dir = _output_dir(Path(out_dir))
    sampler = TelemetrySampler(gpus, sample, interval)
    with ctrl_c_held() as ctrl_c:  # from the status file's creation to its removal, and the script's whole run
        fd, status_path = tempfile.mkstemp(prefix="perfstack-capture-", suffix=".json")
        os.close(fd)
        statuses = [status_path] if nproc == 1 else [f"{status_path}.{r}" for r in range(nproc)]
        cfg: dict[str, Any] = {"args": target.args, "out_dir": str(out_dir.resolve()), "status": status_path,
                               "steps": plan.steps, "skip_first": plan.skip_first, "window": plan.window,
                               "stop_after_window": plan.stop_after_window, "name": target.name,
                               "timed_steps": plan.timed_steps, "timed_budget_s": plan.timed_budget_s, "nproc": nproc}
        cfg["module" if target.module else "script"] = target.module or target.script
        launch = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"] if nproc > 1 else []
        try:
            proc = _start([sys.executable, *target.python_options, *launch, str(BOOTSTRAP), json.dumps(cfg)], env, ctrl_c)
            child = _Child(proc, statuses, sampler, on_trace, ctrl_c)
            rc = child.wait()
            status = _merge_status([_read_status(p) for p in statuses])
        finally:
            for p in {status_path, *statuses}:
                try:
                    os.unlink(p)
                except OSError:
                    pass
        # the Ctrl-C is answered here: by the result (the traces kept) or by the KeyboardInterrupt below
        interrupted = ctrl_c.answer() or rc in (130, -signal.SIGINT)
    traces = [Path(p) for p in status.get("traces", []) if os.path.exists(p)]
    result = CaptureResult(traces, child.telemetry, rc, int(status.get("steps", 0)), child.tee.text(), interrupted,
                           _unprofiled(status.get("unprofiled")))
    if traces:
        if on_trace and not child.announced:
            on_trace(traces)
        return result
    if interrupted:
        raise KeyboardInterrupt
    raise _no_trace_error(result, status, target, plan)


def _start(cmd: list[str], env: dict[str, str] | None, ctrl_c: CtrlC) -> subprocess.Popen[bytes]:
    if ctrl_c.count:  # Ctrl-C before the script started: it is not started
        raise KeyboardInterrupt
    try:
        proc = subprocess.Popen(cmd, stdout=_stdout_target(), stderr=subprocess.PIPE, env=env)
    except OSError as e:
        raise UsageError(f"cannot start {sys.executable}: {e.strerror}") from None
    ctrl_c.watch(proc)
    return proc


def check_plan(steps: int, skip_first: int | None, timed_steps: int, window: int | None = None,
               names: tuple[str, str, str] = ("--steps", "--skip-first", "timed_steps")) -> None:
    """The counts of a capture, checked before anything starts; ``names`` spells them as the caller's
    user wrote them (the command's flags, or the Python API's parameters)."""
    if steps < 1:
        raise UsageError(f"{names[0]} must be at least 1, got {steps}")
    if skip_first is not None and skip_first < 0:
        raise UsageError(f"{names[1]} must be 0 or more, got {skip_first}")
    if timed_steps < 0:
        raise UsageError(f"{names[2]} must be 0 or more, got {timed_steps}")
    if window is not None and window <= 0:
        raise UsageError(f"--window must be a positive number of seconds, got {window}")


def _output_dir(out_dir: Path) -> Path:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create the output directory {out_dir}: {e.strerror}") from None
    return out_dir


class _Child:
    """The script's process until it ends: its stderr shown live with the tail kept, telemetry
    sampled until the trace is written, and ``on_trace`` called as soon as the trace files exist
    (Ctrl-C is ``ctrl_c``'s, held by the caller)."""

    def __init__(self, proc: subprocess.Popen[bytes], status_paths: list[str], sampler: TelemetrySampler,
                 on_trace: Callable[[list[Path]], None] | None, ctrl_c: CtrlC) -> None:
        self.proc = proc
        self.status_paths = status_paths
        self.sampler = sampler
        self.on_trace = on_trace
        self.ctrl_c = ctrl_c
        self.tee = Tee(proc.stderr)
        self.telemetry: list[dict[str, Any]] = []
        self.announced = False  # on_trace was called while the script ran

    def wait(self) -> int:
        """The script's exit code, once it has ended (killed if it outlives an exception here);
        ``telemetry`` and ``tee`` hold what was gathered meanwhile."""
        self.tee.start()
        try:
            self.sampler.start()
            while True:
                try:
                    return self.proc.wait(timeout=0.2)
                except subprocess.TimeoutExpired:
                    self._announce()
                except KeyboardInterrupt:  # a Ctrl-C not held (on_trace set a SIGINT handler of its own)
                    self.ctrl_c.on_sigint(signal.SIGINT, None)
        finally:
            self._end()

    def _announce(self) -> None:
        if self.announced:
            return
        status = _merge_status([_read_status(p) for p in self.status_paths])
        if status.get("done") and status.get("traces"):
            self.announced = True
            self.sampler.stop()  # the window is over: telemetry covers start-up and the window
            if self.on_trace:
                self.on_trace([Path(p) for p in status["traces"]])

    def _end(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.telemetry = self.sampler.stop()
        self.tee.join(5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


def _read_status(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            status = json.loads(f.read() or "{}")
    except (OSError, ValueError):
        return {}
    return status if isinstance(status, dict) else {}


def _merge_status(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """One status for the job from each rank's: the traces of all, the fewest steps, done when every
    rank is, and the slowest rank's unprofiled timing (a step ends when its slowest rank does)."""
    if len(ranks) == 1:
        return ranks[0]
    seen = [r for r in ranks if r]
    if not seen:
        return {}
    merged = dict(seen[0])
    merged["traces"] = [t for r in seen for t in (r.get("traces") or []) if isinstance(t, str)]
    merged["steps"] = min(int(r.get("steps") or 0) for r in seen) if len(seen) == len(ranks) else 0
    merged["done"] = len(seen) == len(ranks) and all(r.get("done") for r in seen)
    merged["torch"] = any(r.get("torch") for r in seen)
    merged["error"] = next((r["error"] for r in seen if r.get("error")), None)
    timed = [r["unprofiled"] for r in seen if isinstance(r.get("unprofiled"), dict)
             and isinstance(r["unprofiled"].get("step_ms"), (int, float))]
    merged["unprofiled"] = max(timed, key=lambda u: u["step_ms"]) if timed else None
    return merged


def _unprofiled(u: Any) -> dict[str, Any] | None:
    """The child's timing, kept only in its known shape (numbers or None under UNPROFILED_KEYS)."""
    if not isinstance(u, dict):
        return None
    out = {k: u.get(k) for k in UNPROFILED_KEYS}
    if not all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in out.values()):
        return None
    return out if isinstance(out["step_ms"], (int, float)) and out["step_ms"] > 0 else None


def _no_trace_error(r: CaptureResult, status: dict[str, Any], target: Target, plan: Plan) -> InputError | CannotRunHere:
    steps, skip_first, window, timed_steps = plan.steps, plan.skip_first, plan.window, plan.timed_steps
    ended = "finished" if r.returncode == 0 else f"exited with code {r.returncode}"
    last = _last_line(r.stderr_tail)
    why = f": {last}" if r.returncode != 0 else ""
    what = target.module or target.script
    if status.get("error"):
        return InputError(f"no trace was written for {what}: {status['error']}")
    if not status:
        return InputError(f"the script {ended} before perfstack's profiler could start{why}",
                          hint=f"run it without perfstack to check: python {what}")
    if not status.get("torch") and last.endswith("No module named 'torch'"):
        # The script is run by perfstack's own interpreter (the profiler is attached there): without torch
        # in it, no script can be profiled here, whatever the script.
        return CannotRunHere(f"torch is not installed in the Python that perfstack runs scripts with ({sys.executable})",
                             hint="install torch there, or install perfstack in the environment that has torch")
    if not status.get("torch"):
        return InputError(f"the script {ended} without importing torch{why}",
                          hint="perfstack profile runs PyTorch workloads")
    if window is not None:
        return InputError(f"the script {ended} before the profiler wrote a trace{why}")
    n = r.steps_seen
    if n == 0:
        if r.returncode != 0:
            return InputError(f"the script exited with code {r.returncode} before any optimizer step{why}",
                              hint=f"run it without perfstack to check: python {what}")
        return InputError(
            "the script finished without calling an optimizer's step(), so there are no step boundaries "
            "to profile between",
            hint="pass --window SECONDS to record a span of time instead (e.g. an inference script), or "
                 "use the Python API: 'with perfstack.profile() as p:' and call p.step() once per step")
    skip = status.get("skip_first")
    if not isinstance(skip, int):  # the profiler never started: what the plan would have skipped
        skip = skip_first if skip_first is not None else WARMUP_STEPS + timed_steps
    skipped = f"{skip} skipped" if skip_first is not None or isinstance(status.get("skip_first"), int) else \
        f"up to {skip} skipped ({WARMUP_STEPS} warm-up, then up to {timed_steps} timed without the profiler)"
    first, last_step = skip + 2, skip + 1 + steps
    return InputError(
        f"the script {ended} after {n} optimizer step{'s' if n != 1 else ''}, before the profile window "
        f"(steps {first}-{last_step}, after {skipped} and 1 warm-up) was recorded{why}",
        hint=f"lower --skip-first or --steps, or run the script for at least {last_step} steps")
