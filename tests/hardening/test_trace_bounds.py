"""Traces from elsewhere: a decompression bomb, an oversized file, a FIFO or a device, and times no
clock gives are refused with exit 2 and bounded memory."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from perfstack.cli.main import main
from perfstack.errors import InputError
from perfstack.profile.trace import load
from perfstack.profile.tracetext import LIMIT_ENV, max_trace_bytes

REAL = Path(__file__).parent.parent / "fixtures" / "traces"


def _bomb(path: Path, expanded: int) -> None:
    """A valid gzip stream of ``expanded`` spaces, written a piece at a time."""
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    piece = b" " * (1 << 24)
    with open(path, "wb") as f:
        for _ in range(expanded // len(piece)):
            f.write(c.compress(piece))
        f.write(c.flush())


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the peak from /proc")
def test_gzip_bomb_is_refused_at_the_limit_with_little_memory(tmp_path, monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "0.25")  # 256 MiB
    bomb = tmp_path / "bomb.json.gz"
    _bomb(bomb, 512 << 20)
    assert bomb.stat().st_size < (1 << 20)
    # In a child, so its peak RSS is its own: the old code held the whole text (512 MiB and more).
    code = ("import resource, sys\n"
            "from perfstack.profile.trace import load\n"
            "from perfstack.errors import InputError\n"
            f"try:\n    load({str(bomb)!r})\nexcept InputError as e:\n    print('REFUSED', e.message)\n"
            # VmHWM: this process's own peak (ru_maxrss would carry over the forking parent's)
            "print('PEAK', [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, **{LIMIT_ENV: "0.25"})).stdout
    assert "REFUSED" in out and "decompresses to more than 0.25 GiB" in out
    peak_kib = int(out.split("PEAK")[1])
    assert peak_kib < 96 << 10, peak_kib  # far under the 256 MiB limit, let alone the 512 MiB text


def test_bomb_through_the_cli_is_exit_2_naming_the_limit(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(LIMIT_ENV, "0.0625")
    bomb = tmp_path / "bomb.json.gz"
    _bomb(bomb, 128 << 20)
    assert main(["profile", "--trace", str(bomb)]) == 2
    err = capsys.readouterr().err
    assert "more than 0.0625 GiB" in err and LIMIT_ENV in err


def test_plain_trace_over_the_limit_is_refused_before_reading(tmp_path, monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "0.001")
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(64 << 20)  # sparse: nothing to read on disk, 64 MiB to a reader
    with pytest.raises(InputError, match="holds more than 0.001 GiB"):
        load(big)


def test_traces_under_the_limit_still_load(tmp_path, monkeypatch):
    real = sorted(REAL.rglob("*.pt.trace.json.gz"), key=lambda p: p.stat().st_size)[0]
    monkeypatch.setenv(LIMIT_ENV, str(len(gzip.decompress(real.read_bytes())) / (1 << 30) * 1.01))
    assert load(real).gpu


def test_bad_limit_setting_is_a_usage_error(monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "lots")
    with pytest.raises(InputError, match="not a number"):
        max_trace_bytes()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_is_refused_without_blocking(tmp_path, capsys):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    # The old code blocked in open() waiting for a writer: run in a child with a deadline.
    done = subprocess.run([sys.executable, "-m", "perfstack", "profile", "--trace", str(fifo)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "not a regular file" in done.stderr


def _limit_memory() -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_device_is_refused():
    # In a child with a memory cap: the old code read /dev/zero until it ran out of memory.
    done = subprocess.run([sys.executable, "-m", "perfstack", "profile", "--trace", "/dev/zero"],
                          capture_output=True, text=True, timeout=60, preexec_fn=_limit_memory)
    assert done.returncode == 2 and "not a regular file" in done.stderr


def test_absurd_event_times_are_refused_naming_the_event(tmp_path, capsys):
    # Kernels at ts = dur = 1e308 µs: finite JSON numbers, but ts + dur is inf and the analysis
    # turned it into NaN (exit 4, or a Run holding NaN that `report` refuses).
    d = json.loads(gzip.decompress((REAL / "h100" / "pageable-memcpy.pt.trace.json.gz").read_bytes()))
    kernels = [e for e in d["traceEvents"] if e.get("cat") == "kernel"]
    for e in kernels:
        e["ts"] = e["dur"] = 1e308
    bad = tmp_path / "absurd.pt.trace.json"
    bad.write_text(json.dumps(d))
    out = tmp_path / "run.json"
    assert main(["profile", "--trace", str(bad), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and repr(kernels[0]["name"][:200]) in err and "1e+308" in err
    assert "Traceback" not in err and not out.exists()
