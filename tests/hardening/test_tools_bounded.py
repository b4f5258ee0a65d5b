"""Tools that flood or hang: output is capped, the whole process group is killed, slow tools overlap."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfstack.host import Unavailable
from perfstack.host.live import LiveHost
from perfstack.host.tools import run_tool
from perfstack.probes import collect


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie re-parented to init is gone for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def test_flooding_tool_is_stopped_at_the_cap_with_a_reason():
    flood = [sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('x' * 65536)"]
    t0 = time.monotonic()
    with pytest.raises(Unavailable, match="printed more than 1 MiB"):
        run_tool(flood, timeout=30, cap=1 << 20)
    assert time.monotonic() - t0 < 15  # stopped at the cap, not at the timeout


def _limit_memory() -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def test_live_run_caps_what_it_keeps():
    # In a child with a memory cap: without the output cap this fills memory for the whole timeout.
    code = ("import sys\nfrom perfstack.host.live import LiveHost\nfrom perfstack.host import Unavailable\n"
            "flood = [sys.executable, '-c', 'import sys\\nwhile True: sys.stdout.write(\"x\" * 65536)']\n"
            "try:\n    LiveHost().run(flood, timeout=20)\nexcept Unavailable as e:\n    print(e.reason)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          preexec_fn=_limit_memory)
    assert "printed more than 16 MiB" in done.stdout, done.stderr[-500:]


def test_timeout_kills_the_grandchild_too(tmp_path):
    pidfile = tmp_path / "pid"
    # A wrapper whose child sleeps and outlives it unless the whole group is killed.
    script = (f"import subprocess, sys, time\n"
              f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
              f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
              f"time.sleep(60)\n")
    with pytest.raises(Unavailable, match="timed out after 1 s"):
        LiveHost().run([sys.executable, "-c", script], timeout=1)
    grandchild = int(pidfile.read_text())
    for _ in range(50):
        if not _alive(grandchild):
            break
        time.sleep(0.1)
    assert not _alive(grandchild)


def test_background_child_holding_the_pipe_cannot_outlast_the_timeout():
    script = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); print('done')"
    t0 = time.monotonic()
    with pytest.raises(Unavailable, match="timed out"):
        LiveHost().run([sys.executable, "-c", script], timeout=1)
    assert time.monotonic() - t0 < 10


def test_ordinary_tools_still_answer():
    assert LiveHost().run([sys.executable, "-c", "print('hi')"]) == "hi\n"
    with pytest.raises(Unavailable, match="exit 3: boom"):
        LiveHost().run([sys.executable, "-c", "import sys; sys.stderr.write('boom\\n'); sys.exit(3)"])


def test_started_tools_run_side_by_side(tmp_path):
    sleepers = [((sys.executable, "-c", f"import time; time.sleep(1.5); print({i})"), 10.0) for i in range(4)]
    host = LiveHost()
    t0 = time.monotonic()
    host.start(sleepers)
    assert [host.run(list(argv)) for argv, _ in sleepers] == [f"{i}\n" for i in range(4)]
    assert time.monotonic() - t0 < 4.5  # one after another would take 6 s


def test_started_tool_reports_its_failure_to_the_probe_that_asks():
    host = LiveHost()
    waited = []
    host.on_wait = waited.append
    host.start([(("perfstack-no-such-tool",), 5.0), ((sys.executable, "-c", "import time; time.sleep(0.5)"), 5.0)])
    with pytest.raises(Unavailable, match="command not found"):
        host.run(["perfstack-no-such-tool"])
    host.run([sys.executable, "-c", "import time; time.sleep(0.5)"])
    assert any("waiting for" in w for w in waited)


def test_doctor_with_every_tool_hung_takes_about_the_longest_timeout(tmp_path, monkeypatch):
    """Fake nvidia-smi, dmesg and lspci that never answer, first on PATH; the probes' own timeouts
    are shortened so the test is quick: serial waits would take their sum."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("nvidia-smi", "dmesg", "lspci"):
        tool = bin_dir / name
        tool.write_text("#!/bin/sh\nsleep 60\n")
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    import perfstack.probes as probes
    monkeypatch.setattr(probes, "slow_commands",
                        lambda: [(("nvidia-smi", "-q", "-x"), 2.0), (("nvidia-smi", "topo", "-m"), 2.0),
                                 (("lspci", "-vvv"), 2.0), (("dmesg",), 2.0)])
    # The Python probe imports the user's torch (seconds on a slow box) alongside; not what is timed here.
    monkeypatch.setattr(LiveHost, "python_info", lambda self: (_ for _ in ()).throw(Unavailable("skipped")))
    t0 = time.monotonic()
    facts = collect(LiveHost())
    took = time.monotonic() - t0
    for key in ("pcie.lspci", "pcie.topology"):
        assert "timed out after 2 s" in facts[key].reason
    assert "timed out after 2 s" in facts["kernel_log.xid"].reason
    assert took < 7.5, took  # 4 tools x 2 s one after another is 8 s, plus the rest of the audit
