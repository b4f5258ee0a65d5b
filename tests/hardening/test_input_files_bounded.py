"""Files a user names (a Run for report or diff, a model config for estimate, a path for fleet
report) are read only when they are regular files of a bounded size: a FIFO would block for ever,
/dev/zero never ends, and a sparse file is small on disk but huge when read. Each is exit 2 naming
the file, without reading it.

The commands run in a child with a deadline and a memory cap: the old code blocked on a FIFO, read
/dev/zero until memory ran out, and took 6 GB for a 3 GiB sparse Run before refusing it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(),
                                reason="needs FIFOs and /dev/zero")

SRC = str(Path(__file__).resolve().parents[2] / "src")
RUN = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "h100-doctor.json"
COMMANDS = {
    "report": lambda f: ["report", f],
    "diff": lambda f: ["diff", str(RUN), f],
    "estimate": lambda f: ["estimate", "infer", "-m", f],
    "fleet": lambda f: ["fleet", "report", f],
}


def _limit_memory() -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _perfstack(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "perfstack", *argv], capture_output=True, text=True, timeout=60,
                          preexec_fn=_limit_memory)


def _sparse(p: Path, size: int) -> Path:
    with open(p, "wb") as f:
        f.truncate(size)  # no blocks on disk; a whole read still returns `size` bytes
    return p


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_fifo_is_refused_without_blocking(command, tmp_path):
    fifo = tmp_path / "x.json"
    os.mkfifo(fifo)
    done = _perfstack(COMMANDS[command](str(fifo)))
    assert done.returncode == 2, done.stderr
    assert str(fifo) in done.stderr and ("not a regular file" in done.stderr or "pipe" in done.stderr)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_device_is_refused(command):
    done = _perfstack(COMMANDS[command]("/dev/zero"))
    assert done.returncode == 2, done.stderr
    assert "/dev/zero" in done.stderr and "internal error" not in done.stderr


@pytest.mark.parametrize("command,size,limit", [("report", 3 << 30, "256 MiB"), ("diff", 3 << 30, "256 MiB"),
                                                ("estimate", 1 << 30, "16 MiB")])
def test_oversized_file_is_refused_before_reading(command, size, limit, tmp_path):
    big = _sparse(tmp_path / "config.json", size)
    done = _perfstack(COMMANDS[command](str(big)))
    assert done.returncode == 2, done.stderr
    assert f"larger than {limit}" in done.stderr and str(big) in done.stderr


def test_a_directory_given_as_a_run_is_named(tmp_path):
    done = _perfstack(["report", str(tmp_path)])
    assert done.returncode == 2 and "is a directory" in done.stderr


def test_a_file_of_the_right_size_still_loads(tmp_path):
    assert _perfstack(["report", str(RUN)]).returncode == 0
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257, '
                      '"n_positions": 1024}')
    done = _perfstack(["estimate", "infer", "-m", str(config), "--prompt", "128", "--gen", "32"])
    assert done.returncode == 0, done.stderr


def test_a_run_too_big_for_memory_is_exit_2_named(tmp_path):
    # before: a Run under the size limit that did not fit in memory died with MemoryError and a traceback
    import resource
    run = json.loads(RUN.read_text())
    run["facts"]["big"] = {"value": [0.123456] * 6_000_000, "source": "planted"}
    big = tmp_path / "big.json"
    big.write_text(json.dumps(run))

    # 300 MiB of address space: the load runs out (named: the file); 500 MiB: writing the JSON out does
    for mib, named in ((300, str(big)), (500, "")):
        def small_memory(mib: int = mib) -> None:
            resource.setrlimit(resource.RLIMIT_AS, (mib << 20, mib << 20))
        done = subprocess.run([sys.executable, "-m", "perfstack", "report", str(big), "--format", "json"],
                              capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=SRC),
                              preexec_fn=small_memory)
        assert done.returncode == 2, done.stderr
        assert "too large" in done.stderr and named in done.stderr and "Traceback" not in done.stderr
        assert "internal error" not in done.stderr
