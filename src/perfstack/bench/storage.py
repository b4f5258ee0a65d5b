"""Storage: sequential read throughput of a file or directory the user names.

Reads go around the page cache with O_DIRECT where the filesystem allows it (aligned buffers
from an anonymous mmap, which is page-aligned); elsewhere (tmpfs, some network and overlay
filesystems) reads are buffered and the figure carries a warning, since a warm page cache
reports memory speed rather than the disk's.
"""

from __future__ import annotations

import mmap
import os
import time
from pathlib import Path

from perfstack.bench import BenchContext, Suite, benchmark
from perfstack.bench.timing import summarize
from perfstack.bench.verdict import judge
from perfstack.errors import UsageError
from perfstack.model import Measurement

BLOCK = 4 << 20  # 4 MiB requests: large enough for NVMe queues, aligned for O_DIRECT
BUDGET_BYTES: dict[Suite, int] = {"quick": 2 << 30, "full": 16 << 30}
BUDGET_S: dict[Suite, float] = {"quick": 10.0, "full": 60.0}


def files_to_read(path: str) -> list[Path]:
    p = Path(path)
    if not p.exists():
        raise UsageError(f"storage path {path} does not exist", hint="give a file or directory to read")
    if p.is_file():
        files = [p]
    else:
        files = sorted((f for f in p.rglob("*") if f.is_file() and not f.is_symlink()), key=lambda f: str(f))
    readable = [f for f in files if os.access(f, os.R_OK) and f.stat().st_size > 0]
    if not readable:
        raise UsageError(f"storage path {path} has no readable, non-empty file",
                         hint="point at a dataset shard or checkpoint you have read access to")
    return readable


def _open(f: Path) -> tuple[int, bool]:
    """(fd, direct): O_DIRECT when the filesystem accepts it."""
    flag = getattr(os, "O_DIRECT", 0)
    if flag:
        try:
            return os.open(f, os.O_RDONLY | flag), True
        except OSError:
            pass
    return os.open(f, os.O_RDONLY), False


def _read_file(f: Path, buf: mmap.mmap, limit: int, deadline: float) -> tuple[int, bool, list[float]]:
    """Bytes read, whether O_DIRECT held, and per-request seconds."""
    fd, direct = _open(f)
    total, times = 0, []
    try:
        while total < limit and time.perf_counter() < deadline:
            t0 = time.perf_counter()
            try:
                n = os.readv(fd, [buf])
            except OSError:  # O_DIRECT refused at read time (alignment rules of this filesystem)
                if not direct:
                    raise
                os.close(fd)
                fd, direct = os.open(f, os.O_RDONLY), False
                os.lseek(fd, total, os.SEEK_SET)
                continue
            times.append(time.perf_counter() - t0)
            if n <= 0:
                break
            total += n
    finally:
        os.close(fd)
    return total, direct, times


@benchmark("storage", needs_cuda=False, host_bound=True, in_quick=False, doc="""Sequential read throughput of --path (a file,
           or every file under a directory), with O_DIRECT where supported; up to 2 GiB (quick) or 16 GiB
           (full) within 10 s / 60 s.""")
def storage(ctx: BenchContext) -> list[Measurement]:
    files = files_to_read(ctx.storage_path or "")
    buf = mmap.mmap(-1, BLOCK)
    limit, deadline = BUDGET_BYTES[ctx.suite], time.perf_counter() + BUDGET_S[ctx.suite]
    total, all_direct = 0, True
    samples: list[float] = []
    t0 = time.perf_counter()
    for f in files:
        if total >= limit or time.perf_counter() >= deadline:
            break
        n, direct, times = _read_file(f, buf, limit - total, deadline)
        total, all_direct, samples = total + n, all_direct and direct, samples + times
    elapsed = time.perf_counter() - t0
    notes = [] if all_direct else ["buffered reads (O_DIRECT not supported here): the page cache may inflate this "
                                   "figure; a file read recently is served from RAM"]
    if total < 256 << 20:
        notes.append(f"only {total / 2**20:.0f} MiB read: too little for a stable figure")
    m = Measurement(bench="storage", name="storage.read", value=total / elapsed / 1e9 if elapsed > 0 else None,
                    unit="GB/s", samples=samples, stats=summarize(samples), notes=notes,
                    params={"path": ctx.storage_path, "bytes": total, "files": len(files), "direct": all_direct,
                            "request_bytes": BLOCK})
    return [judge(m, None, "", None)]
