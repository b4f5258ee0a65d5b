"""The Python API: profile a window of steps from inside your own training loop.

    import perfstack
    with perfstack.profile(steps=3, out_dir="perfstack-profile") as p:
        for batch in loader:
            train_step(batch)
            p.step()
    print(p.trace_paths, p.run_path, p.unprofiled)

The same settings as ``perfstack profile python train.py``: torch.profiler with CPU (and CUDA
where available) activities and shapes, ``skip_first`` steps skipped, one warm-up step, ``steps``
recorded, then the profiler detaches while the loop runs on.

As there, the step time is also measured without the profiler, over up to ``unprofiled_steps``
(5) steps just before the profiler starts and as many just after it detaches (fewer once a window
has taken ``unprofiled_budget_s``, 5 s). ``skip_first=None`` (the default) lets 2 warm-up steps
pass untimed, then times the next ones; an explicit ``skip_first`` times the last of the steps it
skips (see capture.py). ``p.unprofiled`` holds the figures (capture.UNPROFILED_KEYS), or None when
no step could be timed without the profiler; a window cut short by the end of the block keeps the
steps it had.

NVML telemetry is sampled every 100 ms from entry until the trace is written. On exit the trace
is written into ``out_dir`` (also when the block raises: what was recorded is kept), and, where
the analysis is installed, the Run JSON next to it (``<name>.run.json``, from
``summary.profile_run``, given the unprofiled step time and with ``profile["unprofiled"]``).
Under torchrun each rank writes its own ``<name>.rank<N>.pt.trace.json.gz``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

from perfstack.errors import UsageError
from perfstack.profile._bootstrap import TIMED_BUDGET_S, TIMED_STEPS, StepClock, export, quiet_profiler
from perfstack.profile.capture import check_plan, unprofiled_note
from perfstack.profile.sampler import INTERVAL_S, TelemetrySampler


# Where the block stands: before the profiler starts, profiling, timing steps after it, done.
_Phase = Literal["before", "profiling", "after", "done"]


class Profile:
    """Context manager returned by ``perfstack.profile()``; call ``step()`` once per training step.

    After the block: ``trace_paths`` (list of Path, empty when the loop ended before a step was
    recorded), ``run_path`` (Path of the Run JSON, or None when the analysis is unavailable or no
    trace was written), ``telemetry`` (the NVML samples), ``steps_seen`` and ``unprofiled`` (the
    step time without the profiler, a dict with capture.UNPROFILED_KEYS, or None)."""

    def __init__(self, steps: int = 3, skip_first: int | None = None,
                 out_dir: str | os.PathLike[str] = "perfstack-profile", *,
                 name: str = "profile", telemetry: bool = True, gpus: Sequence[int] | None = None,
                 sample: Callable[[int], dict[str, Any]] | None = None, interval: float = INTERVAL_S,
                 write_run: bool = True, unprofiled_steps: int = TIMED_STEPS,
                 unprofiled_budget_s: float = TIMED_BUDGET_S) -> None:
        check_plan(steps, skip_first, unprofiled_steps, names=("steps", "skip_first", "unprofiled_steps"))
        self.steps, self.skip_first = steps, skip_first
        self.out_dir = Path(out_dir)
        self.name = name
        self.trace_paths: list[Path] = []
        self.run_path: Path | None = None
        self.telemetry: list[dict[str, Any]] = []
        self.steps_seen = 0
        self.cuda: bool | None = None
        self.unprofiled: dict[str, Any] | None = None
        self._write_run = write_run
        self._sampler = TelemetrySampler(gpus if telemetry else [], sample, interval)
        self._prof: Any = None
        self._open_step: str | None = None
        self._timing = (unprofiled_steps, unprofiled_budget_s)
        self._clock: StepClock | None = None
        self._started_at = 0  # steps the profiler let pass
        self._phase: _Phase = "before"

    # -- the profiler ------------------------------------------------------------------------
    def __enter__(self) -> "Profile":
        try:
            import torch
            import torch.profiler  # noqa: F401
        except ImportError:
            raise UsageError("perfstack.profile() needs PyTorch, which is not importable here") from None
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.cuda = bool(torch.cuda.is_available())
        self._clock = StepClock(torch, self.skip_first, *self._timing)
        self._sampler.start()
        if self.skip_first == 0:  # the first step is the warm-up
            self._start_profiler(torch, 0)
        return self

    def _start_profiler(self, torch: Any, k: int) -> None:
        """Start the profiler after ``k`` steps: the next step warms up, ``steps`` are recorded."""
        from torch.profiler import ProfilerActivity, profile, schedule
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        base = schedule(wait=0, warmup=1, active=self.steps, repeat=1)
        with quiet_profiler():
            self._prof = profile(activities=acts, record_shapes=True, schedule=lambda n: base(max(n - k, 0)),
                                 on_trace_ready=self._export)
            self._prof.step_num = k  # ProfilerStep#k.. as the loop's own step numbers
            self._started_at = k
            self._phase = "profiling"
            self._prof.start()

    def _export(self, prof: Any) -> None:
        rank = os.environ.get("RANK")
        base = self.out_dir / f"{self.name}{'.rank' + rank if rank else ''}"
        path, n = Path(f"{base}.pt.trace.json.gz"), 1
        while path.exists():
            path, n = Path(f"{base}.{n}.pt.trace.json.gz"), n + 1
        if self._open_step is not None and self.steps_seen <= self._started_at + 1:
            return  # the block ended during the warm-up: no complete step recorded
        export(prof, str(path), self._open_step)
        self.trace_paths.append(path)
        self.telemetry = self._sampler.stop()

    def step(self) -> None:
        """Mark the end of one training step (call it after ``optimizer.step()``)."""
        self.steps_seen += 1
        clock = self._clock
        if clock is None or self._phase == "done":
            return
        if self._phase == "after":
            if clock.after():
                self._phase = "done"
            return
        if self._phase == "before":
            if clock.before(self.steps_seen):
                import torch
                self._start_profiler(torch, self.steps_seen)
            return
        if self.steps_seen == self._started_at + 1:
            clock.profiled_begin()  # the warm-up step ends: the recorded steps start
        else:
            clock.profiled_mark()
        self._prof.step()
        if self.trace_paths:  # the window is recorded: detach so the rest of the loop runs unprofiled
            self._stop()
            self._phase = "after" if clock.after_begin() else "done"

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
            self._phase = "done"
            if self._clock is not None:
                try:
                    self._clock.finish()
                    self.unprofiled = self._clock.result()
                except Exception:  # a timing problem never hides the trace or the loop's exception
                    self.unprofiled = None
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
        u = self.unprofiled
        run = profile_run(self.trace_paths, telemetry=self.telemetry or None, command="profile (python api)",
                          unprofiled_step_ms=u["step_ms"] if u else None,
                          unprofiled_note=unprofiled_note(u, "python api") if u else None)
        if u and run.profile is not None:
            run.profile.unprofiled = u
        first = self.trace_paths[0]
        path = first.with_name(first.name.replace(".pt.trace.json.gz", ".run.json"))
        run.save(path)
        return path


def profile(steps: int = 3, skip_first: int | None = None, out_dir: str | os.PathLike[str] = "perfstack-profile",
            **kw: Any) -> Profile:
    """``with perfstack.profile(steps=3) as p: ... p.step()`` — see Profile."""
    return Profile(steps, skip_first, out_dir, **kw)
