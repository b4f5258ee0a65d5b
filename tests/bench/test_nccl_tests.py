"""Reading nccl-tests' output: both column layouts, N/A validation, and malformed lines."""

from pathlib import Path

import pytest

from perfstack.bench import nccl_tests
from perfstack.errors import InputError

FIX = Path(__file__).parents[1] / "fixtures" / "nccl_tests"


def test_current_layout_with_root_column():
    rows = nccl_tests.parse((FIX / "all_reduce_perf_2gpu.txt").read_text())
    assert [r.size for r in rows] == [1024, 4096, 1048576, 1073741824]
    first, last = rows[0], rows[-1]
    assert (first.count, first.dtype, first.time_us, first.busbw, first.wrong) == (256, "float", 9.12, 0.11, 0)
    assert first.time_us_in_place == 8.95
    assert last.time_us == 3350.1 and last.busbw == 320.51 and last.wrong is None and last.busbw_in_place == 321.22


def test_old_layout_without_root_column():
    rows = nccl_tests.parse((FIX / "alltoall_perf_oldlayout.txt").read_text())
    assert [(r.size, r.time_us, r.algbw, r.wrong) for r in rows] == [(1024, 5.45, 0.19, 0), (4096, 5.80, 0.71, 0)]


def test_noise_and_an_empty_log_give_no_rows():
    assert nccl_tests.parse("") == []
    assert nccl_tests.parse("NCCL WARN something\n12 apples\n#  1024 256 float sum -1 1 2 3 0 1 2 3 0\n") == []


@pytest.mark.parametrize("line", [
    "1024 256 float sum -1 9.1 0.1 0.1 0 8.9 0.1",  # truncated
    "1024 256 float sum -1 fast 0.1 0.1 0 8.9 0.1 0.1 0",
    "1024 256 float sum -1 nan 0.1 0.1 0 8.9 0.1 0.1 0",
    "1024 256 float sum -1 -3 0.1 0.1 0 8.9 0.1 0.1 0",
])
def test_malformed_rows_are_input_errors_naming_the_line(line):
    with pytest.raises(InputError, match="line 2"):
        nccl_tests.parse("# header\n" + line + "\n")


def test_every_binary_maps_to_a_collective_the_benchmark_runs():
    from perfstack.bench import collectives
    assert set(nccl_tests.OPS.values()) == set(collectives.OPS)


def test_cycles_fold_into_one_figure_per_size_with_their_spread():
    # -N 3: the sweep printed three times; figures are medians over cycles, ranges their extremes
    lines = ["# nccl-tests version 2.19.6 nccl-headers=22803 nccl-library=22803"]
    for t, tin, wrong in ((57.1, 1.2, "0"), (55.0, 0.9, "0"), (60.2, 1.5, "2")):
        lines.append(f"67108864 16777216 float none -1 {t} 1.0 1175.0 {wrong} {tin} 1.0 1.0 0")
        lines.append("1024 256 float none -1 11.0 0.1 0.1 N/A 10.0 0.1 0.1 N/A")
    got = nccl_tests.by_size(nccl_tests.parse("\n".join(lines)))
    big, small = got[67108864], got[1024]
    assert (big.cycles, big.time_us, big.time_us_range, big.wrong) == (3, 57.1, (55.0, 60.2), 2)
    assert (big.time_us_in_place, big.time_us_in_place_range) == (1.2, (0.9, 1.5))
    assert small.wrong is None and small.time_us == 11.0 and small.time_us_range == (11.0, 11.0)
    assert nccl_tests.by_size([]) == {}
