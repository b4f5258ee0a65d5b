"""Run a user's script unmodified with torch.profiler attached; the child side of capture.run.

    python /path/to/_bootstrap.py CONFIG_JSON

CONFIG_JSON: {"script" | "module": target, "args": [...], "out_dir", "status", "steps",
"skip_first", "window", "stop_after_window", "name"}.

Run by file path, not with -m, so that the child imports nothing of perfstack (whose package may
pull in rich and the analysis) and nothing but the standard library before the script starts.
torch is not imported here: a finder waits for the script's own ``import torch`` (so environment
the script sets before importing torch still takes effect), then registers a global optimizer
step post-hook. Step boundaries are the steps of the first optimizer that steps (a second
optimizer, as in a GAN, does not double-count). The profiler starts after ``skip_first`` steps,
warms up one step, records ``steps`` steps and stops; the script runs on to its end unless
``stop_after_window`` is set, in which case it ends (exit 0) right after the trace is written.

With ``window`` (seconds) instead: one span of that many seconds from the script's import of
torch, ended by SIGALRM on the main thread (so a script using SIGALRM itself cannot use it).

The result goes to the status file as JSON: steps seen, traces written, whether torch was
imported. Only the standard library is used at module level.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import runpy
import signal
import sys
from typing import Any


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
        self.cuda: bool | None = None
        self.recorded_steps = 0
        self.error: str | None = None
        self.open_step: str | None = None  # the ProfilerStep label to leave out of a cut-short trace

    def write(self) -> None:
        data = {"steps": self.steps, "torch": self.torch, "traces": self.traces, "cuda": self.cuda,
                "recorded_steps": self.recorded_steps, "done": self.done, "error": self.error}
        tmp = self.cfg["status"] + ".tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(data, f)
            os.replace(tmp, self.cfg["status"])
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
    import warnings
    with warnings.catch_warnings():  # "Profiler clears events at the end of each cycle": one cycle here
        warnings.filterwarnings("ignore", message=".*clears events at the end of each cycle")
        return profile(activities=acts, record_shapes=True, schedule=schedule, on_trace_ready=_on_trace_ready)


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
    S.steps += 1
    if S.done or S.cfg["window"] is not None:
        return
    if S.prof is None:
        if S.steps == S.cfg["skip_first"]:
            import torch
            base = _step_schedule(torch)
            k = S.steps
            S.prof = _new_profiler(torch, lambda n: base(max(n - k, 0)))
            S.prof.step_num = k  # label the steps ProfilerStep#k.. as a profiler started at import would
            S.prof.start()  # the next step is the warm-up
        return
    S.prof.step()
    if S.steps > S.cfg["skip_first"] + 1:
        S.recorded_steps += 1
    if S.done:  # on_trace_ready ran inside step(): the window is complete
        _finish()
        if S.cfg["stop_after_window"]:
            raise WindowDone(0)


def _on_alarm(signum: int, frame: Any) -> None:
    _finish()


def _on_torch(torch: Any) -> None:
    S.torch = True
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


def _print_user_traceback(e: BaseException) -> None:
    """The traceback Python would print for the script, without this module's and runpy's frames."""
    import traceback
    tb = e.__traceback__
    ours = (os.path.abspath(__file__), os.path.abspath(runpy.__file__))
    while tb is not None and (os.path.abspath(tb.tb_frame.f_code.co_filename) in ours
                              or tb.tb_frame.f_code.co_filename.startswith("<frozen")):
        tb = tb.tb_next
    traceback.print_exception(type(e), e, tb)


def main() -> int:
    global S
    cfg = json.loads(sys.argv[1])
    S = _State(cfg)
    S.write()
    if "torch" in sys.modules:  # imported by a .pth file or sitecustomize before we ran
        _on_torch(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchFinder())
    code = 0
    try:
        if "module" in cfg:
            sys.argv = [cfg["module"], *cfg["args"]]
            sys.path[0] = os.getcwd()
            runpy.run_module(cfg["module"], run_name="__main__", alter_sys=True)
        else:
            script = cfg["script"]
            sys.argv = [script, *cfg["args"]]
            sys.path[0] = os.path.dirname(os.path.abspath(script))  # what 'python script.py' does
            runpy.run_path(script, run_name="__main__")
    except WindowDone:
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException as e:
        _print_user_traceback(e)
        code = 130 if isinstance(e, KeyboardInterrupt) else 1
    finally:
        if S.cfg["window"] is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
        _finish()
        S.write()
    return code


if __name__ == "__main__":
    sys.exit(main())
