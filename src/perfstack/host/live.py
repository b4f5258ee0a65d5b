"""The live machine, read through the standard library with timeouts on everything."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Sequence

from perfstack.host import MAX_READ, Unavailable
from perfstack.host import nvml as nvml_mod

# A torch import with a broken CUDA install can take long; the interpreter is the user's.
PYTHON_INFO_TIMEOUT = 60.0


def _os_reason(e: OSError) -> str:
    if isinstance(e, FileNotFoundError):
        return "absent"
    if isinstance(e, PermissionError):
        return "permission denied (needs root?)"
    return e.strerror or str(e)


class LiveHost:
    kind = "live"

    def __init__(self) -> None:
        self._nvml: dict[str, Any] | None = None
        self._pyinfo: dict[str, Any] | None = None

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

    def run(self, argv: Sequence[str], timeout: float = 10.0) -> str:
        try:
            proc = subprocess.run(
                list(argv), capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False
            )
        except FileNotFoundError:
            raise Unavailable(f"{argv[0]}: command not found") from None
        except PermissionError:
            raise Unavailable(f"{argv[0]}: permission denied") from None
        except subprocess.TimeoutExpired:
            raise Unavailable(f"{' '.join(argv)}: timed out after {timeout:g} s (a hung GPU can do this)") from None
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
            self._nvml = nvml_mod.query()
        if "error" in self._nvml:
            raise Unavailable(self._nvml["error"])
        return self._nvml

    def python_info(self) -> dict[str, Any]:
        """Versions of the Python stack, read in a child interpreter so that a torch import
        that hangs or crashes cannot take perfstack down, and so that perfstack itself stays
        fast when torch is absent."""
        if self._pyinfo is None:
            text = self.run([sys.executable, "-m", "perfstack.host.pyinfo"], timeout=PYTHON_INFO_TIMEOUT)
            try:
                self._pyinfo = json.loads(text)
            except json.JSONDecodeError:
                raise Unavailable("python probe printed no JSON") from None
        return self._pyinfo
