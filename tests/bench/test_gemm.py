"""GEMM arithmetic, the shapes each suite runs and the shape-search bookkeeping."""

import pytest

from perfstack.bench import gemm


def test_flops_count_one_multiply_add_as_two():
    assert gemm.flops((8192, 8192, 8192)) == 2 * 8192**3
    assert gemm.tflops((8192, 8192, 8192), 1.4e-3) == pytest.approx(785.4, abs=0.1)
    assert gemm.tflops((4096, 4096, 8192), 0.35e-3) == pytest.approx(785.3, abs=0.1)


def test_bytes_needed_per_dtype():
    assert gemm.bytes_needed("bf16", (8192, 8192, 8192)) == 3 * 8192 * 8192 * 2
    assert gemm.bytes_needed("fp32", (4096, 4096, 4096)) == 3 * 4096 * 4096 * 4
    # fp8 operands (1 byte) + the bf16 they are made from + a bf16 result
    assert gemm.bytes_needed("fp8", (1024, 1024, 1024)) == 2 * 2**20 + 4 * 2**20 + 2 * 2**20


def test_reference_shapes_and_search_plans():
    assert gemm.ref_shape("bf16", "quick") == (8192, 8192, 8192)
    assert gemm.ref_shape("fp32", "quick") == (4096, 4096, 4096)  # FP32 is ~15× slower: smaller in quick
    assert gemm.ref_shape("fp32", "full") == (8192, 8192, 8192)
    assert gemm.search_plan("bf16", "quick") and not gemm.search_plan("fp16", "quick")
    assert all(gemm.search_plan(d, "full") for d in gemm.DTYPES)
    for plan in (gemm.SEARCH_QUICK, gemm.SEARCH_FULL):
        assert len(set(plan)) == len(plan)
        assert all(4096 <= d <= 16384 and d % 16 == 0 for s in plan for d in s)
    assert (4096, 4096, 8192) == gemm.SEARCH_QUICK[0]  # the project's best shape on H100 comes first


def test_shape_labels_and_params():
    assert gemm.shape_label((8191, 8191, 8191)) == "8191x8191x8191"
    p = gemm.params("tf32", (1, 2, 3))
    assert p["matmul_precision"] == "high" and p["flops"] == 12 and (p["m"], p["n"], p["k"]) == (1, 2, 3)
    assert gemm.params("fp32", (1, 1, 1))["matmul_precision"] == "highest"
    assert gemm.params("fp8", (16, 16, 16))["fp8"] == "e4m3fn"


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_search_reuses_the_reference_and_stops_at_its_budget():
    clock = Clock()
    s = gemm.Search(budget_s=2.0, clock=clock)
    s.record((8192, 8192, 8192), [1.40e-3] * 5)  # the reference shape, already measured
    assert not s.wants((8192, 8192, 8192))
    assert s.wants((4096, 4096, 8192))
    s.record((4096, 4096, 8192), [0.30e-3] * 5)
    s.skipped[(16384, 16384, 16384)] = "no room"
    assert not s.wants((16384, 16384, 16384))
    clock.t = 2.5
    assert not s.wants((8192, 8192, 4096))
    assert s.not_tried == [(8192, 8192, 4096)]
    table = s.table()
    assert [shape for shape, _ in table] == [(4096, 4096, 8192), (8192, 8192, 8192)]
    assert s.best() == (4096, 4096, 8192)
    assert gemm.Search(1.0).best() is None


def test_search_ranks_by_median_not_by_the_luckiest_sample():
    s = gemm.Search(10.0)
    s.record((4096, 4096, 4096), [0.1e-3, 1.0e-3, 1.0e-3])  # one outlier
    s.record((8192, 8192, 8192), [1.4e-3, 1.4e-3, 1.4e-3])
    assert s.best() == (8192, 8192, 8192)
