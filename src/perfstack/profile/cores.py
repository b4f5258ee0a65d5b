"""A second process on a spare core: whether the machine has one to give, the command that starts one, and the
frames the two exchange through its pipes (8 bytes of length, little-endian, then msgpack).

Two of a large trace's costs are one core's work while the machine has another: reading its text
(``traceread``) and replaying its timeline (``replays``). Each hands part of it to a second process,
started afresh rather than forked (the reader may live in a process that holds threads, and a fork of a
process holding a gigabyte of events would share its pages only until the first reference count moved).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Iterator, List

import msgspec

import perfstack


def spare_core() -> bool:
    """Is there a core for a second process: two or more this process may use, and the machine's
    1-minute load average below its number of cores? On a busy machine the second process only
    competes for the same cores: measured, the split reading then took more CPU time and no less wall time."""
    try:
        usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        return usable >= 2 and os.getloadavg()[0] < (os.cpu_count() or 1)
    except (OSError, AttributeError):
        return False


def child_command(module: str, args: List[str]) -> List[str]:
    """The command that runs ``module.main(args)`` (an exit status) in a fresh interpreter: this one, with
    this process's perfstack found by its path (not by what the child's sys.path finds)."""
    root = str(Path(perfstack.__file__).resolve().parents[1])
    code = (f"import sys; sys.path.insert(0, sys.argv.pop(1)); from {module} import main; "
            "sys.exit(main(sys.argv[1:]))")
    return [sys.executable, "-c", code, root, *args]


def widen_pipe(fd: int, size: int = 1 << 20) -> None:
    """Room for ``size`` bytes in a pipe (Linux; elsewhere its own size): should the reading side be slow to
    come back, the writing side does not wait."""
    try:
        import fcntl
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), size)
    except (ImportError, OSError):
        pass


def frame(enc: msgspec.msgpack.Encoder, msg: Any) -> bytes:
    data = enc.encode(msg)
    return len(data).to_bytes(8, "little") + data


def frames(buf: bytearray, dec: msgspec.msgpack.Decoder[Any], limit: int) -> Iterator[Any]:
    """The messages of the whole frames at the start of ``buf``, one at a time, taken out of it once all are
    read (a frame cut short stays for the next read). ValueError for a frame longer than ``limit``."""
    at = 0
    try:
        while len(buf) - at >= 8:
            n = int.from_bytes(buf[at:at + 8], "little")
            if n > limit:
                raise ValueError("a frame too large")
            if len(buf) - at - 8 < n:
                break
            with memoryview(buf) as mv:
                msg = dec.decode(mv[at + 8:at + 8 + n])
            at += 8 + n
            yield msg
    finally:
        del buf[:at]
