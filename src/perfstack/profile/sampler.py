"""GPU telemetry sampled while a profiled workload runs: clocks, power, temperature, throttle
reasons and utilization from NVML, every ``INTERVAL_S`` for the GPUs the workload can see.

Both ways of profiling use it: capture mode (``capture.run``, sampling in the parent while the
script runs in a child) and the Python API (``perfstack.profile()``, sampling in the script's own
process). NVML is reached only through ``perfstack.host.nvml``; profile/telemetry.py summarizes
the samples.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Sequence

INTERVAL_S = 0.1


def visible_gpus() -> list[int]:
    """NVML indices of the GPUs a child would see: all of them, narrowed by CUDA_VISIBLE_DEVICES
    (indices or GPU-UUIDs). [] where NVML is unusable (a CPU-only machine)."""
    from perfstack.host import nvml
    try:
        with nvml._session() as nv:
            count = nv.nvmlDeviceGetCount()
            spec = os.environ.get("CUDA_VISIBLE_DEVICES")
            if spec is None:
                return list(range(count))
            uuids: dict[str, int] = {}
            for i in range(count):
                try:
                    u = nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i))
                    uuids[u.decode() if isinstance(u, bytes) else u] = i
                except Exception:
                    pass
    except Exception:
        return []
    out: list[int] = []
    for item in (s.strip() for s in spec.split(",")):
        if item.isdigit():
            idx = int(item)
            if idx >= count:
                break  # CUDA stops at the first invalid entry
            out.append(idx)
        else:
            match = [i for u, i in uuids.items() if item and u.startswith(item if item.startswith("GPU-") else "GPU-" + item)]
            if len(match) != 1:
                break
            out.append(match[0])
    return out


def _nvml_sampler() -> Callable[[int], dict[str, Any]]:
    from perfstack.host import nvml
    return nvml.telemetry


class TelemetrySampler:
    """Calls ``sample(index)`` for each GPU every ``interval`` seconds in a daemon thread; each
    record is the sample plus ``gpu`` (NVML index), ``time`` (Unix seconds, to line up with trace
    timestamps) and ``t`` (seconds since start). ``stop()`` ends it and returns the records.
    Errors from ``sample`` are data (``{"error": ...}``), never an exception."""

    def __init__(self, gpus: Sequence[int] | None = None, sample: Callable[[int], dict[str, Any]] | None = None,
                 interval: float = INTERVAL_S) -> None:
        self.gpus = list(visible_gpus() if gpus is None else gpus)
        self.sample = sample
        self.interval = interval
        self.records: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "TelemetrySampler":
        if self.gpus and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="perfstack-telemetry", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        keep_open = None
        if self.sample is None:
            self.sample = _nvml_sampler()
            try:  # hold one NVML session so each telemetry() call's init/shutdown is a refcount bump
                from perfstack.host import nvml
                keep_open = nvml._session()
                keep_open.__enter__()
            except Exception:
                keep_open = None
        t0 = time.monotonic()
        try:
            while not self._stop.is_set():
                tick = time.monotonic()
                for i in self.gpus:
                    try:
                        s = dict(self.sample(i))
                    except Exception as e:  # an injected sampler may raise; keep it as data
                        s = {"error": f"{type(e).__name__}: {e}"}
                    self.records.append({"gpu": i, "time": time.time(), "t": round(time.monotonic() - t0, 4), **s})
                self._stop.wait(max(0.0, self.interval - (time.monotonic() - tick)))
        finally:
            if keep_open is not None:
                try:
                    keep_open.__exit__(None, None, None)
                except Exception:
                    pass

    def stop(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        return self.records

    def __enter__(self) -> "TelemetrySampler":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
