"""Forward-mode (JVP) rules: every row of the reverse rule tables, forward against reverse.

For each row, ``<J^T u, t> = <u, J t>`` in float64 (forward rule vs reverse rule) and the
forward rule against central finite differences (see ``gradcheck.check_tangent``).
"""

from __future__ import annotations

import pytest
import test_rules_arithmetic as _arith
import test_rules_linalg as _linalg
import test_rules_math as _math
import test_rules_nn as _nn
import test_rules_normalization as _norm
import test_rules_reduction as _red
import test_rules_tensor as _tensor
from gradcheck import Case, check_tangent


def _rows() -> list[Case]:
    rows: list[Case] = []
    for module, names in [
        (_arith, ["ARITHMETIC"]),
        (_math, ["CASES"]),
        (_linalg, ["CASES"]),
        (_nn, ["CONV", "POOL", "LOSS"]),
        (_norm, ["CASES"]),
        (_red, ["ROWS"]),
        (_tensor, ["ROWS"]),
    ]:
        for name in names:
            rows.extend(c for c in getattr(module, name, []) if isinstance(c, Case))
    return rows


ROWS = _rows()


@pytest.mark.parametrize("case", ROWS, ids=[f"{c.name}-{i}" for i, c in enumerate(ROWS)])
def test_forward_rule(case: Case) -> None:
    check_tangent(case)
