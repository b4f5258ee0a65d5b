import os

import pytest

from perfstack.bench import BenchContext
from perfstack.bench.host import copy_bytes, host, node_cpus, triad_bytes
from perfstack.bench.storage import files_to_read, storage
from perfstack.errors import UsageError
from perfstack.model import Fact, Facts


def test_byte_accounting():
    assert copy_bytes(1000, 8) == 16000
    assert triad_bytes(1000, 8) == 40000


def test_node_cpus_keeps_only_allowed_cpus_with_nodes():
    allowed = sorted(os.sched_getaffinity(0))
    facts = Facts({"numa.nodes": Fact("numa.nodes", [{"id": 0, "cpus": allowed}, {"id": 1, "cpus": []},
                                                     {"id": 2, "cpus": [10_000]}])})
    assert node_cpus(BenchContext("quick", facts)) == {0: allowed}
    assert node_cpus(BenchContext("quick", Facts())) == {0: allowed}


def test_host_bench_measures_real_bandwidth(monkeypatch):
    monkeypatch.setattr("perfstack.bench.host.COPY_BYTES_QUICK", 32 << 20)
    out = {m.name: m for m in host(BenchContext("quick", Facts()))}
    assert out["host.copy"].value > 0.1 and out["host.copy"].unit == "GB/s"
    assert out["host.gemm.fp32"].value > 0.1 and len(out["host.copy"].samples) >= 5


def test_storage_reads_a_real_file(tmp_path):
    f = tmp_path / "shard.bin"
    f.write_bytes(os.urandom(8 << 20))
    (m,) = storage(BenchContext("quick", Facts(), storage_path=str(tmp_path)))
    assert m.params["bytes"] == 8 << 20 and m.value > 0
    assert any("too little" in n for n in m.notes)


def test_storage_bad_paths(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        files_to_read(str(tmp_path / "nope"))
    (tmp_path / "empty").touch()
    with pytest.raises(UsageError, match="no readable"):
        files_to_read(str(tmp_path))
