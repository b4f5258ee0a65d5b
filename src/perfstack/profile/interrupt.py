"""Ctrl-C while perfstack runs a user's script: held while perfstack's own work is half-done (a temporary
folder made but not yet known to its clean-up, a script started but not yet waited for), passed on to the
script, and raised once that work is whole. Used by the capture (``capture.run``) and the CLI around it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from typing import Any, Iterator


def _terminal_sends_sigint() -> bool:
    """Whether a Ctrl-C reaches the script without us: perfstack is in the foreground process group of
    its terminal, and the script, started in perfstack's group, is in it too. Elsewhere (no terminal,
    a background job, a SIGINT sent to perfstack alone by kill) the Ctrl-C is forwarded."""
    for fd in (0, 1, 2):
        try:
            return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:  # not a terminal, or not ours
            continue
    return False


class CtrlC:
    """The Ctrl-Cs that came inside ``ctrl_c_held()``: counted, and passed on to the script once it is
    given to ``watch`` (see ctrl_c_held)."""

    def __init__(self) -> None:
        self.count = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.terminal = _terminal_sends_sigint()

    def on_sigint(self, signum: int, frame: Any) -> None:
        self.count += 1
        proc = self.proc
        if proc is not None and proc.poll() is None:  # a third Ctrl-C kills a script that ignores the first two
            if self.count >= 3:
                proc.kill()
            elif not self.terminal:  # the script got this one from the terminal already: a second would cut its clean-up
                proc.send_signal(signal.SIGINT)

    def watch(self, proc: subprocess.Popen[bytes]) -> None:
        """The script has started: pass on the Ctrl-Cs from now on, and one that came while it was being
        started (it may have missed it, even from the terminal; it has run none of its own code yet)."""
        self.proc = proc
        if self.count and proc.poll() is None:
            proc.send_signal(signal.SIGINT)

    def answer(self) -> bool:
        """Whether a Ctrl-C came; it is answered by the caller, so the end of the block no longer raises it."""
        came, self.count = self.count > 0, 0
        return came


@contextlib.contextmanager
def ctrl_c_held() -> Iterator[CtrlC]:
    """Inside this block a Ctrl-C never lands half-way through perfstack's own work, where it would
    lose track of something it made (a temporary folder made but not yet known to its clean-up, a
    script started but not yet waited for): it is counted, passed on to the script given to
    ``watch`` while the script runs (unless the terminal delivered it there already; the third kills
    a script that ignores the first two), and raised as KeyboardInterrupt when the block ends, unless
    ``answer()`` took it. A block inside another shares the outer one's count. Only on the main
    thread, where Python delivers signals; elsewhere nothing changes."""
    outer = getattr(signal.getsignal(signal.SIGINT), "__self__", None)
    if isinstance(outer, CtrlC):
        yield outer
        return
    held = CtrlC()
    old = None
    if threading.current_thread() is threading.main_thread():
        old = signal.signal(signal.SIGINT, held.on_sigint)
    try:
        yield held
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)
    if held.count:
        raise KeyboardInterrupt
