"""Low-precision element types map to ml_dtypes as onnx maps them (issue 14 §1)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import pytest

from onnx_light import TensorProto, helper, numpy_helper

pytest.importorskip("ml_dtypes")

T = TensorProto
VALUES = {
    T.BFLOAT16: [1, -2, 3.5],
    T.FLOAT8E4M3FN: [1, -2, 448],
    T.FLOAT8E4M3FNUZ: [1, -2, 3.5],
    T.FLOAT8E5M2: [1, -2, 3.5],
    T.FLOAT8E5M2FNUZ: [1, 2, 3],
    T.UINT4: [1, 2, 15],
    T.INT4: [1, -2, 7],
    T.FLOAT4E2M1: [1, -2, 6],
    T.FLOAT8E8M0: [1, 2, 4],
    T.UINT2: [0, 1, 3],
    T.INT2: [1, -2, -1],
}


@pytest.mark.parametrize("dt", [v for _, v in onnx.TensorProto.DataType.items() if v])
def test_tensor_dtype_to_np_dtype_matches_onnx(dt: int) -> None:
    assert helper.tensor_dtype_to_np_dtype(dt) == oh.tensor_dtype_to_np_dtype(dt)


@pytest.mark.parametrize("dt", sorted(VALUES), ids=lambda d: T.DataType.Name(d))
def test_make_tensor_to_array_from_array_round_trip(dt: int) -> None:
    vals = VALUES[dt]
    ours, theirs = helper.make_tensor("x", dt, [3], vals), oh.make_tensor("x", dt, [3], vals)
    assert ours.SerializeToString() == theirs.SerializeToString()
    a, b = numpy_helper.to_array(ours), onh.to_array(theirs)
    assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    assert numpy_helper.from_array(a, "x").SerializeToString() == onh.from_array(b, "x").SerializeToString()
    again = helper.make_tensor("x", dt, [3], a)  # values given as an ml_dtypes array
    assert numpy_helper.to_array(again).tobytes() == a.tobytes()
    np.testing.assert_array_equal(a.astype(np.float32), b.astype(np.float32))
