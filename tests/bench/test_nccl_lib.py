"""The direct NCCL path: finding the library torch mapped, and the arguments each op hands NCCL
(checked on a recording communicator: the buffers and per-rank counts must be the ones the
collectives benchmark's buffers and analytic results assume)."""

from __future__ import annotations

import pytest
import torch

from perfstack.bench import collective_rank, collectives, nccl_lib


def test_loaded_path_reads_the_mapped_libnccl(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f0000000000-7f0000001000 r--p 00000000 08:01 1 /usr/lib/libc.so.6\n"
        "7f0000002000-7f0000003000 r-xp 00000000 00:00 0 \n"
        "7f0000004000-7f0000005000 r-xp 00001000 08:01 2 /opt/py/site-packages/nvidia/nccl/lib/libnccl.so.2\n")
    assert nccl_lib.loaded_path(maps) == "/opt/py/site-packages/nvidia/nccl/lib/libnccl.so.2"


def test_no_libnccl_mapped_or_no_maps_file(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f0000000000-7f0000001000 r--p 00000000 08:01 1 /usr/lib/libtorch_cuda.so\n")
    assert nccl_lib.loaded_path(maps) is None
    assert nccl_lib.loaded_path(tmp_path / "absent") is None


def test_a_library_without_nccl_symbols_is_refused(tmp_path):
    import ctypes.util

    libc = ctypes.util.find_library("c")
    if libc is None:
        pytest.skip("no libc to stand in for a wrong library")
    with pytest.raises(AttributeError):
        nccl_lib.Library(libc)


class Recorder:
    """Stands in for nccl_lib.Comm: records (call, src, dst, count) per issue."""

    def __init__(self, n: int) -> None:
        self.n, self.calls, self.stream_log = n, [], []

    def __getattr__(self, name):
        if name == "stream_log":
            raise AttributeError(name)

        def record(src, dst, count, *rest):
            self.calls.append((name, src, dst, count, rest[:-1]))
            self.stream_log.append(rest[-1])
        return record


class FakeCuda:
    class cuda:  # noqa: N801 - mimics torch.cuda
        capturing, stream = False, 1234

        @classmethod
        def current_stream(cls):
            return type("S", (), {"cuda_stream": cls.stream})()

        @classmethod
        def is_current_stream_capturing(cls):
            return cls.capturing


@pytest.mark.parametrize("op", collectives.OPS)
def test_each_op_hands_nccl_its_buffers_and_per_rank_count(op):
    n, count = 4, 64
    inp = collectives.make_input(torch, op, 1, n, count)
    o = collectives.buffer_elems(op, count, n)[1]
    out = torch.empty(o) if o else None
    comm = Recorder(n)
    result = collective_rank.direct(FakeCuda, comm, op, inp, out)()
    (name, src, dst, cnt, rest), = comm.calls
    assert name == op
    assert src == inp.data_ptr()
    assert dst == (out if out is not None else inp).data_ptr()
    assert result is (out if out is not None else inp)
    # NCCL's count: elements per rank sent (all_gather), received (reduce_scatter), per peer (all_to_all),
    # else the whole buffer
    assert cnt == {"all_gather": count // n, "reduce_scatter": count // n, "all_to_all": count // n}.get(op, count)
    assert cnt * (n if op in ("reduce_scatter", "all_to_all") else 1) == inp.numel()
    if op == "broadcast":
        assert rest == (0,)  # the root


def test_a_unique_id_of_the_wrong_length_is_refused_before_nccl_sees_it():
    lib = object.__new__(nccl_lib.Library)
    with pytest.raises(nccl_lib.NcclError):
        lib.open(b"short", 2, 0)


def test_eager_calls_use_the_stream_current_at_creation_and_a_capture_its_own(monkeypatch):
    comm = Recorder(2)
    inp = collectives.make_input(torch, "all_reduce", 0, 2, 8)
    fn = collective_rank.direct(FakeCuda, comm, "all_reduce", inp, None)
    monkeypatch.setattr(FakeCuda.cuda, "stream", 99)  # the capture's side stream
    fn()
    monkeypatch.setattr(FakeCuda.cuda, "capturing", True)
    fn()
    assert comm.stream_log == [1234, 99]


class NoMemLib:
    """A library whose ncclMemAlloc is missing (NCCL before 2.19)."""

    def alloc(self, nbytes):
        raise nccl_lib.NcclError("this NCCL has no ncclMemAlloc (before 2.19)")

    def free(self, address):
        raise AssertionError("nothing was allocated")


def test_without_ncclmemalloc_the_buffers_stay_torchs_and_the_row_says_why():
    comm = Recorder(2)
    comm.lib = NoMemLib()
    inp = collectives.make_input(torch, "all_gather", 0, 2, 8)
    (a, b), held, why = collective_rank.nccl_memory(torch, comm, [inp, None])
    assert a is inp and b is None and held == [] and "ncclMemAlloc" in why
