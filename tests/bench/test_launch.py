"""Launch-overhead arithmetic and the choice of clock."""

import pytest

from perfstack.bench import launch


def test_per_kernel_microseconds():
    assert launch.per_kernel_us(2e-3, 1000) == pytest.approx(2.0)


def test_the_larger_clock_is_the_launch_bound_cost():
    gpu, host = [1.0e-3, 1.1e-3, 1.2e-3], [5.0e-3, 5.2e-3, 5.1e-3]
    assert launch.launch_bound(gpu, host) == ("host", host)
    assert launch.launch_bound(host, gpu) == ("gpu", host)


def test_references():
    assert launch.GRAPH_REF_US == 2.0 and launch.EAGER_REF_US == 20.0
    assert "book" in launch.EAGER_REF
