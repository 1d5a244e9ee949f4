"""Forward-mode (JVP) rules: every row of the reverse rule tables, forward against reverse.

For each row, ``<J^T u, t> = <u, J t>`` in float64 (forward rule vs reverse rule) and the
forward rule against central finite differences (see ``gradcheck.check_tangent``).
"""

from __future__ import annotations

import pytest
from gradcheck import Case, check_tangent, tangent
from test_rule_coverage import CASES

import onnx_light as ol

REGISTRY = ol.DefaultGradRegistry()


#: ops whose forward rule is not written yet: their rows must fail with a clear GradientError
NOT_YET = {
    "GroupNormalization",
    # control flow and the recurrent ops (differentiated in reverse through Scan): issue 12 §2
    "If",
    "Loop",
    "Scan",
    "RNN",
    "GRU",
    "LSTM",
    "Range",
    # differentiated through its expansion, a Scan over the tokens (forward mode through Scan: see above)
    "LinearAttention",
}
# rows whose op has a forward rule that refuses these attributes (scatter max/min)
NOT_YET_ROWS = ("scatter-elements-max", "scatter-elements-min", "scatter-nd-max", "scatter-nd-min")


def _param(case: Case, i: int) -> object:
    ops = {n.op_type for n in case.nodes}
    training_bn = any(  # training mode with the running statistics as outputs
        n.op_type == "BatchNormalization"
        and any(a.name == "training_mode" and a.i for a in n.attribute)
        and len([o for o in n.output if o]) > 1
        for n in case.nodes
    )
    marks = []
    if ops & NOT_YET or training_bn or case.name.startswith(NOT_YET_ROWS):
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
