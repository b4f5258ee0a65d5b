"""The live machine, read through the standard library with timeouts on everything (tools: tools.py)."""

from __future__ import annotations

import json
import os
import sys
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from functools import partial
from typing import Any, Callable, Iterable, Sequence

from perfstack.errors import InputError
from perfstack.host import MAX_READ, HostKind, Unavailable
from perfstack.host import nvml as nvml_mod
from perfstack.host.tools import run_tool

# A torch import with a broken CUDA install can take long; the interpreter is the user's.
PYTHON_INFO_TIMEOUT = 60.0
PYINFO_ARGV = (sys.executable, "-m", "perfstack.host.pyinfo")
NVML_TIMEOUT = 45.0  # as long as nvidia-smi is given: both wait on the same driver


def _os_reason(e: OSError) -> str:
    if isinstance(e, FileNotFoundError):
        return "absent"
    if isinstance(e, PermissionError):
        return "permission denied (needs root?)"
    return e.strerror or str(e)


_EARLY: dict[tuple[str, ...], "Future[Any]"] = {}


def start_python_probe_early() -> None:
    """Start the Python probe (a child that imports torch, seconds on most machines) before the rest
    of perfstack is even imported; the next LiveHost takes its answer. The command-line entry calls
    this for the commands that read the live machine."""
    if not _EARLY:
        h = LiveHost()
        h._spawn(PYINFO_ARGV, lambda: h._run_now(PYINFO_ARGV, PYTHON_INFO_TIMEOUT))
        _EARLY.update(h._pending)


class LiveHost:
    kind: HostKind = "live"
    python_source = "python -m perfstack.host.pyinfo"

    def bad_file(self, name: str, detail: str) -> InputError | None:
        return None  # the machine's own answer: not available, with the reason, not bad input

    def __init__(self, on_wait: Callable[[str], None] | None = None) -> None:
        self._nvml: dict[str, Any] | None = None
        self._pyinfo: dict[str, Any] | None = None
        self._pending: dict[tuple[str, ...], Future[Any]] = dict(_EARLY)  # the Python probe, if started early
        _EARLY.clear()
        self.on_wait = on_wait  # told what is being waited for (the CLI shows it on stderr)

    def read_text(self, path: str) -> str:
        try:
            # Read in small chunks: sysctl files under /proc/sys refuse one large read with
            # ENOMEM on recent kernels. Bounded at 8 MiB so a path that is not a small file stops.
            chunks: list[bytes] = []
            with open(path, "rb") as f:
                while sum(map(len, chunks)) < MAX_READ and (chunk := f.read(64 << 10)):
                    chunks.append(chunk)
            return b"".join(chunks).decode("utf-8", errors="replace")
        except OSError as e:
            raise Unavailable(f"{path}: {_os_reason(e)}") from None

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except OSError as e:
            raise Unavailable(f"{path}: {_os_reason(e)}") from None

    def start(self, commands: Iterable[tuple[Sequence[str], float]]) -> None:
        """Start the slow tools (and the Python probe and NVML) now, side by side, so that with
        every one of them hung the audit waits about the longest timeout rather than their sum.
        ``run`` of the same argv then takes the answer, waiting for it if needed."""
        for argv, timeout in commands:
            self._spawn(tuple(argv), partial(self._run_now, tuple(argv), timeout))
        self._spawn(PYINFO_ARGV, lambda: self._run_now(PYINFO_ARGV, PYTHON_INFO_TIMEOUT))
        if self._nvml is None:
            self._spawn(("nvml",), nvml_mod.query)

    def _spawn(self, key: tuple[str, ...], fn: Callable[[], Any]) -> None:
        if key in self._pending:
            return
        fut: Future[Any] = Future()

        def work() -> None:
            try:
                fut.set_result(fn())
            except BaseException as e:  # handed to whoever asks for the answer
                fut.set_exception(e)
        # Daemon threads: a tool still hung at exit must not hold the interpreter (tools.py kills it).
        threading.Thread(target=work, name=f"perfstack {' '.join(key)}", daemon=True).start()
        self._pending[key] = fut

    def _answer(self, key: tuple[str, ...], timeout: float) -> Any:
        fut = self._pending.pop(key)
        if not fut.done() and self.on_wait is not None:
            self.on_wait(f"waiting for {' '.join(key)} (at most {timeout:g} s)")
        try:
            return fut.result(timeout=timeout + 5)  # its own timeout ends it first; this is a backstop
        except FutureTimeout:
            raise Unavailable(f"{' '.join(key)}: no answer after {timeout:g} s") from None

    def run(self, argv: Sequence[str], timeout: float = 10.0) -> str:
        if tuple(argv) in self._pending:
            return str(self._answer(tuple(argv), timeout))
        return self._run_now(argv, timeout)

    def _run_now(self, argv: Sequence[str], timeout: float) -> str:
        proc = run_tool(argv, timeout)
        out = proc.stdout.decode("utf-8", errors="replace")
        if proc.returncode != 0:
            err = proc.stderr.decode("utf-8", errors="replace").strip().splitlines()
            detail = err[-1] if err else (out.strip().splitlines() or [""])[-1]
            raise Unavailable(f"{' '.join(argv)}: exit {proc.returncode}" + (f": {detail[:200]}" if detail else ""))
        return out

    def environ(self) -> dict[str, str]:
        return dict(os.environ)

    def nvml(self) -> dict[str, Any]:
        if self._nvml is None:
            # NVML runs in this process: a hung driver is bounded only when start() ran it in a thread.
            self._nvml = self._answer(("nvml",), NVML_TIMEOUT) if ("nvml",) in self._pending else nvml_mod.query()
        if "error" in self._nvml:
            raise Unavailable(self._nvml["error"])
        return self._nvml

    def python_info(self) -> dict[str, Any]:
        """Versions of the Python stack, read in a child interpreter so that a torch import
        that hangs or crashes cannot take perfstack down, and so that perfstack itself stays
        fast when torch is absent."""
        if self._pyinfo is None:
            text = self.run(PYINFO_ARGV, timeout=PYTHON_INFO_TIMEOUT)
            try:
                self._pyinfo = json.loads(text)
            except json.JSONDecodeError:
                raise Unavailable("python probe printed no JSON") from None
        return self._pyinfo
