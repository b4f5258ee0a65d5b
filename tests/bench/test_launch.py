"""Launch-overhead arithmetic and the choice of clock."""

import pytest

from perfstack.bench import launch


def test_per_kernel_microseconds():
    assert launch.per_kernel_us(2e-3, 1000) == pytest.approx(2.0)


def test_the_larger_clock_is_the_launch_bound_cost():
    gpu, host = [1.0e-3, 1.1e-3, 1.2e-3], [5.0e-3, 5.2e-3, 5.1e-3]
    assert launch.launch_bound(gpu, host) == ("host", host)
    assert launch.launch_bound(host, gpu) == ("gpu", host)


def _figure(name, us_per_kernel, how):
    batch = [us_per_kernel * launch.KERNELS / 1e6] * 5  # one batch of KERNELS launches, in seconds
    return launch._figure(name, batch, [b * 0.9 for b in batch], how)


def test_references():
    # Each figure is judged against its own reference, the eager one citing the book.
    eager, graph = _figure("launch.eager", 30.0, "eager"), _figure("launch.graph", 1.5, "one CUDA graph replay")
    launch.judge([eager, graph])
    assert (eager.peak, eager.verdict) == (20.0, "below expected") and "the book" in eager.peak_source
    assert (graph.peak, graph.verdict) == (2.0, "good") and "CUDA graph" in graph.peak_source
    assert graph.notes[0].startswith("a graph replay costs 5% of eager per kernel")
    slow = _figure("launch.graph", 5.0, "one CUDA graph replay")
    launch.judge([slow])
    assert slow.verdict == "low" and slow.notes[0].startswith("gpu time is the larger")  # no eager: no ratio
