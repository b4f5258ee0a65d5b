"""Run a user's script unmodified, with some fixes applied, and time its steps; the child side of a trial.

    python /path/to/_arm.py CONFIG_JSON

CONFIG_JSON: {"script" | "module": target, "args": [...], "status": path, "fixes": [ids],
"warmup": W, "steps": N, "step_at": "module:qualname" or null, "keep": K}.

Run by file path, so that the child imports nothing of perfstack and nothing but the standard library
before the script starts (the fixes are in ``_patches.py`` beside this file, loaded by path too). torch is
not imported here: a finder waits for the script's own ``import torch``, then applies the fixes and
registers the step boundaries. No profiler is attached: this is the step time the user gets.

Steps. A step ends at each ``step()`` of the first optimizer that steps (a global post-hook), at each
``perfstack.step()`` the script calls, or at each return of the function named by ``step_at``. The first
W steps are warm-up (compilation, autotuning, allocator growth: timed apart); then N steps are timed and
the script is ended (exit 0). Each timed step's length is read from CUDA events recorded at the
boundaries (the GPU timeline, which includes the time the GPU waited for the CPU) where the script uses
CUDA, else from the CPU clock; the window starts and ends with a synchronize, so its wall time is exact.

Numerics. The first K scalar tensors the script calls ``backward()`` on (its losses), the values it
passes to ``perfstack.report_loss``, or the first K results of the ``step_at`` function are kept (as
tensors, read once the script has ended, so no synchronize is added) for the parent to compare with the
unmodified script's. Every arm, the unmodified one included, carries the same hooks.

The status file (JSON) holds the step times, the warm-up, the peak GPU memory, what each fix changed and
the values kept; with several ranks (torchrun), each rank writes ``status.RANK``.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys
import time
import types
from typing import Any, Callable

T_START = time.perf_counter()


def _load(*parts: str) -> Any:
    """A module of perfstack's, by its path below the package (never by import: see the module doc)."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), *parts)
    spec = importlib.util.spec_from_file_location("_perfstack_" + parts[-1][:-3].strip("_"), path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class StepsDone(SystemExit):
    """Raised at the last timed step's boundary: the script has run long enough."""


class Arm:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.warmup = int(cfg.get("warmup", 5))
        self.steps = int(cfg.get("steps", 20))
        self.keep = int(cfg.get("keep", 5))
        self.torch: Any = None
        self.n = 0  # boundaries seen
        self.boundary_s: list[float] = []  # perf_counter at each boundary (from process start)
        self.events: list[Any] = []  # CUDA events at the timed boundaries
        self.cpu: list[float] = []  # perf_counter at the timed boundaries
        self.window_s: float | None = None
        self.values: list[Any] = []  # losses or step results kept for the numerics guard
        self.optimizer: Any = None
        self.source: str | None = None  # what marks the steps: optimizer, marker, step_at
        self.error: str | None = None
        self.patches: Any = None

    # -- steps -------------------------------------------------------------------------------
    def boundary(self, source: str) -> None:
        if self.source is None:
            self.source = source
        elif source != self.source:
            return  # one kind of boundary per run (a script calling perfstack.step() and an optimizer)
        self.n += 1
        now = time.perf_counter()
        self.boundary_s.append(now - T_START)
        if self.patches is not None:
            self.patches.on_step(self.n)
        if self.n < self.warmup:
            return
        if self.n == self.warmup:
            self._sync()
            self.cpu = [time.perf_counter()]
            self.events = [self._event()]
            return
        self.cpu.append(now)
        self.events.append(self._event())
        if self.n >= self.warmup + self.steps:
            self._sync()
            self.window_s = time.perf_counter() - self.cpu[0]
            self.write()
            raise StepsDone(0)

    def _cuda(self) -> bool:
        try:
            return bool(self.torch is not None and self.torch.cuda.is_initialized())
        except Exception:
            return False

    def _sync(self) -> None:
        if self._cuda():
            try:
                self.torch.cuda.synchronize()
            except Exception:
                pass

    def _event(self) -> Any:
        if not self._cuda():
            return None
        try:
            e = self.torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        except Exception:
            return None

    def step_ms(self) -> list[float]:
        """Each timed step's length: between CUDA events where both ends have one, else the CPU clock."""
        out = []
        for i in range(1, len(self.cpu)):
            a, b = self.events[i - 1], self.events[i]
            ms = (self.cpu[i] - self.cpu[i - 1]) * 1e3
            if a is not None and b is not None:
                try:
                    ms = float(a.elapsed_time(b))
                except Exception:
                    pass
            out.append(round(ms, 4))
        return out

    # -- numerics ------------------------------------------------------------------------------
    def keep_value(self, v: Any) -> None:
        if len(self.values) >= self.keep:
            return
        t = self.torch
        try:
            if t is not None and isinstance(v, t.Tensor):
                v = v.detach().double().sum() if v.is_floating_point() or v.is_complex() else v.detach().sum()
                v = v.clone()
        except Exception:
            return
        self.values.append(v)

    def _values(self) -> list[float]:
        out: list[float] = []
        for v in self.values:
            try:
                out.append(float(v.item() if hasattr(v, "item") else v))
            except Exception:
                break
        return out

    # -- result ------------------------------------------------------------------------------
    def _peak_mb(self) -> float | None:
        if not self._cuda():
            return None
        try:
            return round(int(self.torch.cuda.max_memory_allocated()) / 2**20, 1)
        except Exception:
            return None

    def _device(self) -> str | None:
        if not self._cuda():
            return None
        try:
            return str(self.torch.cuda.get_device_name())
        except Exception:
            return None

    def write(self) -> None:
        data = {"torch": self.torch is not None, "steps_seen": self.n, "source": self.source,
                "step_ms": self.step_ms() if self.window_s is not None else [],
                "window_s": self.window_s, "boundary_s": [round(x, 4) for x in self.boundary_s[: self.warmup + 1]],
                "peak_mem_mb": self._peak_mb(), "values": self._values(), "error": self.error,
                "applied": self.patches.applied if self.patches is not None else {},
                "cuda": self._cuda(), "device": self._device()}
        path = self.cfg["status"] + (f".{os.environ['RANK']}" if os.environ.get("RANK") else "")
        try:
            with open(path + ".tmp", "w") as f:
                json.dump(data, f)
            os.replace(path + ".tmp", path)
        except OSError:
            pass


A: Arm


def _on_torch(torch: Any) -> None:
    A.torch = torch
    A.patches = _load("trial", "_patches.py")
    A.patches.on_import = on_import
    A.patches.install(torch, A.cfg.get("fixes", []))

    def post_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        import weakref
        if A.optimizer is None:
            A.optimizer = weakref.ref(optimizer)
        elif A.optimizer() is not optimizer:
            return
        A.boundary("optimizer")

    from torch.optim.optimizer import register_optimizer_step_post_hook
    register_optimizer_step_post_hook(post_hook)
    backward = torch.Tensor.backward

    def backward_kept(self: Any, *args: Any, **kwargs: Any) -> Any:
        if len(A.values) < A.keep and self.numel() == 1:
            A.keep_value(self)
        return backward(self, *args, **kwargs)

    torch.Tensor.backward = backward_kept


def _wrap_step_at(module: Any, qualname: str) -> None:
    owner, name = module, qualname
    parts = qualname.split(".")
    for p in parts[:-1]:
        owner = getattr(owner, p)
    name = parts[-1]
    fn = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        A.keep_value(out if not isinstance(out, (tuple, list)) or not out else out[0])
        A.boundary("step_at")
        return out

    setattr(owner, name, timed)


class _OnImport(importlib.abc.MetaPathFinder):
    """Calls ``then(module)`` right after the module ``name`` has been imported (executed)."""

    def __init__(self, name: str, then: Callable[[Any], None]) -> None:
        self.name, self.then = name, then

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then(module: Any) -> None:
            exec_module(module)
            self.then(module)

        spec.loader.exec_module = exec_then  # type: ignore[method-assign]
        return spec


def on_import(name: str, then: Callable[[Any], None]) -> None:
    if name in sys.modules:
        then(sys.modules[name])
    else:
        sys.meta_path.insert(0, _OnImport(name, then))


def _markers() -> None:
    """``perfstack.step()`` and ``perfstack.report_loss(v)`` find these (they are no-ops elsewhere)."""
    hooks = types.ModuleType("_perfstack_hooks")
    hooks.step = lambda: A.boundary("marker")  # type: ignore[attr-defined]
    hooks.report_loss = A.keep_value  # type: ignore[attr-defined]
    sys.modules["_perfstack_hooks"] = hooks


def main() -> int:
    global A
    cfg = json.loads(sys.argv[1])
    A = Arm(cfg)
    A.write()
    _markers()
    on_import("torch", _on_torch)
    if cfg.get("step_at"):
        mod, _, qual = cfg["step_at"].partition(":")
        on_import(mod, lambda m: _wrap_step_at(m, qual))
    child = _load("_child.py")
    code: int  # _child.run's exit code (the module is loaded by path, so untyped here)
    try:
        code, err = child.run(cfg, StepsDone, (__file__,))
        if err is not None:
            A.error = f"{type(err).__name__}: {err}"[:2000]
    finally:
        A.write()
    return code


if __name__ == "__main__":
    sys.exit(main())
