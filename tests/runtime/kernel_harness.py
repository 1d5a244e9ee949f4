"""Test-only harness that calls registered kernels directly on the ONNX backend node cases.

It decodes with the `onnx` package (a test reference) and bypasses the session, so kernel
families can be checked before and independently of ``InferenceSession``. The conformance
test of the runtime proper (``test_conformance.py``) goes through our codec and session.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np


@functools.lru_cache(maxsize=1)
def node_cases() -> list[Any]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(collect_testcases())


def default_opset(model: Any) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 21


def attr_value(attr: Any) -> Any:
    from onnx import helper, numpy_helper

    v = helper.get_attribute_value(attr)
    if isinstance(v, bytes):
        return v.decode("utf-8")
    if attr.type == attr.STRINGS:
        return [s.decode("utf-8") for s in v]
    if attr.type == attr.TENSOR:
        return numpy_helper.to_array(v)
    return v


def call_kernel(node: Any, opset: int, inputs: list[Any]) -> tuple[Any, ...]:
    """Runs one onnx NodeProto through our registered kernel."""
    from onnx_light.runtime import kernels  # noqa: F401  (registers the kernels)
    from onnx_light.runtime._registry import lookup_kernel

    info = lookup_kernel(node.domain, node.op_type, opset)
    if info is None:
        raise NotImplementedError(f"{node.domain}::{node.op_type} opset {opset}")
    kwargs = {a.name: attr_value(a) for a in node.attribute}
    if info.wants_num_outputs:
        kwargs["_num_outputs"] = len(node.output)
    feeds = iter(inputs)
    args = [None if name == "" else next(feeds) for name in node.input]
    out = info.fn(*args, **kwargs)
    return out if isinstance(out, tuple) else (out,)


def cases_for(op_types: set[str]) -> list[Any]:
    """Backend node cases whose model is one node of an op in ``op_types``."""
    out = []
    for case in node_cases():
        nodes = case.model.graph.node
        if len(nodes) == 1 and nodes[0].op_type in op_types and nodes[0].domain in ("", "ai.onnx"):
            out.append(case)
    return out


def check_case(case: Any) -> None:
    """Runs every data set of a single-node case and compares with the expected outputs."""
    node = case.model.graph.node[0]
    opset = default_opset(case.model)
    for inputs, expected in case.data_sets:
        got = call_kernel(node, opset, list(inputs))
        present = [o for o in node.output]
        got_map = dict(zip(present, got))
        for name, exp in zip([o for o in present if o], expected):
            g = np.asarray(got_map[name])
            e = np.asarray(exp)
            assert g.shape == e.shape, f"{case.name}: output {name} shape {g.shape} != {e.shape}"
            if e.dtype.kind in "fc":
                tol = (1e-2, 1e-3) if e.dtype.itemsize <= 2 else (case.rtol or 1e-3, case.atol or 1e-7)
                np.testing.assert_allclose(g.astype(e.dtype), e, rtol=tol[0], atol=tol[1], err_msg=case.name)
            else:
                assert g.dtype == e.dtype, f"{case.name}: dtype {g.dtype} != {e.dtype}"
                np.testing.assert_array_equal(g, e, err_msg=case.name)


def backend_params(op_types: set[str], xfail: dict[str, str]) -> list[Any]:
    """``pytest.param`` per backend case of ``op_types``, xfail where ``xfail`` names it."""
    import pytest

    return [
        pytest.param(c, id=c.name, marks=[pytest.mark.xfail(reason=xfail[c.name])] if c.name in xfail else [])
        for c in cases_for(op_types)
    ]


def stale_exclusions(xfail: dict[str, str], *param_lists: list[Any]) -> list[str]:
    """Exclusion entries that name no test any more (they must be removed)."""
    ids = {p.id for params in param_lists for p in params}
    return sorted(set(xfail) - ids)
