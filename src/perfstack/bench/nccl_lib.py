"""The NCCL library torch loaded, called directly (ctypes), for timing collectives as nccl-tests does.

At small messages a collective issued through ``torch.distributed`` costs more than the NCCL call
it makes: the process group records events on both sides of the call for its watchdog, waits
between the caller's stream and its own NCCL stream, and keeps work objects, and inside a CUDA
graph those events and waits are graph nodes the GPU executes between the NCCL kernels. nccl-tests
times bare ``ncclAllReduce`` calls on one stream. To measure the same thing, the collectives
benchmark opens a communicator of its own on the library torch already mapped into the process (the
same build, so the comparison holds) and issues the calls itself on the current stream; the torch
path stays available (``--via torch``) and is what a training loop pays.

Only what the benchmark uses is bound: version, unique id, init/destroy, the five collectives and
grouped send/recv (all-to-all is a group of sends and receives, as nccl-tests and torch do it).
Every call's result is checked; an error names NCCL's own message.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

FLOAT32 = 7  # ncclFloat32 in ncclDataType_t
SUM = 0  # ncclSum in ncclRedOp_t
ID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * ID_BYTES)]


class NcclError(RuntimeError):
    pass


def loaded_path(maps: Path = Path("/proc/self/maps")) -> str | None:
    """The libnccl mapped into this process (torch loads it with its first NCCL process group), or None
    where NCCL is linked into torch itself or not loaded."""
    try:
        lines: Iterable[str] = maps.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        path = line.split(maxsplit=5)[5] if len(line.split(maxsplit=5)) == 6 else ""
        if os.path.basename(path).startswith("libnccl.so"):
            return path
    return None


class Library:
    """One loaded libnccl: ``open`` a communicator, then issue collectives on a CUDA stream handle."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lib = lib = ctypes.CDLL(path)
        vp, sz, i, ptr = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.POINTER
        sigs: dict[str, list[Any]] = {
            "ncclGetVersion": [ptr(i)],
            "ncclGetUniqueId": [ptr(UniqueId)],
            "ncclCommInitRank": [ptr(vp), i, UniqueId, i],
            "ncclCommDestroy": [vp],
            "ncclAllReduce": [vp, vp, sz, i, i, vp, vp],
            "ncclAllGather": [vp, vp, sz, i, vp, vp],
            "ncclReduceScatter": [vp, vp, sz, i, i, vp, vp],
            "ncclBroadcast": [vp, vp, sz, i, i, vp, vp],
            "ncclSend": [vp, sz, i, i, vp, vp],
            "ncclRecv": [vp, sz, i, i, vp, vp],
            "ncclGroupStart": [],
            "ncclGroupEnd": [],
        }
        for name, args in sigs.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        # ncclMemAlloc/ncclMemFree (NCCL 2.19+): memory NCCL can share with peers by handle, which a graph
        # capture then registers (see alloc). Older releases lack them: buffers stay torch's.
        self.has_mem = all(hasattr(lib, n) for n in ("ncclMemAlloc", "ncclMemFree"))
        if self.has_mem:
            lib.ncclMemAlloc.argtypes, lib.ncclMemAlloc.restype = [ptr(vp), sz], ctypes.c_int
            lib.ncclMemFree.argtypes, lib.ncclMemFree.restype = [vp], ctypes.c_int
        lib.ncclGetErrorString.argtypes, lib.ncclGetErrorString.restype = [ctypes.c_int], ctypes.c_char_p

    def check(self, result: int, what: str) -> None:
        if result != 0:
            msg = self._lib.ncclGetErrorString(result)
            raise NcclError(f"{what}: NCCL error {result} ({msg.decode(errors='replace') if msg else '?'})")

    def version(self) -> int:
        v = ctypes.c_int()
        self.check(self._lib.ncclGetVersion(ctypes.byref(v)), "ncclGetVersion")
        return v.value

    def unique_id(self) -> bytes:
        uid = UniqueId()
        self.check(self._lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        return bytes(bytearray(uid.internal))

    def alloc(self, nbytes: int) -> int:
        """Device memory from ncclMemAlloc on the current device. Collectives captured in a CUDA graph
        on such memory are registered by NCCL (NCCL_GRAPH_REGISTER, on by default): peers then read and
        write it directly instead of through NCCL's staging buffers, as nccl-tests' buffers are. Memory
        from torch's caching allocator (cudaMalloc) cannot be shared that way ("failed to IPC register
        userbuff ... type POSIX_FD" in NCCL's log): a 64 MiB all_gather on two H100s took 157 µs per
        call there against 122 µs on registered memory."""
        if not self.has_mem:
            raise NcclError("this NCCL has no ncclMemAlloc (before 2.19)")
        out = ctypes.c_void_p()
        self.check(self._lib.ncclMemAlloc(ctypes.byref(out), nbytes), "ncclMemAlloc")
        return int(out.value or 0)

    def free(self, address: int) -> None:
        self.check(self._lib.ncclMemFree(address), "ncclMemFree")

    def open(self, uid: bytes, nranks: int, rank: int) -> Comm:
        """Join the communicator every rank opens with the same ``uid`` (blocks until all have)."""
        if len(uid) != ID_BYTES:
            raise NcclError(f"a unique id has {ID_BYTES} bytes, not {len(uid)}")
        u = UniqueId()
        ctypes.memmove(u.internal, uid, ID_BYTES)
        handle = ctypes.c_void_p()
        self.check(self._lib.ncclCommInitRank(ctypes.byref(handle), nranks, u, rank), "ncclCommInitRank")
        return Comm(self, handle, nranks, rank)


class Comm:
    """A communicator; every call takes device pointers, a count of float32 elements and a stream handle."""

    def __init__(self, lib: Library, handle: ctypes.c_void_p, nranks: int, rank: int) -> None:
        self.lib, self.handle, self.n, self.rank = lib, handle, nranks, rank
        self._c = lib._lib

    def all_reduce(self, src: int, dst: int, count: int, stream: int) -> None:
        self.lib.check(self._c.ncclAllReduce(src, dst, count, FLOAT32, SUM, self.handle, stream), "ncclAllReduce")

    def all_gather(self, src: int, dst: int, count: int, stream: int) -> None:
        """``count`` elements from each rank into ``dst`` (n × count)."""
        self.lib.check(self._c.ncclAllGather(src, dst, count, FLOAT32, self.handle, stream), "ncclAllGather")

    def reduce_scatter(self, src: int, dst: int, count: int, stream: int) -> None:
        """``src`` (n × count) reduced; this rank keeps its ``count`` elements."""
        self.lib.check(self._c.ncclReduceScatter(src, dst, count, FLOAT32, SUM, self.handle, stream),
                       "ncclReduceScatter")

    def broadcast(self, src: int, dst: int, count: int, root: int, stream: int) -> None:
        self.lib.check(self._c.ncclBroadcast(src, dst, count, FLOAT32, root, self.handle, stream), "ncclBroadcast")

    def all_to_all(self, src: int, dst: int, count: int, stream: int) -> None:
        """``count`` elements per peer: block r of ``src`` goes to rank r, block r of ``dst`` comes from it."""
        step = count * 4
        self._group([(src + r * step, dst + r * step, r) for r in range(self.n)], count, stream, "all-to-all")

    def sendrecv(self, src: int, dst: int, count: int, stream: int) -> None:
        """Send to the next rank of the ring, receive from the previous one (nccl-tests' sendrecv_perf)."""
        self._group([(src, None, (self.rank + 1) % self.n), (None, dst, (self.rank - 1) % self.n)],
                    count, stream, "sendrecv")

    def _group(self, moves: list[tuple[int | None, int | None, int]], count: int, stream: int, what: str) -> None:
        c = self._c
        self.lib.check(c.ncclGroupStart(), f"{what}: ncclGroupStart")
        try:
            for send, recv, peer in moves:
                if send is not None:
                    self.lib.check(c.ncclSend(send, count, FLOAT32, peer, self.handle, stream), f"{what}: ncclSend")
                if recv is not None:
                    self.lib.check(c.ncclRecv(recv, count, FLOAT32, peer, self.handle, stream), f"{what}: ncclRecv")
        finally:
            self.lib.check(c.ncclGroupEnd(), f"{what}: ncclGroupEnd")

    def close(self) -> None:
        if self.handle:
            self.lib.check(self._c.ncclCommDestroy(self.handle), "ncclCommDestroy")
            self.handle = ctypes.c_void_p()
