"""How perfstack reaches the nodes of a Ray cluster: a wheel of this perfstack, in the job's runtime environment.

Run from a checkout, which no package index carries, perfstack builds a wheel of it (``pip wheel``, from a
clean copy of the checkout's sources, so that nothing is written into the checkout and no stale build
output slips in) and gives it to Ray as the job's ``py_modules``: Ray uploads it to the cluster once, and
each node installs it (``pip install --target``, which also fetches rich, msgspec and nvidia-ml-py from the
node's package index) before the first task runs there, ahead of any perfstack the node has. So every
node runs the code this machine runs. Installed from a package index, perfstack is installed on the nodes
the same way, and nothing is shipped; ``--no-ship`` leaves the nodes' own perfstack in either case.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from perfstack.errors import CannotRunHere
from perfstack.extras import checkout

BUILD_TIMEOUT_S = 300.0
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "src")


def build_wheel(root: Path, into: Path, timeout_s: float = BUILD_TIMEOUT_S) -> Path:
    """The wheel of the checkout at ``root``, built in ``into`` (which it creates) without its
    dependencies. The build backend is the one this Python has when it is recent enough (no download),
    else pip fetches it as for any source install."""
    work = into / "source"
    for name in SOURCES:
        src = root / name
        if src.is_dir():
            shutil.copytree(src, work / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        elif src.is_file():
            work.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, work / name)
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(into / "wheel")]
    if _backend_here():
        argv.append("--no-build-isolation")
    try:
        r = subprocess.run(argv + [str(work)], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise CannotRunHere(f"building a wheel of {root} took over {timeout_s:g} s", hint=NO_SHIP) from None
    except OSError as e:
        raise CannotRunHere(f"cannot run pip to build a wheel of {root}: {e.strerror or e}", hint=NO_SHIP) from None
    wheels = sorted((into / "wheel").glob("perfstack-*.whl"))
    if r.returncode != 0 or not wheels:
        lines = [ln for ln in (r.stderr or r.stdout).strip().splitlines() if ln.strip()]
        raise CannotRunHere(f"pip could not build a wheel of {root}" + (f": {lines[-1].strip()}" if lines else ""),
                            hint=NO_SHIP)
    return wheels[-1]


NO_SHIP = "or install perfstack on every node and pass --no-ship"


def _backend_here() -> bool:
    """Whether this Python has the build backend pyproject.toml asks for (setuptools 77 or later)."""
    try:
        from importlib.metadata import version
        return int(version("setuptools").split(".")[0]) >= 77
    except Exception:  # absent, or a version that does not parse
        return False


def runtime_env(ship: bool, into: Path) -> dict[str, Any] | None:
    """The Ray job's runtime environment: this perfstack's wheel where it runs from a checkout and
    ``ship`` is on, else None (the nodes use the perfstack installed on them)."""
    root = checkout()
    if not ship or root is None:
        return None
    return {"py_modules": [str(build_wheel(root, into))]}
