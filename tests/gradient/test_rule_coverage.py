"""Every rule has a table row, every op a rule emits has a rule (closure), and the
backward graphs can be differentiated again (Hessian-vector products)."""

from __future__ import annotations

import importlib
import pathlib
from collections.abc import Iterator

import numpy as np
import pytest
from gradcheck import Case, check_second_order, gradient

import onnx_light as ol

HERE = pathlib.Path(__file__).parent


def _all_cases() -> Iterator[Case]:
    """Every Case in a module-level list of a ``test_rules_*.py`` file, each once."""
    seen: set[int] = set()
    for path in sorted(HERE.glob("test_rules_*.py")):
        module = importlib.import_module(path.stem)
        for value in vars(module).values():
            if isinstance(value, list) and value and all(isinstance(c, Case) for c in value):
                for case in value:
                    if id(case) not in seen:
                        seen.add(id(case))
                        yield case


CASES = list(_all_cases())
REGISTRY = ol.DefaultGradRegistry()


def test_every_rule_has_a_table_row() -> None:
    from test_rules_misc import STRAIGHT_THROUGH_ROWS  # estimators, not derivatives: checked against torch

    rows = [*CASES, *STRAIGHT_THROUGH_ROWS]
    tested = {n.op_type for case in rows for n in case.nodes if n.domain in ("", "ai.onnx")}
    with_rules = {op for rule in REGISTRY.rules() if not rule.no_grad and rule.domain == "" for op in [rule.op_type]}
    missing = sorted(with_rules - tested)
    assert not missing, f"rules without a test row: {missing}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_emitted_ops_have_rules(case: Case) -> None:
    """Closure: the pass's output can be differentiated again."""
    _, bwd = gradient(case)
    for node in bwd.node:
        rule = REGISTRY.lookup(node.domain, node.op_type, 21)
        assert rule is not None, f"{case.name}: the backward graph uses {node.op_type}, which has no rule"


# one row per op family member whose backward graph is itself smooth at the inputs
#: rows whose x sits on a kink of the op (an LpPool window of zeros: the norm's Hessian is infinite there)
AT_A_KINK = {"lppool-zero-window", "lppool-p3-zero-window", "globallppool-zero-plane"}
SECOND_ORDER = [c for c in CASES if len(c.xs) >= 1 and np.dtype(c.dtype) == np.float64 and c.name not in AT_A_KINK]
#: rows whose backward graph is refused when differentiated again, and why
NOT_TWICE: dict[str, str] = {}


def _second_order_param(case: Case) -> object:
    reason = NOT_TWICE.get(case.name)
    marks = [pytest.mark.xfail(raises=ol.GradientError, strict=True, reason=reason)] if reason else []
    return pytest.param(case, id=case.name, marks=marks)


@pytest.mark.parametrize("case", [_second_order_param(c) for c in SECOND_ORDER])
def test_hessian_vector_product(case: Case) -> None:
    check_second_order(case)
