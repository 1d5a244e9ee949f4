"""ops._window on spatial dims only known at run time (the gradient pass's symbolic shapes).

Expected values are the spec's formulas worked by hand: SAME_* total per axis
``(ceil(n / s) - 1) * s + (k - 1) * d + 1 - n`` (``(k - 1) * d`` with stride 1 whatever n),
an odd cell at the end for SAME_UPPER; ConvTranspose SAME_* total
``(k - 1) * d + 1 + output_padding - s`` whatever n.
"""

from __future__ import annotations

import pytest

from onnx_light.onnx_core import ops


def test_runtime_pad_axes() -> None:
    assert ops.runtime_pad_axes([None, 7, "h"], [2, 2, 1], "SAME_UPPER") == [0]
    assert ops.runtime_pad_axes(["n", "m"], [2, 3], "SAME_LOWER") == [0, 1]
    assert ops.runtime_pad_axes([None, None], [2, 2], "NOTSET") == []
    assert ops.runtime_pad_axes([None, None], [2, 2], "VALID") == []
    assert ops.runtime_pad_axes([None], None, "SAME_UPPER") == []


def test_same_stride_above_one_on_unknown_axis_is_refused() -> None:
    with pytest.raises(ops.RunTimePads, match=r"axes \[0\]"):
        ops.window([None, 7], [3, 3], strides=[2, 2], auto_pad="SAME_UPPER")


def test_same_stride_one_on_symbolic_axes() -> None:
    geo = ops.window(["n", None], [3, 2], dilations=[2, 1], auto_pad="SAME_LOWER")
    # totals 4 and 1; SAME_LOWER puts the odd cell at the start
    assert (geo.begin, geo.end) == ([2, 1], [2, 0])
    assert geo.size == [None, None] and geo.out == [None, None]
    assert not geo.is_static
    with pytest.raises(ops.RunTimePads):
        geo.counts()
    with pytest.raises(ops.RunTimePads):
        geo.overhangs()


def test_explicit_pads_and_valid_on_unknown_axes() -> None:
    geo = ops.window([None, 6], [3, 2], strides=[2, 2], pads=[1, 0, 2, 0])
    assert (geo.begin, geo.end) == ([1, 0], [2, 0])
    assert geo.out == [None, 3]  # floor((6 - 2) / 2) + 1
    valid = ops.window([None, None], [2, 2], [2, 2], None, None, "VALID")
    assert (valid.begin, valid.end, valid.out) == ([0, 0], [0, 0], [None, None])


def test_static_window_is_static() -> None:
    geo = ops.window([7], [3], [2], auto_pad="SAME_UPPER")
    # out = ceil(7 / 2) = 4, total = 3 * 2 + 3 - 7 = 2
    assert (geo.begin, geo.end, geo.out) == ([1], [1], [4])
    assert geo.is_static


def test_transpose_same_on_symbolic_axis() -> None:
    tw = ops.transpose_window([None, 5], [3, 3], [2, 2], None, None, "SAME_UPPER", [1, 0])
    # totals 3 + 1 - 2 = 2 and 3 + 0 - 2 = 1 (the odd cell at the end)
    assert (tw.begin, tw.end) == ([1, 0], [1, 1])
    assert tw.full == [None, 11]  # (5 - 1) * 2 + 3
    assert tw.out == [None, 10]  # 5 * 2
    assert tw.output_padding == [1, 0]
    assert not tw.is_static
    static = ops.transpose_window([4, 5], [3, 3], [2, 2], None, None, "SAME_UPPER", [1, 0])
    assert (static.begin, static.end, static.out) == ([1, 0], [1, 1], [8, 10])
    assert static.is_static


def test_transpose_explicit_pads_on_symbolic_axis() -> None:
    tw = ops.transpose_window(["h"], [4], [3], None, [1, 2], "NOTSET", [1])
    assert (tw.begin, tw.end, tw.out, tw.output_padding) == ([1], [2], [None], [1])


def test_transpose_output_shape_on_unknown_axis_is_refused() -> None:
    with pytest.raises(ops.RunTimePads, match="output_shape"):
        ops.transpose_window([None], [3], [2], output_shape=[8])
