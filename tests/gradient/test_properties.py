"""Property tests: the whole rule table against finite differences with random shapes.

One property test per rule family. Each example draws, for one op, random shapes (size-1
sides, broadcast pairs such as [3, 1, 4] with [5, 1], rank 0 where the op allows), random
attributes within the spec's domain (negative and positive axes, keepdims, perm, pads,
...) and inputs away from kinks, then runs ``gradcheck.check_gradient``: the backward
graph in our runtime in float64 against central finite differences along a random
direction, and ``onnx.checker`` full_check on the emitted model; about half of the
examples also run in onnxruntime, and about half declare the first dim of the first
input symbolic ("N"). A failure names the op, the opset, the shapes (integer
inputs' values) and the attributes.

Hypothesis is derandomized; CI draws a few examples per op (``EXAMPLES``), the ``slow``
test many more (``pytest -m slow tests/gradient/test_properties.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gradcheck import Case, check_gradient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from prop_elementwise import ACTIVATION, ARITHMETIC, MATH
from prop_image import IMAGE
from prop_misc import MISC
from prop_nn import LOSS, NN, NORMALIZATION, POOL
from prop_structure import LINALG, REDUCTION
from prop_tensor import TENSOR
from propgen import Gen
from test_rule_coverage import CASES as FIXED_ROWS

import onnx_light as ol

FAMILIES: dict[str, dict[str, Gen]] = {
    "math": MATH,
    "arithmetic": ARITHMETIC,
    "activation": ACTIVATION,
    "linalg": LINALG,
    "reduction": REDUCTION,
    "tensor": TENSOR,
    "nn": NN,
    "pool": POOL,
    "normalization": NORMALIZATION,
    "loss": LOSS,
    "image": IMAGE,
    "misc": MISC,
}

# ops without a float64 kernel in onnxruntime: their fixed rows compare in float32
F32_IN_ORT = {
    n.op_type
    for c in FIXED_ROWS
    if len(c.nodes) == 1 and np.dtype(c.dtype) == np.float64 and np.dtype(c.ort_dtype) == np.float32
    for n in c.nodes
}

# known bugs of rules other engineers own: (family, op) -> reason; the example must fail
XFAIL: dict[tuple[str, str], str] = {}

# ops whose examples keep every dim static, and why
NOT_SYMBOLIC: dict[str, str] = {}

EXAMPLES = 5
DEEP_EXAMPLES = 60


def _settings(examples: int, shrink: bool = True) -> Any:
    phases = list(Phase) if shrink else [Phase.explicit, Phase.reuse, Phase.generate]
    return settings(
        max_examples=examples,
        phases=phases,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


def check_example(family: str, op: str, data: Any) -> None:
    """Draws one example of ``op`` and checks it; a crash of the pass names the case too."""
    seed = data.draw(st.integers(0, 2**16), label="seed")
    case: Case = FAMILIES[family][op](data.draw, np.random.default_rng(seed))
    if op.split()[0] in F32_IN_ORT:
        case.ort_dtype = np.float32
    if not case.dynamic and op.split()[0] not in NOT_SYMBOLIC and data.draw(st.booleans(), label="symbolic"):
        # the first dim of the first (non-initializer) input declared symbolic: rules read it at run time
        first = [k for k, v in case.inputs.items() if np.ndim(v) and k not in case.initializers][:1]
        case.dynamic = first
        case.name += f" symbolic first dim of {first}" if first else ""
    run_ort = data.draw(st.booleans(), label="onnxruntime")
    try:
        check_gradient(case, seed=seed, ort=run_ort)
    except AssertionError:
        raise  # its message starts with the case name
    except Exception as e:
        raise AssertionError(f"{case.name}: {type(e).__name__}: {e}") from e


def _params(family: str | None = None) -> list[Any]:
    out = []
    for fam, table in FAMILIES.items():
        if family not in (None, fam):
            continue
        out += [pytest.param(fam, op, id=f"{fam}-{op}") for op in table if (fam, op) not in XFAIL]
    return out


@pytest.mark.parametrize(("family", "op"), _params("math"))
@_settings(EXAMPLES)
@given(data=st.data())
def test_math(family: str, op: str, data: Any) -> None:
    check_example(family, op, data)


@pytest.mark.parametrize(("family", "op"), _params("arithmetic"))
@_settings(EXAMPLES)
@given(data=st.data())
def test_arithmetic_broadcasting(family: str, op: str, data: Any) -> None:
    check_example(family, op, data)


@pytest.mark.parametrize(("family", "op"), _params("activation"))
@_settings(EXAMPLES)
@given(data=st.data())
def test_activation(family: str, op: str, data: Any) -> None:
    check_example(family, op, data)


@pytest.mark.parametrize(("family", "op"), _params("linalg"))
@_settings(EXAMPLES)
@given(data=st.data())
def test_linalg(family: str, op: str, data: Any) -> None:
    check_example(family, op, data)


@pytest.mark.parametrize(("family", "op"), _params("reduction"))
@_settings(EXAMPLES)
@given(data=st.data())
def test_reduction(family: str, op: str, data: Any) -> None:
    check_example(family, op, data)


@pytest.mark.parametrize(("family", "op"), _params("tensor"))
@_settings(EXAMPLES)
@given(data=st.data())
def test_tensor(family: str, op: str, data: Any) -> None:
    check_example(family, op, data)


@pytest.mark.parametrize(("family", "op"), _params("nn"))
@_settings(EXAMPLES)
@given(data=st.data())
def test_nn(family: str, op: str, data: Any) -> None:
    check_example(family, op, data)


@pytest.mark.parametrize(("family", "op"), _params("pool"))
@_settings(EXAMPLES)
@given(data=st.data())
def test_pool(family: str, op: str, data: Any) -> None:
    check_example(family, op, data)


@pytest.mark.parametrize(("family", "op"), _params("normalization"))
@_settings(EXAMPLES)
@given(data=st.data())
def test_normalization(family: str, op: str, data: Any) -> None:
    check_example(family, op, data)


@pytest.mark.parametrize(("family", "op"), _params("loss"))
@_settings(EXAMPLES)
@given(data=st.data())
def test_loss(family: str, op: str, data: Any) -> None:
    check_example(family, op, data)


@pytest.mark.parametrize(("family", "op"), _params("image"))
@_settings(EXAMPLES)
@given(data=st.data())
def test_image(family: str, op: str, data: Any) -> None:
    check_example(family, op, data)


@pytest.mark.parametrize(("family", "op"), _params("misc"))
@_settings(EXAMPLES)
@given(data=st.data())
def test_misc(family: str, op: str, data: Any) -> None:
    check_example(family, op, data)


@pytest.mark.slow
@pytest.mark.parametrize(("family", "op"), _params())
@_settings(DEEP_EXAMPLES)
@given(data=st.data())
def test_deep(family: str, op: str, data: Any) -> None:
    check_example(family, op, data)


# the variants hitting the known bugs: each must still fail (not shrunk: that costs seconds)
KNOWN = [
    pytest.param(f, op, id=f"{f}-{op}", marks=pytest.mark.xfail(strict=True, reason=r)) for (f, op), r in XFAIL.items()
]


@pytest.mark.parametrize(("family", "op"), KNOWN)
@_settings(EXAMPLES, shrink=False)
@given(data=st.data())
def test_known_bug(family: str, op: str, data: Any) -> None:
    check_example(family, op, data)


# ops with a rule that no family draws, and why random shapes make no sense for them
NOT_DRAWN: dict[str, str] = {
    "QuantizeLinear": "its rule is the straight-through estimator, not the derivative (zero almost everywhere): "
    "finite differences cannot check it; test_rules_misc.py checks it against torch's fake quantization",
    "Range": "its output length ceil((limit - start) / delta) is data, not a shape to draw; the fixed rows "
    "check start and delta away from the integer boundaries where the length jumps",
    **{
        op: "a node with a subgraph body (or lowered to one); the fixed rows of test_rules_control_flow.py "
        "and test_rules_recurrent.py cover its attribute combinations"
        for op in ("If", "Loop", "Scan", "RNN", "GRU", "LSTM")
    },
    "MaxUnpool": "its indices must be a MaxPool's over the unpooled shape; the fixed rows of "
    "test_rules_image.py pool random images (overlapping windows repeating an index included)",
    "RoiAlign": "the boxes and batch indices are data; the fixed rows cover sampling ratios, scales and both "
    "coordinate modes",
    "Col2Im": "image_shape, block_shape, strides, pads and dilations must tile the columns exactly; the fixed "
    "rows cover each attribute",
    "DeformConv": "its offsets must keep every sampling point off the pixel grid (the tents' kinks); the fixed "
    "rows draw them so, with groups, offset groups, strides, pads and dilations",
    **{
        op: "its values are sequences (the property families draw tensors); the fixed rows of "
        "test_rules_sequence.py cover positions, lengths and axes"
        for op in (
            "SequenceConstruct SequenceAt SequenceInsert SequenceErase SplitToSequence ConcatFromSequence SequenceMap"
        ).split()
    },
}


def test_every_rule_is_in_a_family() -> None:
    drawn = {op.split()[0] for table in FAMILIES.values() for op in table}
    registry = ol.DefaultGradRegistry()
    with_rules = {r.op_type for r in registry.rules() if not r.no_grad and r.domain == ""}
    missing = sorted(with_rules - drawn - set(NOT_DRAWN))
    assert not missing, f"rules in no property family (add a generator or a NOT_DRAWN reason): {missing}"
    assert not set(NOT_DRAWN) & drawn, "an op is both drawn and listed as not drawn"
