"""The Python API: profile a window of steps from inside your own training loop.

    import perfstack
    with perfstack.profile(steps=3, skip_first=2, out_dir="perfstack-profile") as p:
        for batch in loader:
            train_step(batch)
            p.step()
    print(p.trace_paths, p.run_path)

The same settings as ``perfstack profile python train.py``: torch.profiler with CPU (and CUDA
where available) activities and shapes, ``skip_first`` steps skipped, one warm-up step, ``steps``
recorded, then the profiler detaches while the loop runs on. NVML telemetry is sampled every
100 ms from entry until the trace is written. On exit the trace is written into ``out_dir`` (also
when the block raises: what was recorded is kept), and, where the analysis is installed, the Run
JSON next to it (``<name>.run.json``, from ``summary.profile_run``). Under torchrun each rank writes its own ``<name>.rank<N>.pt.trace.json.gz``.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

from perfstack.errors import UsageError
from perfstack.profile._bootstrap import export
from perfstack.profile.capture import INTERVAL_S, TelemetrySampler


class Profile:
    """Context manager returned by ``perfstack.profile()``; call ``step()`` once per training step.

    After the block: ``trace_paths`` (list of Path, empty when the loop ended before a step was
    recorded), ``run_path`` (Path of the Run JSON, or None when the analysis is unavailable or no
    trace was written), ``telemetry`` (the NVML samples) and ``steps_seen``."""

    def __init__(self, steps: int = 3, skip_first: int = 2, out_dir: str | os.PathLike[str] = "perfstack-profile", *,
                 name: str = "profile", telemetry: bool = True, gpus: Sequence[int] | None = None,
                 sample: Callable[[int], dict[str, Any]] | None = None, interval: float = INTERVAL_S,
                 write_run: bool = True) -> None:
        if steps < 1:
            raise UsageError(f"steps must be at least 1, got {steps}")
        if skip_first < 0:
            raise UsageError(f"skip_first must be 0 or more, got {skip_first}")
        self.steps, self.skip_first = steps, skip_first
        self.out_dir = Path(out_dir)
        self.name = name
        self.trace_paths: list[Path] = []
        self.run_path: Path | None = None
        self.telemetry: list[dict[str, Any]] = []
        self.steps_seen = 0
        self.cuda: bool | None = None
        self._write_run = write_run
        self._sampler = TelemetrySampler(gpus if telemetry else [], sample, interval)
        self._prof: Any = None
        self._open_step: str | None = None

    # -- the profiler ------------------------------------------------------------------------
    def __enter__(self) -> "Profile":
        try:
            import torch
            from torch.profiler import ProfilerActivity, profile, schedule
        except ImportError:
            raise UsageError("perfstack.profile() needs PyTorch, which is not importable here") from None
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.cuda = bool(torch.cuda.is_available())
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        sched = schedule(skip_first=self.skip_first, wait=0, warmup=1, active=self.steps, repeat=1)
        with warnings.catch_warnings():  # "Profiler clears events at the end of each cycle": one cycle here
            warnings.filterwarnings("ignore", message=".*clears events at the end of each cycle")
            self._prof = profile(activities=acts, record_shapes=True, schedule=sched, on_trace_ready=self._export)
        self._sampler.start()
        self._prof.start()
        return self

    def _export(self, prof: Any) -> None:
        rank = os.environ.get("RANK")
        base = self.out_dir / f"{self.name}{'.rank' + rank if rank else ''}"
        path, n = Path(f"{base}.pt.trace.json.gz"), 1
        while path.exists():
            path, n = Path(f"{base}.{n}.pt.trace.json.gz"), n + 1
        if self._open_step is not None and self.steps_seen <= self.skip_first + 1:
            return  # the block ended during the warm-up: no complete step recorded
        export(prof, str(path), self._open_step)
        self.trace_paths.append(path)
        self.telemetry = self._sampler.stop()

    def step(self) -> None:
        """Mark the end of one training step (call it after ``optimizer.step()``)."""
        self.steps_seen += 1
        if self._prof is None:
            return
        self._prof.step()
        if self.trace_paths:  # the window is recorded: detach so the rest of the loop runs unprofiled
            self._stop()

    def _stop(self) -> None:
        prof, self._prof = self._prof, None
        if prof is not None:
            if not self.trace_paths:  # cut short: the step now open is incomplete, leave it out
                self._open_step = f"ProfilerStep#{prof.step_num}"
            prof.stop()  # while recording, this writes what was recorded so far

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self._stop()
        finally:
            self.telemetry = self._sampler.stop()
        if self.trace_paths and self._write_run:
            try:
                self.run_path = self._save_run()
            except Exception:
                if exc_type is None:  # never hide the loop's own exception behind the analysis's
                    raise

    # -- the Run -----------------------------------------------------------------------------
    def _save_run(self) -> Path | None:
        try:
            from perfstack.profile.summary import profile_run
        except ImportError:  # the analysis is not part of this install
            return None
        run = profile_run(self.trace_paths, telemetry=self.telemetry or None, command="profile (python api)")
        first = self.trace_paths[0]
        path = first.with_name(first.name.replace(".pt.trace.json.gz", ".run.json"))
        run.save(path)
        return path


def profile(steps: int = 3, skip_first: int = 2, out_dir: str | os.PathLike[str] = "perfstack-profile",
            **kw: Any) -> Profile:
    """``with perfstack.profile(steps=3, skip_first=2) as p: ... p.step()`` — see Profile."""
    return Profile(steps, skip_first, out_dir, **kw)
