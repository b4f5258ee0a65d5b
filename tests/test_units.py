"""perfstack.units: each way of writing a number of bytes keeps its promise."""

from __future__ import annotations

from perfstack.units import GB, GiB, KiB, MiB, binary_size, size_label, size_tick


def test_units_are_binary_except_gb():
    assert (KiB, MiB, GiB) == (1024, 1024**2, 1024**3) and GB == 1e9


def test_size_label_is_exact_so_two_sizes_never_share_a_name():
    assert size_label(4 * KiB) == "4KiB" and size_label(GiB) == "1GiB" and size_label(256 * MiB) == "256MiB"
    assert size_label(1000) == "1000B" and size_label(GiB + 1) == f"{GiB + 1}B"
    sizes = [4 * KiB * 4**i for i in range(10)] + [1000, 3 * MiB + 1, 1536 * KiB]
    assert len({size_label(n) for n in sizes}) == len(sizes)


def test_size_tick_rounds_for_an_axis():
    assert size_tick(GiB) == "1GiB" and size_tick(3 * MiB) == "3MiB" and size_tick(512) == "512B"
    assert size_tick(1.5 * GiB) == "1.5GiB" and size_tick(1000 * KiB) == "1000KiB"
    assert size_tick(GiB + 100 * MiB) == "1.1GiB"  # not a whole unit: three significant figures


def test_binary_size_reads_as_prose():
    assert binary_size(512 * MiB) == "512 MiB" and binary_size(1.5 * GiB) == "1.5 GiB"
    assert binary_size(64 * KiB) == "64 KiB" and binary_size(100) == "100 B" and binary_size(2 * 1024 * GiB) == "2 TiB"
