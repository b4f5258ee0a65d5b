"""HBM byte counting and buffer sizing."""

import pytest

from perfstack.bench import _gpu, hbm

GIB, MIB = hbm.GIB, hbm.MIB


def test_a_copy_counts_read_plus_write():
    assert hbm.bytes_moved("copy", GIB) == 2 * GIB
    assert hbm.bytes_moved("read", GIB) == GIB
    assert hbm.bytes_moved("write", GIB) == GIB
    # 2 × 4 GiB in 2.9 ms is 2.96 TB/s, the project's H100 copy figure
    assert _gpu.gbps(hbm.bytes_moved("copy", 4 * GIB), 2.9e-3) == pytest.approx(2962, abs=1)


def test_buffer_size_is_the_largest_pair_that_fits():
    assert hbm.buffer_size(80 * GIB) == 4 * GIB
    assert hbm.buffer_size(6 * GIB) == 2 * GIB
    assert hbm.buffer_size(80 * GIB, cap=512 * MIB) == 512 * MIB
    assert hbm.buffer_size(300 * MIB) is None
    assert hbm.buffer_size(None) == 4 * GIB


def test_flush_only_when_the_buffer_is_not_far_beyond_l2():
    l2 = 50_000_000
    assert not hbm.needs_flush(4 * GIB, l2)
    assert hbm.needs_flush(128 * MIB, l2)
