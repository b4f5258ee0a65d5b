"""Run a user's script unmodified with torch.profiler attached; the child side of capture.run.

    python /path/to/_bootstrap.py CONFIG_JSON

CONFIG_JSON: {"script" | "module": target, "args": [...], "out_dir", "status", "steps",
"skip_first" (an int, or null for the default plan), "window", "stop_after_window", "name",
"timed_steps", "timed_budget_s"}.

Run by file path, not with -m, so that the child imports nothing of perfstack (whose package may
pull in rich and the analysis) and nothing but the standard library before the script starts.
torch is not imported here: a finder waits for the script's own ``import torch`` (so environment
the script sets before importing torch still takes effect), then registers a global optimizer
step post-hook. Step boundaries are the steps of the first optimizer that steps (a second
optimizer, as in a GAN, does not double-count), or the calls of ``perfstack.step()`` in a loop that
no optimizer steps, whichever kind comes first. The profiler starts after ``skip_first`` steps,
warms up one step, records ``steps`` steps and stops; the script runs on to its end unless
``stop_after_window`` is set, in which case it ends (exit 0) once the steps timed after the
window (below) are done.

The profiler slows the CPU side of a step, so the step time is also measured without it (see
StepClock): over up to ``timed_steps`` steps just before the profiler starts and as many right
after it detaches. ``skip_first`` null (the default) lets 2 warm-up steps pass untimed, times up
to ``timed_steps`` steps (fewer once they have taken ``timed_budget_s``), then starts the profiler;
an explicit ``skip_first`` N times the last of those N steps instead (never the first, which holds
the script's start-up).

With ``window`` (seconds) instead: one span of that many seconds from the script's import of
torch, ended by SIGALRM on the main thread (so a script using SIGALRM itself cannot use it).

The result goes to the status file as JSON: steps seen, traces written, whether torch was
imported, the steps skipped, the unprofiled timing. Only the standard library is used at module
level. StepClock and export are shared with the Python API (perfstack.profile).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import json
import os
import signal
import sys
import threading
import time
from typing import Any, Iterator

WARMUP_STEPS = 2  # left untimed at the start: first-step compilation, allocator growth, autotuning, lazy state
TIMED_STEPS = 5  # steps timed without the profiler, before and after the profiled window
TIMED_BUDGET_S = 5.0  # ...fewer once a window has taken this long (at least one step)


def _sync(torch: Any) -> None:
    """Wait for the GPU where CUDA is in use; never initialize CUDA for a CPU-only script."""
    try:
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
    except Exception:
        pass


class _Window:
    """The wall time of consecutive steps. Its start synchronizes, then reads ``perf_counter``;
    ``mark()`` at each step boundary reads ``perf_counter`` (and, with ``events``, records a CUDA
    event: the wall time of a window whose end is not synchronized is the later of the CPU's and
    the GPU's); ``end()`` synchronizes and reads the clock, which gives the exact wall time."""

    def __init__(self, torch: Any, events: bool = False) -> None:
        self.torch = torch
        self.n = 0
        self.ended = False
        self.wall: float | None = None  # seconds over n steps, once known
        _sync(torch)
        self.t0 = self.t = time.perf_counter()
        self.events = events and self._cuda()
        self.e0 = self._event() if self.events else None
        self.e: Any = None

    def _cuda(self) -> bool:
        try:
            return bool(self.torch.cuda.is_initialized())
        except Exception:
            return False

    def _event(self) -> Any:
        try:
            e = self.torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        except Exception:
            self.events = False
            return None

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def mark(self) -> None:
        self.n += 1
        self.t = time.perf_counter()
        self.e = self._event() if self.events else None

    def end(self) -> None:
        _sync(self.torch)
        self.t = time.perf_counter()
        self.e, self.ended = None, True
        self.wall = self.t - self.t0

    def settle(self) -> None:
        """Fix the wall time of the steps marked so far (waits for the last event: call it only
        where a wait changes nothing, e.g. once the profiler has stopped or the script has ended)."""
        if self.wall is not None or self.n == 0:
            return
        wall = self.t - self.t0
        if self.e is not None and self.e0 is not None:
            try:
                self.e.synchronize()
                wall = max(wall, self.e0.elapsed_time(self.e) / 1e3)
            except Exception:
                pass
        self.wall = wall

    def ms(self) -> float | None:
        return None if self.wall is None or self.n == 0 else round(self.wall * 1e3 / self.n, 4)


class StepClock:
    """When the profiler starts, and the step time measured without it around the profiled window.

    Call ``before(k)`` at the end of each step k (1-based) until it returns True (start the
    profiler then: k steps were skipped); ``profiled_begin()`` at the end of the profiler's
    warm-up step and ``profiled_mark()`` at the end of each recorded step, both before the
    profiler's ``step()``; ``after_begin()`` once the profiler has stopped (False: nothing to time)
    and ``after()`` at the end of each later step until it returns True; ``finish()`` at the end.
    ``result()`` is the ``unprofiled`` dict, or None when no unprofiled step was timed.

    Windows start and end with a synchronize (where CUDA is in use) around ``perf_counter``; the
    profiled window ends with CUDA events instead, so that no synchronize lands in the trace."""

    def __init__(self, torch: Any, skip_first: int | None, timed_steps: int = TIMED_STEPS,
                 budget_s: float = TIMED_BUDGET_S) -> None:
        self.torch = torch
        self.skip_first = skip_first
        self.timed_steps = max(0, int(timed_steps))
        self.budget_s = budget_s
        self.started_at: int | None = 0 if skip_first == 0 else None  # steps skipped before the profiler
        self.timed_from: int | None = None  # the before window starts at the end of this step
        if self.timed_steps:
            if skip_first is None:
                self.timed_from = WARMUP_STEPS
            else:
                first = max(skip_first - self.timed_steps, min(WARMUP_STEPS, skip_first - 1))
                self.timed_from = first if first >= 1 else None
        self._before: _Window | None = None
        self._profiled: _Window | None = None
        self._after: _Window | None = None

    def before(self, k: int) -> bool:
        w = self._before
        if w is not None:
            w.mark()
        elif k == self.timed_from:
            self._before = _Window(self.torch)
        if self.skip_first is not None:
            start = k >= self.skip_first
        elif w is not None:
            start = w.n >= self.timed_steps or w.elapsed() >= self.budget_s
        else:
            start = self.timed_from is None and k >= WARMUP_STEPS
        if start:
            if w is not None:
                w.end()
            self.started_at = k
        return start

    def profiled_begin(self) -> None:
        self._profiled = _Window(self.torch, events=True)

    def profiled_mark(self) -> None:
        if self._profiled is not None:
            self._profiled.mark()

    def after_begin(self) -> bool:
        if self._profiled is not None:
            self._profiled.settle()
        if not self.timed_steps:
            return False
        self._after = _Window(self.torch, events=True)
        return True

    def after(self) -> bool:
        w = self._after
        if w is None or w.ended:
            return True
        w.mark()
        if w.n >= self.timed_steps or w.elapsed() >= self.budget_s:
            w.end()
            return True
        return False

    def finish(self) -> None:
        """The script (or the block) has ended: keep what the windows cut short have."""
        for w in (self._before, self._profiled, self._after):
            if w is not None:
                w.settle()

    def result(self) -> dict[str, Any] | None:
        before = self._before.ms() if self._before else None
        after = self._after.ms() if self._after else None
        measured = [m for m in (before, after) if m is not None]
        if not measured:
            return None
        return {"before_ms": before, "after_ms": after,
                "before_steps": self._before.n if self._before and before is not None else 0,
                "after_steps": self._after.n if self._after and after is not None else 0,
                "step_ms": min(measured),
                "profiled_ms": self._profiled.ms() if self._profiled else None}


class WindowDone(SystemExit):
    """Raised from the optimizer hook to end the script once the window is recorded."""


class _State:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.steps = 0
        self.torch = False
        self.traces: list[str] = []
        self.prof: Any = None
        self.done = False  # the window has been recorded (or abandoned)
        self.optimizer: Any = None  # weakref to the optimizer whose steps are the boundaries
        self.source: str | None = None  # "optimizer" or "marker": whichever kind of boundary came first
        self.cuda: bool | None = None
        self.recorded_steps = 0
        self.error: str | None = None
        self.open_step: str | None = None  # the ProfilerStep label to leave out of a cut-short trace
        self.clock: StepClock | None = None
        self.timing_after = False  # the profiler has detached; the steps after it are being timed

    def write(self) -> None:
        data = {"steps": self.steps, "torch": self.torch, "traces": self.traces, "cuda": self.cuda,
                "recorded_steps": self.recorded_steps, "done": self.done, "error": self.error,
                "skip_first": self.clock.started_at if self.clock else None,
                "unprofiled": self.clock.result() if self.clock else None}
        path = self.cfg["status"]
        if int(self.cfg.get("nproc") or 1) > 1:  # each rank of a multi-process job writes its own
            path += "." + os.environ.get("RANK", "0")
        tmp = path + ".tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(data, f)
            os.replace(tmp, path)
        except OSError:
            pass


S: _State


def _trace_path() -> str:
    out, name = S.cfg["out_dir"], S.cfg["name"]
    rank = os.environ.get("RANK")
    base = os.path.join(out, f"{name}{'.rank' + rank if rank else ''}")
    path, n = base + ".pt.trace.json.gz", 1
    while os.path.exists(path):
        path, n = f"{base}.{n}.pt.trace.json.gz", n + 1
    return path


def _on_trace_ready(prof: Any) -> None:
    S.done = True
    if S.open_step is not None and S.recorded_steps == 0:
        return  # the script ended during the warm-up: nothing worth a trace
    path = _trace_path()
    export(prof, path, S.open_step)
    S.traces.append(path)
    S.write()


def export(prof: Any, path: str, drop_step: str | None = None) -> None:
    """Write the gzipped Chrome trace; without the ProfilerStep ``drop_step`` when given: a window
    cut short by the end of the script leaves its last step open, holding only the script's tail
    (evaluation, checkpointing), which is no training step. Shared with the Python API."""
    if drop_step is None:
        prof.export_chrome_trace(path)
        return
    import gzip
    tmp = path[: -len(".gz")] if path.endswith(".gz") else path + ".json"
    prof.export_chrome_trace(tmp)
    try:
        with open(tmp, encoding="utf-8") as f:
            doc = json.load(f)
        doc["traceEvents"] = [e for e in doc.get("traceEvents", []) if e.get("name") != drop_step]
        with gzip.open(path, "wt", encoding="utf-8") as f:
            json.dump(doc, f)
    finally:
        os.unlink(tmp)


def _new_profiler(torch: Any, schedule: Any) -> Any:
    from torch.profiler import ProfilerActivity, profile
    S.cuda = bool(torch.cuda.is_available())
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if S.cuda else [])
    with quiet_profiler():
        # profile_memory: the allocator's [memory] events give the peak the window reserved, which the
        # recompute check needs to say how many checkpointed regions the free memory could keep
        return profile(activities=acts, record_shapes=True, profile_memory=S.cuda, schedule=schedule,
                       on_trace_ready=_on_trace_ready)


@contextlib.contextmanager
def quiet_profiler() -> Iterator[None]:
    """Silence "Profiler clears events at the end of each cycle" (one cycle here), which torch
    emits when the profiler is built or, in some versions, when it starts its warm-up."""
    import warnings
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*clears events at the end of each cycle")
        yield


@contextlib.contextmanager
def _ctrl_c_held(deliver: bool = True) -> Iterator[list[int]]:
    """A Ctrl-C that comes during the block waits for its end (a trace cut off half-written is lost
    work), then is delivered as if it came then (``deliver``: to the script's own handler, or as
    KeyboardInterrupt), or only noted in the list the block was given. Nothing is held off the main
    thread, where Python delivers no signal, nor where the handler was not set from Python."""
    got: list[int] = []
    old = signal.getsignal(signal.SIGINT)
    if old is None or threading.current_thread() is not threading.main_thread():
        yield got
        return
    signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        yield got
    finally:
        signal.signal(signal.SIGINT, old)
    if got and deliver:
        signal.raise_signal(signal.SIGINT)


def _step_schedule(torch: Any) -> Any:
    return torch.profiler.schedule(wait=0, warmup=1, active=S.cfg["steps"], repeat=1)


def _finish() -> None:
    """Stop the profiler (saving what was recorded if it was recording) and drop it."""
    prof, S.prof = S.prof, None
    if prof is not None:
        if S.cfg["window"] is None and not S.done:  # cut short: the step now open is incomplete
            S.open_step = f"ProfilerStep#{prof.step_num}"
        try:
            prof.stop()
        except Exception as e:  # keep the script's own outcome; say why the trace is missing
            S.error = f"stopping the profiler failed: {type(e).__name__}: {e}"
    S.done = True


def _post_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
    import weakref
    if S.optimizer is None:
        S.optimizer = weakref.ref(optimizer)
    elif S.optimizer() is not optimizer:
        return
    _boundary("optimizer")


def _marker() -> None:
    """``perfstack.step()``: the step boundary of a loop that no optimizer steps (inference)."""
    _boundary("marker")


def _boundary(source: str) -> None:
    if S.source is None:
        S.source = source
    elif source != S.source:
        return  # one kind of boundary per run: a script may step an optimizer and call perfstack.step()
    S.steps += 1
    if S.cfg["window"] is not None:
        if S.done and S.cfg["stop_after_window"]:
            raise WindowDone(0)  # the timed window is recorded: end at the next step boundary
        return
    if S.clock is None:
        return
    clock = S.clock
    if S.timing_after:
        if clock.after():
            S.timing_after = False
            S.write()
            if S.cfg["stop_after_window"]:
                raise WindowDone(0)
        return
    if S.done:
        return
    if S.prof is None:
        if clock.before(S.steps):
            import torch
            base = _step_schedule(torch)
            k = S.steps
            S.prof = _new_profiler(torch, lambda n: base(max(n - k, 0)))
            S.prof.step_num = k  # label the steps ProfilerStep#k.. as a profiler started at import would
            with quiet_profiler():
                S.prof.start()  # the next step is the warm-up
        return
    if S.steps == (clock.started_at or 0) + 1:
        clock.profiled_begin()  # the warm-up step ends: the recorded steps start
    else:
        clock.profiled_mark()
        S.recorded_steps += 1
    with _ctrl_c_held():  # the trace is written inside step(): a Ctrl-C waits until it is whole and known
        S.prof.step()
        if S.done:  # on_trace_ready ran inside step(): the window is complete
            _finish()
            S.timing_after = clock.after_begin()
            S.write()
    if S.done and S.cfg["stop_after_window"] and not S.timing_after:
        raise WindowDone(0)


def _on_alarm(signum: int, frame: Any) -> None:
    with _ctrl_c_held():  # the window's trace is written here
        _finish()


def _on_torch(torch: Any) -> None:
    S.torch = True
    if S.cfg["window"] is None:
        S.clock = StepClock(torch, S.cfg["skip_first"], S.cfg.get("timed_steps", TIMED_STEPS),
                            S.cfg.get("timed_budget_s", TIMED_BUDGET_S))
    from torch.optim.optimizer import register_optimizer_step_post_hook
    register_optimizer_step_post_hook(_post_hook)
    if S.cfg["window"] is not None:
        from torch.profiler import ProfilerAction
        S.prof = _new_profiler(torch, lambda n: ProfilerAction.RECORD_AND_SAVE if n == 0 else ProfilerAction.NONE)
        S.prof.start()
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, float(S.cfg["window"]))
    elif S.cfg["skip_first"] == 0:  # the first step starts now: it is the warm-up
        S.prof = _new_profiler(torch, _step_schedule(torch))
        with quiet_profiler():
            S.prof.start()


class _TorchFinder(importlib.abc.MetaPathFinder):
    """Calls _on_torch right after the script's first ``import torch`` has finished."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_then_hook(module: Any) -> None:
            exec_module(module)
            _on_torch(module)

        loader.exec_module = exec_then_hook  # type: ignore[method-assign]
        return spec


def _child() -> Any:
    """perfstack/_child.py, loaded by path (see the module doc)."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_child.py")
    spec = importlib.util.spec_from_file_location("_perfstack_child", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _markers() -> None:
    """``perfstack.step()`` looks this module up (it does nothing where it is absent)."""
    import types
    hooks = types.ModuleType("_perfstack_hooks")
    hooks.step = _marker  # type: ignore[attr-defined]
    hooks.report_loss = lambda value: None  # type: ignore[attr-defined]
    sys.modules["_perfstack_hooks"] = hooks


def main() -> int:
    global S
    cfg = json.loads(sys.argv[1])
    S = _State(cfg)
    S.write()
    _markers()
    if "torch" in sys.modules:  # imported by a .pth file or sitecustomize before we ran
        _on_torch(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchFinder())
    child = _child()
    code: int  # _child.run's exit code (the module is loaded by path, so untyped here)
    try:
        code, _ = child.run(cfg, WindowDone, (__file__,))
    finally:
        # a window cut short is written here: a Ctrl-C (a second one, or one sent to the whole process
        # group and passed on again by perfstack) waits until it and the status are, then ends with 130
        with _ctrl_c_held(deliver=False) as ctrl_c:
            if S.cfg["window"] is not None:
                signal.setitimer(signal.ITIMER_REAL, 0)
            _finish()
            if S.clock is not None:
                S.clock.finish()
            S.write()
    return 130 if ctrl_c else code


if __name__ == "__main__":
    sys.exit(main())
