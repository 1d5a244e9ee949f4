"""The pass's constant caches (``ctx.const``, ``ctx.ints``, ``ctx.shape_of``): a cache hit must
return a value equal in dtype and bits to what was asked, never merely an equal number."""

from __future__ import annotations

from typing import Any

import numpy as np

import onnx_light as ol
from onnx_light import helper, numpy_helper


def _constants(fn: ol.FunctionProto) -> dict[str, np.ndarray]:
    return {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in fn.node if n.op_type == "Constant"}


def _grad_with(asked: list[tuple[Any, int | None]]) -> tuple[ol.FunctionProto, list[str]]:
    """The backward function of ``y = Probe(x)``, whose rule asks ``ctx.const`` for each of
    ``asked`` (value, dtype or None for x's) and returns dy plus a product of them all."""
    reg = ol.DefaultGradRegistry()
    names: list[str] = []

    @ol.RegisterGradientFunction("my.ops", "Probe", registry=reg)
    def probe_grad(ctx, dy):  # type: ignore[no-untyped-def]
        out = dy
        for value, dtype in asked:
            c = ctx.const(value, like=None if dtype else ctx.inputs[0], dtype=dtype)
            names.append(c)
            out = ctx.op.Add(out, ctx.op.Cast(c, to=ctx.dtype(ctx.inputs[0])))
        return out

    nodes = [helper.make_node("Probe", ["x"], ["y"], domain="my.ops")]
    info = [helper.make_tensor_value_info("x", ol.TensorProto.FLOAT, [3])]
    fn = ol.GradientOfNodes(nodes, xs=["x"], y="y", registry=reg, value_info=info, optimize=False)
    return fn, names


def test_signed_zeros_are_two_constants() -> None:
    """0.0 == -0.0 (and they hash alike), but 1 / x tells them apart: two constants."""
    fn, (pos, neg, pos_again) = _grad_with([(0.0, None), (-0.0, None), (0.0, None)])
    values = _constants(fn)
    assert pos == pos_again and pos != neg
    assert not np.signbit(values[pos]) and np.signbit(values[neg])


def test_equal_numbers_of_other_dtypes_are_other_constants() -> None:
    """1 as float32 (x's type), float64 and int64, and True: each its own dtype."""
    fn, names = _grad_with(
        [(1, None), (1.0, None), (1.0, ol.TensorProto.DOUBLE), (1, ol.TensorProto.INT64), (True, None)]
    )
    values = _constants(fn)
    assert names[0] == names[1] == names[4]  # all float32 1.0: one constant
    assert len({names[0], names[2], names[3]}) == 3
    assert [values[n].dtype for n in names[:4]] == [np.float32, np.float32, np.float64, np.int64]
    assert all(values[n] == 1 for n in names)


def test_nan_and_large_integers_keep_their_values() -> None:
    """A float key by its bits: nan is found again; 2**53 + 1 as int64 is not rounded."""
    fn, names = _grad_with([(float("nan"), None), (float("nan"), None), (2**53 + 1, ol.TensorProto.INT64)])
    values = _constants(fn)
    assert names[0] == names[1] and np.isnan(values[names[0]])
    assert int(values[names[2]]) == 2**53 + 1
