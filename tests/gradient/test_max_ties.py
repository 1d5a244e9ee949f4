"""Max over tied cells: forward and reverse mode take the same (first) cell, as torch does.

At a tie the max is not differentiable; the rules pick one one-sided derivative, the first
cell in raster order (onnxruntime's and torch's indices). Forward mode must pick the same
one as reverse, or <J^T u, t> != <u, J t>.
"""

from __future__ import annotations

import numpy as np
import pytest

import onnx_light as ol

h = ol.helper


def _planes(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0], x.shape[1], -1)


@pytest.mark.parametrize("shape", [(2, 3, 2, 2), (1, 2, 5), (2, 1, 2, 2, 2)])
def test_global_max_pool_ties_forward_matches_reverse(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2, size=shape).astype(np.float64)  # 0/1: every plane tied
    t = rng.standard_normal(shape)
    u = rng.standard_normal((*shape[:2], *[1] * (len(shape) - 2)))
    nodes = [h.make_node("GlobalMaxPool", ["x"], ["y"])]
    vi = [h.make_tensor_value_info("x", 11, list(shape))]
    fwd = ol.TangentOfNodes(nodes, ["x"], ["y"], value_info=vi)
    (jt,) = ol.runtime.InferenceSession(fwd).run(None, {"x": x, "fwd_x": t})
    bwd = ol.GradientOfNodes(nodes, ["x"], "y", value_info=vi)
    (gx,) = ol.runtime.InferenceSession(bwd).run(None, {"x": x, bwd.input[-1]: u})
    first = _planes(x).argmax(axis=-1)  # numpy: the first maximum
    want = np.take_along_axis(_planes(t), first[..., None], -1).reshape(jt.shape)
    np.testing.assert_array_equal(jt, want)
    assert abs(float(np.sum(gx * t)) - float(np.sum(u * jt))) < 1e-12
