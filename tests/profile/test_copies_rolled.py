"""Which concatenation rolls a window: one input a slice of a tensor of the output's own shape, told by its
Input Strides (profile/copies.py)."""

from __future__ import annotations

from perfstack.profile.copies import _rolled


def test_a_slice_of_a_tensor_of_the_outputs_shape_rolls():
    # cat([w[:, 1:], new], dim=1) with w of (64, 4096, 512): as recorded on an H200
    listed = [(64, 4095, 512), (64, 1, 512)]
    strides = [[[2097152, 512, 1], [1536, 512, 1]], []]
    assert _rolled(listed, strides, (64, 4096, 512), 1) == 4095


def test_a_tensor_of_its_own_size_does_not_roll():
    # cat([a, new], dim=1) with a contiguous (64, 4095, 512): nothing says it was sliced from a window
    listed = [(64, 4095, 512), (64, 1, 512)]
    strides = [[[4095 * 512, 512, 1], [512, 512, 1]], []]
    assert _rolled(listed, strides, (64, 4096, 512), 1) == 0


def test_a_slice_along_the_first_dimension_cannot_be_told_and_is_not_claimed():
    listed = [(4095, 512), (1, 512)]
    strides = [[[512, 1], [512, 1]], []]
    assert _rolled(listed, strides, (4096, 512), 0) == 0


def test_without_strides_nothing_rolls():
    assert _rolled([(64, 4095, 512), (64, 1, 512)], None, (64, 4096, 512), 1) == 0
