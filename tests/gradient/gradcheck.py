"""The oracle for gradient rules: central finite differences plus onnxruntime.

``check_gradient`` builds a forward model with ``onnx.helper`` (a test reference),
reads it with OUR codec, differentiates it with ``onnx_light.GradientOfFunction``,
and checks three things:

1. the backward function, run in our runtime in float64, matches central finite
   differences of ``<dy, y(x + t v)>`` along a random direction ``v``;
2. the same function, wrapped as a model, passes ``onnx.checker.check_model(
   full_check=True)``;
3. it runs in onnxruntime and agrees with our runtime.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

import onnx_light as ol

_NP_TO_ONNX = {
    np.dtype(np.float32): 1,
    np.dtype(np.uint8): 2,
    np.dtype(np.int8): 3,
    np.dtype(np.int32): 6,
    np.dtype(np.int64): 7,
    np.dtype(np.bool_): 9,
    np.dtype(np.float16): 10,
    np.dtype(np.float64): 11,
}


@dataclass
class Case:
    """One table row: a forward graph, its inputs and what to differentiate.

    Attributes:
        name: test id.
        nodes: forward nodes built with ``onnx.helper.make_node``.
        inputs: feed values by name (floats are cast to the case's dtype).
        xs: names to differentiate.
        y: the output to differentiate (default: the last node's first output).
        initializers: names among ``inputs`` stored as initializers instead of inputs.
        opset: the forward model's opset.
        dtype: floating dtype for our finite-difference run.
        ort_dtype: floating dtype for the onnxruntime comparison (some ORT kernels
            lack float64).
        rtol, atol: finite-difference tolerances.
        dynamic: input names whose first dim is declared symbolic ("N").
        skip_ort: reason onnxruntime cannot run this graph (must be given, not silent).
    """

    name: str
    nodes: list[Any]
    inputs: dict[str, np.ndarray]
    xs: list[str]
    y: str | None = None
    initializers: list[str] = field(default_factory=list)
    opset: int = 21
    dtype: Any = np.float64
    ort_dtype: Any = np.float64
    rtol: float = 1e-5
    atol: float = 1e-7
    dynamic: list[str] = field(default_factory=list)
    skip_ort: str | None = None


def _cast(value: np.ndarray, dtype: Any) -> np.ndarray:
    return value.astype(dtype) if value.dtype.kind == "f" else value


def build_model(case: Case, dtype: Any) -> Any:
    """The forward model as an ``onnx.ModelProto`` (all float inputs in ``dtype``)."""
    import onnx
    from onnx import helper as oh
    from onnx import numpy_helper as onh

    y = case.y or case.nodes[-1].output[0]
    inputs = []
    inits = []
    for name, value in case.inputs.items():
        v = _cast(value, dtype)
        if name in case.initializers:
            inits.append(onh.from_array(v, name))
            continue
        shape: list[Any] = list(v.shape)
        if name in case.dynamic and shape:
            shape[0] = "N"
        inputs.append(oh.make_tensor_value_info(name, _NP_TO_ONNX[v.dtype], shape))
    outputs = [oh.make_tensor_value_info(y, 0, None)]
    graph = oh.make_graph(case.nodes, case.name, inputs, outputs, inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", case.opset)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model)


def to_ours(onnx_proto: Any, cls: Any) -> Any:
    """Reads an onnx message with our codec."""
    return cls.FromString(onnx_proto.SerializeToString())


def gradient(case: Case, dtype: Any = None, registry: Any = None) -> tuple[Any, Any]:
    """(our forward ModelProto, our backward FunctionProto) for ``case``."""
    model = to_ours(build_model(case, dtype or case.dtype), ol.ModelProto)
    y = case.y or case.nodes[-1].output[0]
    bwd = ol.GradientOfFunction(model, case.xs, y, registry=registry)
    return model, bwd


def run_forward(model: Any, feeds: dict[str, np.ndarray], y: str) -> np.ndarray:
    sess = ol.runtime.InferenceSession(model)
    graph_inputs = {i.name for i in sess.get_inputs()}
    return sess.run([y], {k: v for k, v in feeds.items() if k in graph_inputs})[0]


def backward_feeds(bwd: Any, feeds: dict[str, np.ndarray], dy: np.ndarray, model: Any = None) -> dict[str, np.ndarray]:
    """The backward function's feeds; inputs that are forward values (outputs of random ops,
    which the pass does not recompute) are taken from one forward run of ``model``."""
    seed = bwd.input[-1]  # "dy", unless the forward graph has an input of that name
    missing = [n for n in bwd.input[:-1] if n not in feeds]
    produced = forward_values(model, feeds, missing) if missing and model is not None else {}
    out = {name: feeds[name] if name in feeds else produced[name] for name in bwd.input[:-1]}
    out[seed] = dy
    return out


def forward_values(model: Any, feeds: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    """Values of intermediate ``names`` in one forward run of ``model``."""
    extended = ol.ModelProto()
    extended.CopyFrom(model)
    for name in names:
        extended.graph.output.append(ol.helper.make_tensor_value_info(name, 0, None))
    sess = ol.runtime.InferenceSession(extended)
    graph_inputs = {i.name for i in sess.get_inputs()}
    return dict(zip(names, sess.run(names, {k: v for k, v in feeds.items() if k in graph_inputs})))


def check_gradient(case: Case, seed: int = 0, ort: bool = True) -> dict[str, np.ndarray]:
    """Runs the three checks of the module docstring; returns our gradients.

    With ``ort=False`` the backward model still passes the full checker, but is not run
    in onnxruntime (the property tests run onnxruntime on a subset of their examples).
    """
    rng = np.random.default_rng(seed)
    y = case.y or case.nodes[-1].output[0]
    feeds = {k: _cast(v, case.dtype) for k, v in case.inputs.items()}
    model, bwd = gradient(case)
    y_val = run_forward(model, feeds, y)
    dy = rng.standard_normal(np.shape(y_val)).astype(y_val.dtype)
    grads = ol.runtime.InferenceSession(bwd).run(None, backward_feeds(bwd, feeds, dy, model))
    for x, g in zip(case.xs, grads):
        assert g.shape == feeds[x].shape, f"{case.name}: grad_{x} shape {g.shape} != {feeds[x].shape}"
        assert g.dtype == feeds[x].dtype, f"{case.name}: grad_{x} dtype {g.dtype} != {feeds[x].dtype}"

    # 1. central finite differences along a random direction
    direction = {x: rng.standard_normal(feeds[x].shape).astype(feeds[x].dtype) for x in case.xs}
    h = 1e-6 if np.dtype(case.dtype) == np.float64 else 1e-2

    def objective(t: float) -> float:
        moved = dict(feeds)
        for x in case.xs:
            moved[x] = (feeds[x] + t * direction[x]).astype(feeds[x].dtype)
        return float(np.sum(dy.astype(np.float64) * run_forward(model, moved, y).astype(np.float64)))

    numeric = (objective(h) - objective(-h)) / (2 * h)
    analytic = float(sum(np.sum(g.astype(np.float64) * direction[x]) for x, g in zip(case.xs, grads)))
    scale = max(1.0, abs(numeric), abs(analytic))
    assert abs(numeric - analytic) <= case.rtol * scale + case.atol, (
        f"{case.name}: finite differences {numeric!r} vs backward graph {analytic!r}"
    )

    # 2 and 3. the same backward function is valid ONNX and runs in onnxruntime
    if case.skip_ort is None:
        check_in_onnxruntime(case, seed, run=ort)
    return dict(zip(case.xs, grads))


def backward_model(bwd: Any, feeds: dict[str, np.ndarray]) -> Any:
    """The backward FunctionProto wrapped as an ``onnx.ModelProto`` that calls it."""
    import onnx
    from onnx import helper as oh

    fn = onnx.FunctionProto.FromString(bwd.SerializeToString())
    inputs = [oh.make_tensor_value_info(n, _NP_TO_ONNX[feeds[n].dtype], list(feeds[n].shape)) for n in fn.input]
    outputs = [
        oh.make_tensor_value_info(f"grad_{x}", _NP_TO_ONNX[feeds[x].dtype], list(feeds[x].shape))
        for x in fn.input[: len(fn.output)]
    ]
    call = oh.make_node(fn.name, list(fn.input), list(fn.output), domain=fn.domain)
    graph = oh.make_graph([call], "backward", inputs, outputs)
    imports = list(fn.opset_import) + [oh.make_opsetid(fn.domain, 1)]
    model = oh.make_model(graph, opset_imports=imports, functions=[fn])
    model.ir_version = 10
    return model


def check_in_onnxruntime(case: Case, seed: int = 0, run: bool = True) -> None:
    """Our backward graph passes the full checker and (when ``run``) agrees between onnxruntime and us."""
    import onnx
    import onnxruntime as ort

    rng = np.random.default_rng(seed + 1)
    y = case.y or case.nodes[-1].output[0]
    feeds = {k: _cast(v, case.ort_dtype) for k, v in case.inputs.items()}
    model, bwd = gradient(case, case.ort_dtype)
    y_val = run_forward(model, feeds, y)
    dy = rng.standard_normal(np.shape(y_val)).astype(y_val.dtype)
    bfeeds = backward_feeds(bwd, feeds, dy, model)
    wrapped = backward_model(bwd, bfeeds)
    onnx.checker.check_model(wrapped, full_check=True)
    if not run:
        return
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(wrapped.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    theirs = sess.run(None, bfeeds)
    ours = ol.runtime.InferenceSession(bwd).run(None, bfeeds)
    tol = 1e-9 if np.dtype(case.ort_dtype) == np.float64 else 1e-4
    for x, a, b in zip(case.xs, ours, theirs):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=f"{case.name}: grad_{x} ours vs onnxruntime")


def check_second_order(case: Case, seed: int = 0) -> None:
    """Differentiates the backward function again: a Hessian-vector product vs finite differences.

    With ``g(x) = J(x)^T dy`` (the first backward function), differentiating ``g`` with
    respect to ``x`` along ``dy2`` gives ``H dy2``; its inner product with ``u`` must equal
    ``d/dt <u, g(x + t dy2)>`` at ``t = 0``.
    """
    rng = np.random.default_rng(seed + 2)
    x = case.xs[0]
    feeds = {k: _cast(v, case.dtype) for k, v in case.inputs.items()}
    model, bwd = gradient(case)
    y = case.y or case.nodes[-1].output[0]
    y_val = run_forward(model, feeds, y)
    dy = rng.standard_normal(np.shape(y_val)).astype(y_val.dtype)
    first = ol.runtime.InferenceSession(bwd)
    base = backward_feeds(bwd, feeds, dy, model)

    def grad_at(shift: np.ndarray, t: float) -> np.ndarray:
        moved = dict(base)
        moved[x] = (base[x] + t * shift).astype(base[x].dtype)
        return first.run([f"grad_{x}"], moved)[0]

    # allow_unused: for an op linear in x, grad_x does not depend on x (H = 0)
    second = ol.GradientOfFunction(bwd, [x], f"grad_{x}", allow_unused=True)
    dy2 = rng.standard_normal(feeds[x].shape).astype(feeds[x].dtype)
    # the first function's seed is a free input of the second, under its own name;
    # the second's seed (its last input) then gets another
    assert second.input[-1] not in base, f"{case.name}: the second seed collides with {second.input[-1]!r}"
    feeds2 = {n: base[n] for n in second.input[:-1]}
    feeds2[second.input[-1]] = dy2
    assert set(feeds2) == set(second.input), f"{case.name}: unexpected inputs {second.input}"
    (hv,) = ol.runtime.InferenceSession(second).run([f"grad_{x}"], feeds2)
    u = rng.standard_normal(feeds[x].shape)
    h = 1e-5
    numeric = float(np.sum(u * (grad_at(dy2, h) - grad_at(dy2, -h)))) / (2 * h)
    analytic = float(np.sum(u * hv))
    scale = max(1.0, abs(numeric), abs(analytic))
    assert abs(numeric - analytic) <= 1e-4 * scale, f"{case.name}: second order {numeric!r} vs {analytic!r}"


def tangent(case: Case, dtype: Any = None, seeds: Any = None) -> tuple[Any, Any]:
    """(our forward ModelProto, our forward-mode FunctionProto) for ``case``."""
    model = to_ours(build_model(case, dtype or case.dtype), ol.ModelProto)
    y = case.y or case.nodes[-1].output[0]
    return model, ol.TangentOfFunction(model, case.xs, [y], seeds=seeds)


def tangent_feeds(fwd: Any, feeds: dict[str, np.ndarray], ts: dict[str, np.ndarray], model: Any) -> dict[str, Any]:
    """The forward-mode function's feeds: the case's values plus ``fwd_<x>`` tangents."""
    missing = [n for n in fwd.input if n not in feeds and n not in ts]
    produced = forward_values(model, feeds, missing) if missing else {}
    return {n: ts[n] if n in ts else feeds[n] if n in feeds else produced[n] for n in fwd.input}


def check_tangent(case: Case, seed: int = 0, adjoint_rtol: float = 1e-11, h: float = 1e-6) -> None:
    """Forward mode against reverse mode and finite differences, in float64.

    ``<J^T u, t> = <u, J t>`` to ``adjoint_rtol`` relative (separate rules give J and J^T), and
    ``J t`` matches central differences of ``y(x + h t)``.
    """
    rng = np.random.default_rng(seed + 3)
    y = case.y or case.nodes[-1].output[0]
    feeds = {k: _cast(v, np.float64) for k, v in case.inputs.items()}
    model, bwd = gradient(case, np.float64)
    _, fwd = tangent(case, np.float64)
    y_val = run_forward(model, feeds, y)
    u = rng.standard_normal(np.shape(y_val))
    t = {x: rng.standard_normal(feeds[x].shape) for x in case.xs}
    (jt,) = ol.runtime.InferenceSession(fwd).run(None, tangent_feeds(fwd, feeds, {f"fwd_{x}": t[x] for x in t}, model))
    assert np.shape(jt) == np.shape(y_val), f"{case.name}: fwd_{y} shape {np.shape(jt)} != {np.shape(y_val)}"
    grads = ol.runtime.InferenceSession(bwd).run(None, backward_feeds(bwd, feeds, u, model))
    left = float(sum(np.sum(g * t[x]) for x, g in zip(case.xs, grads)))
    right = float(np.sum(u * jt))
    scale = max(1e-300, abs(left), abs(right), float(np.sum(np.abs(u * jt))))
    assert abs(left - right) <= adjoint_rtol * scale, f"{case.name}: <J^T u, t> = {left!r} vs <u, J t> = {right!r}"

    def at(s: float) -> np.ndarray:
        moved = dict(feeds)
        for x in case.xs:
            moved[x] = feeds[x] + s * t[x]
        return run_forward(model, moved, y).astype(np.float64)

    numeric = (at(h) - at(-h)) / (2 * h)
    np.testing.assert_allclose(
        jt, numeric, rtol=1e-4 if h <= 1e-6 else 1e-2, atol=1e-6 * max(1.0, float(np.max(np.abs(numeric), initial=0)))
    )


def check_tangent_in_onnxruntime(case: Case, seed: int = 0) -> None:
    """Our forward-mode graph passes the full checker and agrees between onnxruntime and us."""
    import onnx
    import onnxruntime as ort
    from onnx import helper as oh

    rng = np.random.default_rng(seed + 5)
    y = case.y or case.nodes[-1].output[0]
    feeds = {k: _cast(v, case.ort_dtype) for k, v in case.inputs.items()}
    model, fwd = tangent(case, case.ort_dtype)
    y_val = run_forward(model, feeds, y)
    ts = {f"fwd_{x}": rng.standard_normal(feeds[x].shape).astype(feeds[x].dtype) for x in case.xs}
    tfeeds = tangent_feeds(fwd, feeds, ts, model)
    fn = onnx.FunctionProto.FromString(fwd.SerializeToString())
    inputs = [oh.make_tensor_value_info(n, _NP_TO_ONNX[tfeeds[n].dtype], list(tfeeds[n].shape)) for n in fn.input]
    outputs = [oh.make_tensor_value_info(fn.output[0], _NP_TO_ONNX[y_val.dtype], list(np.shape(y_val)))]
    call = oh.make_node(fn.name, list(fn.input), list(fn.output), domain=fn.domain)
    graph = oh.make_graph([call], "tangent", inputs, outputs)
    wrapped = oh.make_model(graph, opset_imports=[*fn.opset_import, oh.make_opsetid(fn.domain, 1)], functions=[fn])
    wrapped.ir_version = 10
    onnx.checker.check_model(wrapped, full_check=True)
    if case.skip_ort:
        return
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(wrapped.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    (theirs,) = sess.run(None, tfeeds)
    (ours,) = ol.runtime.InferenceSession(fwd).run(None, tfeeds)
    tol = 1e-9 if np.dtype(case.ort_dtype) == np.float64 else 1e-4
    np.testing.assert_allclose(ours, theirs, rtol=tol, atol=tol, err_msg=f"{case.name}: fwd_{y} ours vs onnxruntime")


def check_forward_over_reverse(case: Case, seed: int = 0) -> None:
    """Forward mode over the backward function: ``H t`` (all xs at once) vs finite differences.

    With ``g(x) = J(x)^T dy``, the tangent of ``g`` along ``t`` is ``H t``; its inner product
    with ``u`` must equal ``d/ds <u, g(x + s t)>`` at ``s = 0``.
    """
    rng = np.random.default_rng(seed + 7)
    feeds = {k: _cast(v, np.float64) for k, v in case.inputs.items()}
    model, bwd = gradient(case, np.float64)
    y = case.y or case.nodes[-1].output[0]
    dy = rng.standard_normal(np.shape(run_forward(model, feeds, y)))
    first = ol.runtime.InferenceSession(bwd)
    base = backward_feeds(bwd, feeds, dy, model)
    grads = [f"grad_{x}" for x in case.xs]
    hvp = ol.TangentOfFunction(bwd, case.xs, grads, allow_unused=True)
    t = {x: rng.standard_normal(feeds[x].shape) for x in case.xs}
    u = {x: rng.standard_normal(feeds[x].shape) for x in case.xs}
    hv = ol.runtime.InferenceSession(hvp).run(
        None, {n: t[n[4:]] if n.startswith("fwd_") else base[n] for n in hvp.input}
    )

    def inner_at(s: float) -> float:
        moved = {**base, **{x: base[x] + s * t[x] for x in case.xs}}
        return float(sum(np.sum(u[x] * g) for x, g in zip(case.xs, first.run(grads, moved))))

    h = 1e-5
    numeric = (inner_at(h) - inner_at(-h)) / (2 * h)
    analytic = float(sum(np.sum(u[x] * v) for x, v in zip(case.xs, hv)))
    scale = max(1.0, abs(numeric), abs(analytic))
    assert abs(numeric - analytic) <= 1e-5 * scale, f"{case.name}: forward over reverse {analytic!r} vs {numeric!r}"
