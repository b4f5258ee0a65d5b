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

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "h100-doctor.json"
SRC = str(Path(__file__).resolve().parents[2] / "src")
COMMANDS = {
    "report": lambda f: ["report", f],
    "diff": lambda f: ["diff", str(RUN), f],
    "estimate": lambda f: ["estimate", "infer", "-m", f],
    "fleet": lambda f: ["fleet", "report", f],
}


def _limit_memory() -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


# Every case in one child (a Python start-up per case was most of this file's time): each case is main(argv)
# with its exit code and stderr kept; the child names on stderr the case under way, so a case that blocks
# is named when the deadline kills the child.
CHILD = r"""
import contextlib, io, json, sys
from perfstack.cli.main import main
out = {}
for name, argv in json.loads(sys.argv[1]):
    print(name, file=sys.__stderr__, flush=True)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code
    out[name] = [rc, err.getvalue()]
print(json.dumps(out))
"""


def _sparse(p: Path, size: int) -> Path:
    with open(p, "wb") as f:
        f.truncate(size)  # no blocks on disk; a whole read still returns `size` bytes
    return p


OVERSIZED = [("report", 3 << 30, "256 MiB"), ("diff", 3 << 30, "256 MiB"), ("estimate", 1 << 30, "16 MiB")]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, str]]:
    """case -> (exit code, stderr, the path it was given), every case run in one child with a deadline
    and a memory cap."""
    d = tmp_path_factory.mktemp("inputs")
    cases: dict[str, tuple[list[str], str]] = {}
    for command, argv in sorted(COMMANDS.items()):
        fifo = d / f"{command}-fifo.json"
        os.mkfifo(fifo)
        cases[f"fifo-{command}"] = (argv(str(fifo)), str(fifo))
        cases[f"device-{command}"] = (argv("/dev/zero"), "/dev/zero")
    for command, size, _ in OVERSIZED:
        big = _sparse(d / f"{command}-config.json", size)
        cases[f"oversized-{command}"] = (COMMANDS[command](str(big)), str(big))
    cases["directory"] = (["report", str(d)], str(d))
    cases["run-that-loads"] = (["report", str(RUN)], str(RUN))
    config = d / "config.json"
    config.write_text('{"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257, '
                      '"n_positions": 1024}')
    cases["config-that-loads"] = (["estimate", "infer", "-m", str(config), "--prompt", "128", "--gen", "32"], str(config))
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, json.dumps([[k, v[0]] for k, v in cases.items()])],
                              capture_output=True, text=True, timeout=180, env=dict(os.environ, PYTHONPATH=SRC),
                              preexec_fn=_limit_memory)
    except subprocess.TimeoutExpired as e:
        under_way = (e.stderr or b"").decode(errors="replace").strip().splitlines()[-1:]
        pytest.fail(f"blocked: no answer within 180 s, in case {under_way}")
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    return {k: (results[k][0], results[k][1], cases[k][1]) for k in cases}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_fifo_is_refused_without_blocking(command, outcomes):
    rc, err, fifo = outcomes[f"fifo-{command}"]
    assert rc == 2, err
    assert fifo in err and ("not a regular file" in err or "pipe" in err)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_device_is_refused(command, outcomes):
    rc, err, _ = outcomes[f"device-{command}"]
    assert rc == 2, err
    assert "/dev/zero" in err and "internal error" not in err


@pytest.mark.parametrize("command,size,limit", OVERSIZED)
def test_oversized_file_is_refused_before_reading(command, size, limit, outcomes):
    rc, err, big = outcomes[f"oversized-{command}"]
    assert rc == 2, err
    assert f"larger than {limit}" in err and big in err


def test_a_directory_given_as_a_run_is_named(outcomes):
    rc, err, _ = outcomes["directory"]
    assert rc == 2 and "is a directory" in err


def test_a_file_of_the_right_size_still_loads(outcomes):
    assert outcomes["run-that-loads"][0] == 0, outcomes["run-that-loads"][1]
    assert outcomes["config-that-loads"][0] == 0, outcomes["config-that-loads"][1]


@pytest.mark.slow
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
