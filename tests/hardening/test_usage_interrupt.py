"""Ctrl-C in 'perfstack profile -- python ...' exits 130, whether or not a trace was written, keeps
a trace written or being written, and leaves no empty perfstack-profile-* folder behind, whenever it
comes (the moments perfstack makes its folder, starts the script, or the script writes its trace
are made certain by a driver or a script that sends the Ctrl-C there)."""

from __future__ import annotations

import gzip
import json
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


def _traces(tmp: Path) -> list[Path]:
    return [t for d in _profile_dirs(tmp) for t in d.glob("*.pt.trace.json*")]


def _whole(trace: Path) -> bool:
    with gzip.open(trace, "rt") as f:
        return bool(json.load(f)["traceEvents"])


def test_ctrl_c_after_the_trace_reports_it_and_exits_130(tmp_path):
    proc, tmp = _start(tmp_path, TRAIN)
    rc, err = _ctrl_c(proc, lambda: bool(_traces(tmp)))  # the trace is written, or being written
    assert rc == 130, err
    assert "the report covers what was traced before Ctrl-C" in err and "internal error" not in err, err
    traces = _traces(tmp)
    assert len(_profile_dirs(tmp)) == 1 and len(traces) == 1 and _whole(traces[0]), err


# TRAIN, its trace written slowly, with a Ctrl-C to perfstack (kill -INT) as the writing starts
SLOW_EXPORT = """
import os, signal, time
import torch
export = torch.profiler.profile.export_chrome_trace
def slow_export(self, path, *args, **kwargs):
    os.kill(os.getppid(), signal.SIGINT)
    time.sleep(1)  # a large trace takes a while to write
    return export(self, path, *args, **kwargs)
torch.profiler.profile.export_chrome_trace = slow_export
""" + TRAIN


def test_ctrl_c_while_the_trace_is_written_keeps_it_and_reports_it(tmp_path):
    """perfstack passes the Ctrl-C on to the script while it writes the trace: the trace is finished
    first, then the script gets its KeyboardInterrupt."""
    proc, tmp = _start(tmp_path, SLOW_EXPORT)
    out, err = (b.decode(errors="replace") for b in proc.communicate(timeout=120))
    assert proc.returncode == 130, err
    assert "the report covers what was traced before Ctrl-C" in err and "KeyboardInterrupt" in err, err
    assert out.startswith("perfstack profile") and "per step (ms)" in out, err  # the report of the traced steps
    traces = _traces(tmp)
    assert len(traces) == 1 and _whole(traces[0]), err


# perfstack's own command line, with a Ctrl-C sent to it at one exact moment of its work
DRIVER = """
import os, signal, subprocess, sys, tempfile
moment, script = sys.argv[1:]
if moment == "folder made":
    mkdtemp = tempfile.mkdtemp
    def made_then_ctrl_c(*args, **kwargs):
        path = mkdtemp(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return path
    tempfile.mkdtemp = made_then_ctrl_c
else:
    class Popen(subprocess.Popen):
        def __init__(self, cmd, *args, **kwargs):
            super().__init__(cmd, *args, **kwargs)
            if any(str(c).endswith("_bootstrap.py") for c in cmd):
                with open(os.environ["SCRIPT_PID"], "w") as f:
                    f.write(str(self.pid))
                os.kill(os.getpid(), signal.SIGINT)
    subprocess.Popen = Popen
from perfstack.cli.main import main
sys.exit(main(["profile", "--", "python", script]))
"""
SLEEPER = "print('script started', flush=True)\nimport time\ntime.sleep(60)\n"


def _drive(tmp_path: Path, moment: str) -> tuple[int, str, Path]:
    (tmp_path / "driver.py").write_text(DRIVER)
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), SCRIPT_PID=str(tmp_path / "script.pid"))
    r = subprocess.run([sys.executable, str(tmp_path / "driver.py"), moment, str(tmp_path / "sleeper.py")],
                       env=env, capture_output=True, text=True, timeout=120)
    return r.returncode, r.stderr, tmp


def test_ctrl_c_as_the_temporary_folder_is_made_leaves_none_and_starts_nothing(tmp_path):
    rc, err, tmp = _drive(tmp_path, "folder made")
    assert rc == 130 and "interrupted" in err, err
    assert _profile_dirs(tmp) == [], err
    assert "script started" not in err


def test_ctrl_c_while_the_script_starts_ends_it_and_leaves_nothing(tmp_path):
    """The script started at that moment is not left running, unwatched, once perfstack has exited."""
    rc, err, tmp = _drive(tmp_path, "script starting")
    pid = int((tmp_path / "script.pid").read_text())
    try:
        os.kill(pid, 0)
        running = True
    except ProcessLookupError:
        running = False
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not running, err
    assert rc == 130 and "interrupted" in err, err
    assert _profile_dirs(tmp) == [] and list(tmp.glob("perfstack-capture-*")) == [], err


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
