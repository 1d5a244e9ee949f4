"""Forward-mode (JVP) rules: every row of the reverse rule tables, forward against reverse.

For each row, ``<J^T u, t> = <u, J t>`` in float64 (forward rule vs reverse rule) and the
forward rule against central finite differences (see ``gradcheck.check_tangent``).
"""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import (
    Case,
    _cast,
    check_forward_over_reverse,
    check_tangent,
    check_tangent_in_onnxruntime,
    tangent,
    tangent_feeds,
)
from test_rule_coverage import CASES

import onnx_light as ol

REGISTRY = ol.DefaultGradRegistry()


#: ops whose forward rule is not written yet: their rows must fail with a clear GradientError
NOT_YET: set[str] = set()
# rows whose op has a forward rule that refuses these attributes
NOT_YET_ROWS: tuple[str, ...] = ()


def _param(case: Case, i: int) -> object:
    ops = {n.op_type for n in case.nodes}
    marks = []
    if ops & NOT_YET or (NOT_YET_ROWS and case.name.startswith(NOT_YET_ROWS)):
        marks.append(pytest.mark.xfail(raises=ol.GradientError, strict=True, reason="forward rule not written yet"))
    return pytest.param(case, id=f"{case.name}-{i}", marks=marks)


ROWS = CASES  # every Case of every reverse-rule table, each once


@pytest.mark.parametrize("case", [_param(c, i) for i, c in enumerate(ROWS)])
def test_forward_rule(case: Case) -> None:
    if "-f32-" in case.name:
        # the float32 stash_type rows compute their statistics in float32 in both directions
        check_tangent(case, adjoint_rtol=1e-6, h=1e-3)
    else:
        check_tangent(case)


@pytest.mark.parametrize("case", [_param(c, i) for i, c in enumerate(ROWS)])
def test_forward_rule_output_has_rules_both_ways(case: Case) -> None:
    """Closure: every op a forward rule emits has a reverse and a forward rule, so
    forward(reverse(f)), reverse(forward(f)) and forward(forward(f)) all work."""
    _, fwd = tangent(case)
    for node in fwd.node:
        rule = REGISTRY.lookup(node.domain, node.op_type, 21)
        assert rule is not None, f"{case.name}: the tangent graph uses {node.op_type}, which has no rule"
        assert rule.no_grad or rule.jvp is not None, f"{case.name}: {node.op_type} has no forward rule"


#: ops whose forward rules emit control flow: their tangent graphs also run in onnxruntime
CONTROL_FLOW = {"If", "Loop", "Scan", "RNN", "GRU", "LSTM"}


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=f"{c.name}-{i}") for i, c in enumerate(ROWS) if CONTROL_FLOW & {n.op_type for n in c.nodes}],
)
def test_control_flow_tangent_runs_in_onnxruntime(case: Case) -> None:
    check_tangent_in_onnxruntime(case)


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=f"{c.name}-{i}") for i, c in enumerate(ROWS) if CONTROL_FLOW & {n.op_type for n in c.nodes}],
)
def test_control_flow_forward_over_reverse(case: Case) -> None:
    """forward(reverse(f)): Hessian-vector products through If, Loop, Scan and the recurrent ops."""
    check_forward_over_reverse(case)


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=f"{c.name}-{i}") for i, c in enumerate(ROWS) if CONTROL_FLOW & {n.op_type for n in c.nodes}],
)
def test_control_flow_seeds_equal_single_runs(case: Case) -> None:
    """seeds=3 (unrolled) and seeds='dynamic' (a Loop over the seeds, around the tangent Scans,
    Loops and Ifs) give the three single-direction tangents."""
    feeds = {k: _cast(v, np.float64) for k, v in case.inputs.items()}
    rng = np.random.default_rng(4)
    ts = {x: rng.standard_normal((*feeds[x].shape, 3)) for x in case.xs}
    model, single = tangent(case, np.float64)
    sess = ol.runtime.InferenceSession(single)
    want = np.stack(
        [
            sess.run(None, tangent_feeds(single, feeds, {f"fwd_{x}": ts[x][..., k] for x in case.xs}, model))[0]
            for k in range(3)
        ],
        axis=-1,
    )
    for seeds in (3, "dynamic"):
        _, fwd = tangent(case, np.float64, seeds=seeds)
        (got,) = ol.runtime.InferenceSession(fwd).run(
            None, tangent_feeds(fwd, feeds, {f"fwd_{x}": ts[x] for x in case.xs}, model)
        )
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"{case.name}: seeds={seeds!r}")
