"""Conformance: the ONNX backend node tests, read with OUR codec, run by InferenceSession.

``onnx.backend.test.case.node.collect_testcases()`` yields each case as an onnx
ModelProto plus numpy inputs and expected outputs. The onnx package serialises them
(it is a test reference only); from then on everything goes through onnx-light:
``ModelProto.FromString``, ``TensorProto.FromString`` / ``SequenceProto`` /
``OptionalProto`` and ``numpy_helper``, then ``InferenceSession``.

A case is *in scope* when every op it runs (graph, subgraphs and model-local
function bodies) is in ``IN_SCOPE_OPS``; the others are counted, not run. Every
in-scope case must pass except those in ``EXCLUDED``, each with its reason.
``test_pass_rate`` prints the counts and fails both on a new failure and on an
exclusion that has started to pass.
"""

from __future__ import annotations

import functools
import importlib.util
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import onnx_light as ol
from onnx_light.runtime import InferenceSession
from onnx_light.runtime.kernels import _dtypes

# The ops the runtime promises (the list): default-domain names bare, others as domain::op.
IN_SCOPE_OPS = frozenset(
    """
    Abs Acos Acosh Add Asin Asinh Atan Atanh Ceil Celu Clip Cos Cosh Div Elu Erf Exp Floor Gelu
    HardSigmoid HardSwish LeakyRelu Log Max Mean Min Mish Mod Mul Neg Pow PRelu Reciprocal Relu Round
    Selu Shrink Sigmoid Sign Sin Sinh Softplus Softsign Sqrt Sub Sum Tan Tanh ThresholdedRelu
    And Equal Greater GreaterOrEqual IsInf IsNaN Less LessOrEqual Not Or Xor Where
    BitwiseAnd BitwiseOr BitwiseNot BitwiseXor
    Cast CastLike Concat Constant ConstantOfShape DepthToSpace SpaceToDepth Expand EyeLike Flatten
    Gather GatherElements GatherND Identity NonZero OneHot Pad Range Reshape ScatterElements ScatterND
    Shape Size Slice Split Squeeze Tile Transpose Trilu Unsqueeze Compress TopK ArgMax ArgMin CumSum
    Einsum ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd
    ReduceSum ReduceSumSquare AveragePool BatchNormalization Conv ConvTranspose Dropout Gemm
    GlobalAveragePool GlobalMaxPool GroupNormalization InstanceNormalization LayerNormalization
    LogSoftmax LpNormalization MatMul MaxPool MeanVarianceNormalization RMSNormalization Softmax
    Hardmax SoftmaxCrossEntropyLoss NegativeLogLikelihoodLoss LRN If Loop Scan RNN GRU LSTM
    SequenceConstruct SequenceEmpty SequenceAt SequenceInsert SequenceErase SequenceLength
    SplitToSequence ConcatFromSequence SequenceMap Optional OptionalHasElement OptionalGetElement
    ReverseSequence Unique TensorScatter CenterCropPad Scatter Upsample
    Resize LpPool GlobalLpPool GridSample AffineGrid Col2Im MaxUnpool RoiAlign MaxRoiPool DeformConv
    QuantizeLinear DequantizeLinear DynamicQuantizeLinear QLinearConv QLinearMatMul ConvInteger MatMulInteger
    RandomNormal RandomNormalLike RandomUniform RandomUniformLike Bernoulli Multinomial
    Det CumProd Swish SwiGLU BitCast BitShift
    DFT STFT HannWindow HammingWindow BlackmanWindow MelWeightMatrix
    StringConcat StringSplit RegexFullMatch StringNormalizer
    Attention RotaryEmbedding LinearAttention CausalConvWithState
    NonMaxSuppression TfIdfVectorizer ImageDecoder
    ai.onnx.preview::FlexAttention
    ai.onnx.preview.training::Adagrad ai.onnx.preview.training::Adam ai.onnx.preview.training::Momentum
    ai.onnx.ml::LabelEncoder ai.onnx.ml::TreeEnsemble ai.onnx.ml::ArrayFeatureExtractor ai.onnx.ml::Binarizer
    """.split()
)

#: in-scope ops of other domains, as (domain, op_type)

#: ops whose outputs are random draws: the spec fixes their distribution, not their values
#: (onnx's expected values come from numpy's legacy global stream), so a case running one of
#: them is checked for shape and dtype only
RANDOM_OPS = frozenset("RandomNormal RandomNormalLike RandomUniform RandomUniformLike Bernoulli Multinomial".split())

#: ops whose kernel needs an optional package (an extra of pyproject.toml): without it their
#: cases are skipped and left out of the pass rate, and the kernel's error says what to install
OPTIONAL_PACKAGE_OPS = {"ImageDecoder": "PIL"}

#: In-scope cases we do not pass, each with its cause. Keep it short and honest: the
#: pass-rate test fails when an entry starts passing, so fixed cases leave the list.
EXCLUDED: dict[str, str] = {}

#: tolerances for 16-bit and narrower floats (bfloat16, float16, float8 ...)
LOW_PRECISION_RTOL, LOW_PRECISION_ATOL = 1e-2, 1e-3

#: the share of in-scope cases that must pass
MIN_PASS_RATE = 0.97


@dataclass(frozen=True)
class Case:
    """One backend node test, serialised by onnx."""

    name: str
    model: bytes
    #: per data set: (inputs, outputs), each value as (kind, bytes) with kind tensor/seq/opt
    data_sets: tuple[tuple[tuple[tuple[str, bytes], ...], tuple[tuple[str, bytes], ...]], ...]
    rtol: float
    atol: float


def _serialise(value: Any, type_proto: Any) -> tuple[str, bytes]:
    """Writes a case value with onnx, as the backend test data files hold them."""
    import onnx

    kind = type_proto.WhichOneof("value") if type_proto is not None else "tensor_type"
    if kind == "sequence_type":
        return "seq", onnx.numpy_helper.from_list(list(value), dtype=onnx.SequenceProto.TENSOR).SerializeToString()
    if kind == "optional_type":
        inner = type_proto.optional_type.elem_type.WhichOneof("value")
        dtype = onnx.OptionalProto.SEQUENCE if inner == "sequence_type" else onnx.OptionalProto.TENSOR
        return "opt", onnx.numpy_helper.from_optional(value, dtype=dtype).SerializeToString()
    if isinstance(value, onnx.TensorProto):
        return "tensor", value.SerializeToString()
    return "tensor", onnx.numpy_helper.from_array(np.asarray(value)).SerializeToString()


@functools.lru_cache(maxsize=1)
def all_cases() -> tuple[Case, ...]:
    """Every backend node case, serialised once per test session."""
    import onnx
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        collected = list(collect_testcases())
    cases = []
    for c in collected:
        in_types = [vi.type for vi in c.model.graph.input]
        out_types = [vi.type for vi in c.model.graph.output]
        data_sets = []
        for inputs, outputs in c.data_sets:
            try:
                ins = tuple(_serialise(v, t) for v, t in zip(inputs, in_types))
                outs = tuple(_serialise(v, t) for v, t in zip(outputs, out_types))
            except (TypeError, ValueError) as err:  # maps and the like; _read reports it
                ins, outs = (("unserialisable", str(err).encode()),), ()
            data_sets.append((ins, outs))
        assert isinstance(c.model, onnx.ModelProto)
        cases.append(Case(c.name, c.model.SerializeToString(), tuple(data_sets), c.rtol, c.atol))
    return tuple(cases)


def ops_of(model: ol.ModelProto) -> set[tuple[str, str]]:
    """(domain, op_type) of every node run: graph, subgraphs, and bodies of local functions."""
    functions = {(f.domain, f.name): f for f in model.functions}
    seen: set[tuple[str, str]] = set()
    ops: set[tuple[str, str]] = set()

    def visit(nodes: Any) -> None:
        for node in nodes:
            key = (node.domain, node.op_type)
            if key in functions:
                if key not in seen:
                    seen.add(key)
                    visit(functions[key].node)
                continue
            ops.add(("" if node.domain == "ai.onnx" else node.domain, node.op_type))
            for attr in node.attribute:
                for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    visit(g.node)

    visit(model.graph.node)
    return ops


@functools.lru_cache(maxsize=1)
def partition() -> tuple[dict[str, Case], list[str]]:
    """(in-scope cases by name, names of out-of-scope cases)."""
    in_scope: dict[str, Case] = {}
    out_of_scope: list[str] = []
    for case in all_cases():
        ops = ops_of(ol.ModelProto.FromString(case.model))
        if all((f"{domain}::{op}" if domain else op) in IN_SCOPE_OPS for domain, op in ops):
            in_scope[case.name] = case
        else:
            out_of_scope.append(case.name)
    return in_scope, out_of_scope


def _read(kind: str, data: bytes) -> Any:
    """Reads a value back with OUR codec."""
    if kind == "unserialisable":
        raise TypeError(f"onnx could not serialise this case's data: {data.decode()}")
    if kind == "seq":
        return ol.numpy_helper.to_list(ol.SequenceProto.FromString(data))
    if kind == "opt":
        return ol.numpy_helper.to_optional(ol.OptionalProto.FromString(data))
    # the runtime's form of bfloat16 / float8 / int4 values: bit patterns (to_array gives
    # ml_dtypes arrays when ml_dtypes is installed)
    return ol.numpy_helper.to_array(ol.TensorProto.FromString(data), bit_patterns=True)


def _as_numbers(x: np.ndarray, elem_type: int) -> np.ndarray:
    """Bit-pattern floats (bfloat16, float8, ...) as float32; every other array unchanged."""
    if elem_type in _dtypes.BIT_PATTERN_TYPES:
        return _dtypes.decode(x.view(_dtypes.np_dtype(elem_type)))
    return x


def assert_same(got: Any, want: Any, elem_type: int, rtol: float, atol: float, where: str) -> None:
    """``got`` matches ``want``: same container, shape and dtype; floats within tolerance."""
    if want is None or isinstance(want, list):
        assert type(got) is type(want), f"{where}: got {type(got).__name__}, want {type(want).__name__}"
        if want is not None:
            assert len(got) == len(want), f"{where}: sequence of {len(got)} items, want {len(want)}"
            for i, (g, w) in enumerate(zip(got, want)):
                assert_same(g, w, 0, rtol, atol, f"{where}[{i}]")
        return
    got = np.asarray(got)
    assert got.shape == want.shape, f"{where}: shape {got.shape}, want {want.shape}"
    assert got.dtype == want.dtype, f"{where}: dtype {got.dtype}, want {want.dtype}"
    got_n, want_n = _as_numbers(got, elem_type), _as_numbers(want, elem_type)
    if want_n.dtype.kind in "fc":
        if want_n.dtype.itemsize <= 2 or elem_type in _dtypes.BIT_PATTERN_TYPES:
            rtol, atol = max(rtol, LOW_PRECISION_RTOL), max(atol, LOW_PRECISION_ATOL)
        np.testing.assert_allclose(got_n, want_n, rtol=rtol, atol=atol, equal_nan=True, err_msg=where)
    else:
        np.testing.assert_array_equal(got_n, want_n, err_msg=where)


def run_case(case: Case) -> None:
    """Runs one case through our codec and session; raises AssertionError on a mismatch."""
    model = ol.ModelProto.FromString(case.model)
    session = InferenceSession(model)
    inputs = [vi.name for vi in model.graph.input]
    outputs = list(model.graph.output)
    random = any(op in RANDOM_OPS for _, op in ops_of(model))
    for k, (ins, outs) in enumerate(case.data_sets):
        feeds = {name: _read(kind, data) for name, (kind, data) in zip(inputs, ins)}
        with np.errstate(all="ignore"):  # several cases produce inf/NaN on purpose
            got = session.run(None, feeds)
        assert len(got) == len(outputs)
        for vi, (kind, data), value in zip(outputs, outs, got):
            if random:
                want = _read(kind, data)
                assert (value.shape, value.dtype) == (want.shape, want.dtype), f"{case.name}[{k}] {vi.name}"
                continue
            elem_type = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
            assert_same(value, _read(kind, data), elem_type, case.rtol, case.atol, f"{case.name}[{k}] {vi.name}")


def missing_package(case: Case) -> str | None:
    """The optional package a case needs that is not installed, or None."""
    for _, op in ops_of(ol.ModelProto.FromString(case.model)):
        module = OPTIONAL_PACKAGE_OPS.get(op)
        if module is not None and importlib.util.find_spec(module) is None:
            return module
    return None


def _in_scope_names() -> list[str]:
    return sorted(partition()[0])


@pytest.mark.parametrize("name", _in_scope_names())
def test_node_case(name: str, request: pytest.FixtureRequest) -> None:
    if name in EXCLUDED:
        request.applymarker(pytest.mark.xfail(reason=EXCLUDED[name], strict=True))
    case = partition()[0][name]
    module = missing_package(case)
    if module is not None:
        pytest.skip(f"needs the optional package {module}")
    run_case(case)


def _count_passing(cases: list[Case]) -> int:
    """How many of ``cases`` run and match (out-of-scope ones too: the all-cases count)."""
    passed = 0
    for case in cases:
        try:
            run_case(case)
        except Exception:  # noqa: BLE001 - any failure just does not count
            continue
        passed += 1
    return passed


def test_pass_rate(record_property: Any) -> None:
    in_scope, out_of_scope = partition()
    failures: dict[str, str] = {}
    skipped = sorted(name for name, case in in_scope.items() if missing_package(case))
    for name, case in in_scope.items():
        if name in skipped:
            continue
        try:
            run_case(case)
        except Exception as err:  # a failure of any kind counts against the rate
            failures[name] = f"{type(err).__name__}: {str(err)[:200]}"
    passed = len(in_scope) - len(failures) - len(skipped)
    outside_passed = _count_passing([c for c in all_cases() if c.name in set(out_of_scope)])
    total = len(all_cases())
    summary = (
        f"backend node cases: {total} collected, {len(in_scope)} in scope, {passed} passed "
        f"({passed / len(in_scope):.1%}), {len(failures)} failed ({len(EXCLUDED)} excluded), "
        f"{len(out_of_scope)} out of scope, {len(skipped)} skipped (optional package missing); "
        f"over ALL cases {passed + outside_passed}/{total} pass "
        f"({(passed + outside_passed) / total:.1%})"
    )
    print(summary)
    record_property("conformance", summary)
    assert set(EXCLUDED) <= set(in_scope), f"exclusions that are not in-scope cases: {set(EXCLUDED) - set(in_scope)}"
    unexpected = {n: failures[n] for n in sorted(set(failures) - set(EXCLUDED))}
    assert not unexpected, f"{len(unexpected)} in-scope cases fail: {unexpected}"
    fixed = sorted(set(EXCLUDED) - set(failures))
    assert not fixed, f"excluded cases now pass; remove them from EXCLUDED: {fixed}"
    assert passed >= MIN_PASS_RATE * (len(in_scope) - len(skipped)), summary


def test_scope_partition_is_sane() -> None:
    """The op filter sees through subgraphs: Loop/If/Scan and sequence cases are in scope; it knows domains."""
    in_scope, out_of_scope = partition()
    assert "test_if" in in_scope and "test_loop11" in in_scope and "test_scan9_sum" in in_scope
    assert "test_if_seq" in in_scope and "test_sequence_insert_at_back" in in_scope
    assert "test_sequence_map_add_2_sequences" in in_scope and "test_loop16_seq_none" in in_scope
    assert "test_ai_onnx_ml_binarizer" in in_scope and "test_adam" in in_scope
    assert len(in_scope) > 1300
