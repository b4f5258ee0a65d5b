"""Ctrl-C in 'perfstack profile -- python ...' exits 130, whether or not a trace was written, and
leaves no empty perfstack-profile-* folder behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
if not hasattr(os, "killpg"):
    pytest.skip("process groups are POSIX", allow_module_level=True)

TRAIN = """
import torch, torch.nn as nn
model = nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
while True:
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
"""


def _start(tmp_path: Path, body: str) -> tuple[subprocess.Popen, Path]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(body))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp))
    # its own session, so that the SIGINT below reaches perfstack and the script as a terminal's Ctrl-C does
    proc = subprocess.Popen([sys.executable, "-m", "perfstack", "profile", "--", "python", str(script)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    return proc, tmp


def _ctrl_c(proc: subprocess.Popen, until, timeout: float = 90) -> tuple[int, str]:
    deadline = time.monotonic() + timeout
    while not until() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return proc.returncode, err.decode(errors="replace")


def _profile_dirs(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("perfstack-profile-*"))


def test_ctrl_c_before_any_trace_exits_130_and_leaves_no_folder(tmp_path):
    proc, tmp = _start(tmp_path, "import time\nprint('ready', flush=True)\ntime.sleep(120)\n")
    rc, err = _ctrl_c(proc, lambda: bool(_profile_dirs(tmp)) and time.sleep(2) is None)
    assert rc == 130, err
    assert _profile_dirs(tmp) == [], err


def test_ctrl_c_after_the_trace_reports_it_and_exits_130(tmp_path):
    proc, tmp = _start(tmp_path, TRAIN)
    rc, err = _ctrl_c(proc, lambda: any(d.glob("*.json*") for d in _profile_dirs(tmp)))
    assert rc == 130, err
    assert "interrupted" in err and "internal error" not in err
    for d in _profile_dirs(tmp):  # a folder that stays holds the traces
        assert any(d.iterdir())


CLEANUP = """
import time
print('ready', flush=True)
try:
    time.sleep(120)
except KeyboardInterrupt:
    time.sleep(1.5)  # what a training script does on Ctrl-C: save a checkpoint
    print('saved', flush=True)
    raise
"""


def test_ctrl_c_at_a_terminal_reaches_the_script_once(tmp_path):
    """At a terminal, Ctrl-C goes to every process of the foreground group: the script gets it from the
    terminal. perfstack must not send it a second one, which would interrupt the script's own clean-up
    (and print perfstack's frames in a traceback)."""
    import pty
    script = tmp_path / "train.py"
    script.write_text(CLEANUP)
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"))
    pid, fd = pty.fork()  # a new session whose controlling terminal is the pty
    if pid == 0:
        os.execve(sys.executable, [sys.executable, "-m", "perfstack", "profile", "--", "python", str(script)], env)
    out = b""
    deadline = time.monotonic() + 120
    sent = False
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: every process holding the terminal has exited
            break
        if not chunk:
            break
        out += chunk
        if not sent and b"ready" in out:
            time.sleep(0.5)
            os.write(fd, b"\x03")  # the terminal's Ctrl-C: SIGINT to the foreground process group
            sent = True
    _, status = os.waitpid(pid, 0)
    text = out.decode(errors="replace")
    assert sent, text
    assert os.waitstatus_to_exitcode(status) == 130, text
    assert "saved" in text, text  # the clean-up ran to its end
    assert "_bootstrap" not in text and "perfstack/profile" not in text, text
