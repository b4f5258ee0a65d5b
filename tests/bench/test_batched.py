"""Batches of back-to-back calls: how long a batch is, the per-call arithmetic, the host-bound test,
and the batch runner (eager here; graph capture is exercised on the GPU)."""

import pytest

from perfstack.bench import batched as b


@pytest.mark.parametrize("estimate,ops", [(5e-6, 200), (1e-3, 1), (3e-3, 1), (3e-4, 4), (1e-9, b.MAX_BATCH),
                                          (0.0, b.MAX_BATCH), (float("nan"), b.MAX_BATCH)])
def test_ops_per_batch_reaches_the_target_duration(estimate, ops):
    assert b.ops_per_batch(estimate) == ops


def test_ops_per_batch_honours_its_bounds():
    assert b.ops_per_batch(1e-6, target_s=1e-2, max_ops=50) == 50
    assert b.ops_per_batch(1e-6, target_s=1e-5) == 10


def test_per_op_divides_each_batch():
    assert b.per_op([2e-3, 4e-3], 200) == pytest.approx([1e-5, 2e-5])


@pytest.mark.parametrize("issue,gpu,bound", [(9e-6, 10e-6, True), (20e-6, 10e-6, True), (2e-6, 10e-6, False),
                                             (None, 10e-6, False), (1e-6, 0.0, False)])
def test_host_bound(issue, gpu, bound):
    assert b.host_bound(issue, gpu) is bound


def test_eager_batch_calls_back_to_back_and_times_the_issue():
    calls = []
    batch = b.Batch(None, lambda: calls.append(1), 7, graph=True)  # no torch: graph impossible, eager
    assert batch.mode == "eager"
    batch()
    assert len(calls) == 7
    ticks = iter([10.0, 10.5])
    syncs = []
    assert batch.issue_seconds(lambda: syncs.append(1), clock=lambda: next(ticks)) == pytest.approx(0.5)
    assert len(calls) == 14 and len(syncs) == 2


class _NoGraphs:
    """A torch whose graph capture raises, as on a build or op that cannot be captured."""
    class cuda:
        @staticmethod
        def CUDAGraph():
            raise RuntimeError("capture unsupported")

        @staticmethod
        def synchronize():
            pass


def test_failed_capture_falls_back_to_eager_with_the_reason():
    batch = b.Batch(_NoGraphs, lambda: None, 3, graph=True)
    assert batch.mode == "eager" and "capture unsupported" in batch.why_eager
