"""Where a trace's text comes from: a regular file, or a gzip stream as it decompresses, read in
pieces of at most PIECE bytes and refused past the size limit for one trace (``max_trace_bytes``), so
that a sparse file, a gzip bomb or a FIFO costs neither memory nor time. ``tracefile`` cuts the
pieces into batches of events."""

from __future__ import annotations

import io
import os
import stat
import zlib
from pathlib import Path
from typing import Any, Generator, Iterator

from perfstack.errors import InputError

# Bytes of text read at a time, and the least a batch holds (but the last): small enough that a
# batch's events are still in the CPU's cache when they are built (1 GB trace, 2-core EPYC: load()
# took about 25% less CPU time with 64 KiB than with 4 MiB).
PIECE = 64 << 10
MAX_TRACE_GIB = 2.0  # the largest trace text read, after decompression (see max_trace_bytes)
LIMIT_ENV = "PERFSTACK_MAX_TRACE_GIB"


def max_trace_bytes() -> int:
    """The largest trace text read, after decompression: MAX_TRACE_GIB GiB unless the environment
    sets PERFSTACK_MAX_TRACE_GIB. It bounds the time a file from elsewhere can take (a 4 MB gzip
    bomb expands to 4 GiB); memory does not grow with the text, only with the events kept."""
    value = os.environ.get(LIMIT_ENV, "")
    try:
        gib = float(value) if value else MAX_TRACE_GIB
    except ValueError:
        raise InputError(f"{LIMIT_ENV}={value!r} is not a number of GiB") from None
    return int(gib * (1 << 30))


def _too_large(p: Path, what: str, limit: int) -> InputError:
    return InputError(f"trace file {p} {what} more than {limit / (1 << 30):.3g} GiB, the limit for one trace",
                      hint=f"profile fewer steps per trace (schedule active=...), or raise the limit with "
                           f"{LIMIT_ENV}=GIB")


def _open_regular(p: Path) -> tuple[io.FileIO, os.stat_result]:
    """The file opened for reading, refused unless it is a regular file: a FIFO would block the
    open itself and a device (/dev/zero) never ends. O_NONBLOCK lets a FIFO be opened to be refused."""
    fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"trace file {p} is not a regular file (a pipe, socket or device)",
                             hint="save the trace to a file first")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=0), st
    except BaseException:
        os.close(fd)
        raise


def nothing() -> Generator[bytes, None, None]:
    yield from ()


def pieces(p: Path, warnings: list[str]) -> Generator[bytes, None, None]:
    """The file's text a piece at a time, decompressed if it is gzip; only regular files, at most
    max_trace_bytes() of text."""
    limit = max_trace_bytes()
    try:
        f, st = _open_regular(p)
        with f:
            magic = f.read(2)
            f.seek(0)
            if magic == b"\x1f\x8b":
                yield from _split(_gunzip(p, f, warnings, limit))
                return
            if p.name.endswith(".gz"):
                raise InputError(f"trace file {p} ends in .gz but is not gzip-compressed",
                                 hint="rename it to .json if it is plain JSON, or re-export the trace")
            size = st.st_size
            if size > limit:
                raise _too_large(p, "holds", limit)
            left = size
            while left > 0:
                piece = f.read(min(PIECE, left))
                if not piece:
                    break
                left -= len(piece)
                yield piece
            # Bytes appended while it was read are not part of what was measured: left out.
            if not left and f.read(1):
                warnings.append(f"{p.name} grew while it was read; analysed its first {size} bytes")
    except FileNotFoundError:
        raise InputError(f"trace file {p} does not exist") from None
    except IsADirectoryError:
        raise InputError(f"{p} is a directory, not a trace file",
                         hint="give the .pt.trace.json(.gz) files inside it, e.g. DIR/*.pt.trace.json*") from None
    except MemoryError:
        raise InputError(f"trace file {p} does not fit in memory") from None
    except OSError as e:
        raise InputError(f"cannot read trace file {p}: {e.strerror or e}") from None


def _inflate(f: io.FileIO, state: dict[str, Any]) -> Iterator[bytes]:
    """The decompressed chunks of a gzip file (at most 4 MiB each: zlib's output buffer for a
    chunk grows to several times its size, so small chunks keep a bomb's count cheap); concatenated members are read
    in turn, bytes after the last member are ignored; ``state["problem"]`` says why the stream
    stopped early (corrupt, truncated), None when it ended cleanly."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending = b""
    state["problem"] = None
    try:
        while True:
            if not pending:
                pending = f.read(1 << 20)
                if not pending:
                    break
            if d.eof:  # another member, or padding after the last one
                if len(pending) < 2:
                    more = f.read(1 << 20)
                    if more:
                        pending += more
                        continue
                if not pending.startswith(b"\x1f\x8b"):
                    break
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            chunk = d.decompress(pending, 1 << 22)
            pending = d.unused_data if d.eof else d.unconsumed_tail
            if chunk:
                yield chunk
    except zlib.error as e:
        state["problem"] = f"corrupt ({e})"
    if state["problem"] is None and not d.eof:
        state["problem"] = "truncated"


def _gunzip(p: Path, f: io.FileIO, warnings: list[str], limit: int) -> Iterator[bytes]:
    """The decompressed text as it comes; refused as soon as it passes the limit, so a
    decompression bomb costs one chunk of memory. A cut or corrupt stream keeps what came before."""
    state: dict[str, Any] = {}
    size = 0
    for chunk in _inflate(f, state):
        size += len(chunk)
        if size > limit:
            raise _too_large(p, "decompresses to", limit)
        yield chunk
    problem = state["problem"]
    if problem is not None:
        if not size:
            what = "truncated gzip file with nothing readable" if problem == "truncated" \
                else f"corrupt gzip file ({problem[9:-1]})"
            raise InputError(f"trace file {p} is a {what}") from None
        warnings.append(f"{p.name}: gzip stream is {problem}; analysed the part that was readable")


def _split(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The chunks in pieces of at most PIECE bytes."""
    for chunk in chunks:
        if len(chunk) <= PIECE:
            yield chunk
        else:
            with memoryview(chunk) as mv:
                for i in range(0, len(chunk), PIECE):
                    yield bytes(mv[i:i + PIECE])
