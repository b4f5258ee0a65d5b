"""Running a tool on the live machine, bounded in time and in memory.

A sick machine makes tools misbehave: nvidia-smi hangs on a GPU that fell off the bus, a wrapper
script forks a child that outlives it, a broken tool prints forever. So every tool starts in a
session (and process group) of its own, and the whole group is killed when it runs past its
timeout or prints more than OUTPUT_CAP; at most OUTPUT_CAP bytes of its output are ever kept.
Groups still running when perfstack exits (Ctrl-C while waiting) are killed on the way out.
"""

from __future__ import annotations

import atexit
import os
import selectors
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Sequence

from perfstack.host import Unavailable

OUTPUT_CAP = 16 << 20  # bytes of stdout plus stderr; nvidia-smi -q -x on 8 GPUs prints well under 1 MiB
CHUNK = 64 << 10

_running: set[subprocess.Popen[bytes]] = set()
_lock = threading.Lock()


@dataclass
class Result:
    returncode: int
    stdout: bytes
    stderr: bytes


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the group id is the child's pid (start_new_session)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


@atexit.register
def _kill_leftovers() -> None:
    with _lock:
        left = list(_running)
    for proc in left:
        _kill_group(proc)


def run_tool(argv: Sequence[str], timeout: float, cap: int = OUTPUT_CAP) -> Result:
    """Run ``argv`` with no stdin; raises Unavailable when it cannot start, runs past ``timeout``
    seconds or prints more than ``cap`` bytes (its group is killed in both cases)."""
    cmd = " ".join(argv)
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except FileNotFoundError:
        raise Unavailable(f"{argv[0]}: command not found") from None
    except PermissionError:
        raise Unavailable(f"{argv[0]}: permission denied") from None
    except OSError as e:
        raise Unavailable(f"{argv[0]}: cannot start ({e.strerror or e})") from None
    with _lock:
        _running.add(proc)
    try:
        out, err = _collect(proc, cmd, time.monotonic() + timeout, timeout, cap)
    finally:
        with _lock:
            _running.discard(proc)
    return Result(proc.returncode, out, err)


def _collect(proc: subprocess.Popen[bytes], cmd: str, deadline: float, timeout: float,
             cap: int) -> tuple[bytes, bytes]:
    assert proc.stdout is not None and proc.stderr is not None
    kept: dict[str, list[bytes]] = {"out": [], "err": []}
    total = 0
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, "out")
        sel.register(proc.stderr, selectors.EVENT_READ, "err")
        try:
            # Until both pipes close: a grandchild that keeps them open keeps us here, up to the deadline.
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Unavailable(f"{cmd}: timed out after {timeout:g} s (a hung GPU can do this)")
                for key, _ in sel.select(left):
                    chunk = os.read(key.fd, CHUNK)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    total += len(chunk)
                    if total > cap:
                        raise Unavailable(f"{cmd}: printed more than {cap >> 20} MiB; stopped")
                    kept[key.data].append(chunk)
            try:
                proc.wait(max(deadline - time.monotonic(), 0))
            except subprocess.TimeoutExpired:
                raise Unavailable(f"{cmd}: timed out after {timeout:g} s (a hung GPU can do this)") from None
        except BaseException:
            _kill_group(proc)
            raise
        finally:
            proc.stdout.close()
            proc.stderr.close()
    return b"".join(kept["out"]), b"".join(kept["err"])
