"""``gradcheck``: the backward graph against central finite differences, per tensor.

The counterpart of ``torch.autograd.gradcheck`` for ONNX models: the model is
converted to float64 where it can be (the report says so when it cannot), the
backward graph of ``GradientOfFunction`` runs once, and for each ``x`` the
directional derivative ``<dy, dy/dx . v>`` along random unit directions ``v`` is
compared with a central difference whose step is scaled to the tensor. Where the
function is kinked (Relu, Clip, MaxPool: a step crossing a kink changes the slope)
the difference is retried with smaller steps until two successive estimates agree
to a tenth of the default rtol; the smaller step's estimate is the answer, and their
difference (its own error, at most that tenth) widens the tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .onnx_core import ModelProto, OnnxLightError, TensorProto, ValueInfoProto, from_onnx, helper, numpy_helper
from .onnx_core.gradient import GradientOfFunction as _GradientOfFunction
from .onnx_core.gradient import GradRegistry
from .onnx_extensions.gradient import DefaultGradRegistry
from .runtime import InferenceSession

__all__ = ["gradcheck", "GradcheckResult", "TensorCheck", "DEFAULT_ATOL", "DEFAULT_RTOL"]

#: default tolerances (float64; a float32 check uses 1e-3 / 1e-2)
DEFAULT_ATOL = 1e-6
DEFAULT_RTOL = 1e-4
#: a step relative to the tensor's RMS (float64 / float32)
_STEP = {np.dtype(np.float64): 1e-6, np.dtype(np.float32): 1e-3}
#: a difference is retried with the step divided by _SHRINK while two successive
#: estimates differ by more than _AGREE (relative), at most _RETRIES times: float32
#: rounding noise grows as the step shrinks, so it gets one retry only; estimates within
#: _SETTLED * atol of each other are taken as agreeing (a slope near 0 is all rounding noise
#: relative to itself: shrinking further only amplifies the noise past atol).
#: float64's _AGREE is a tenth of DEFAULT_RTOL: next to a Relu kink closer than the step,
#: every estimate sits near the mean of the two slopes and creeps by ~10x less per shrink,
#: so two of them "agreed" at 1e-4 while both were 2e-4 off (the encoder's false FAILED).
#: When no two agree so (truncation error above rounding noise at one step, below it at
#: the next: crnn), the closest successive pair gives the answer, and widens the tolerance
#: by its difference only when that is within _LOOSE
_SHRINK = 10.0
_SETTLED = 0.1
_AGREE = {np.dtype(np.float64): 1e-5, np.dtype(np.float32): 3e-2}
_LOOSE = {np.dtype(np.float64): 1e-4, np.dtype(np.float32): 3e-2}
_RETRIES = {np.dtype(np.float64): 6, np.dtype(np.float32): 1}
_FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16)


@dataclass
class TensorCheck:
    """The check of one ``x``: the worst of its directions.

    Attributes:
        name: the tensor.
        analytic: ``<grad_x, v>`` of the worst direction.
        numeric: its central difference.
        error: ``|analytic - numeric|``.
        ok: within ``atol + rtol * max(|analytic|, |numeric|) + spread`` in every direction.
        step: the step of the worst direction's final difference.
        kinked: a smaller step was needed somewhere (a kink near the point).
        spread: ``|numeric - `` the estimate of the step before ``|``, the difference's own
            error (0 when the estimates never agreed).
    """

    name: str
    analytic: float
    numeric: float
    error: float
    ok: bool
    step: float
    kinked: bool = False
    spread: float = 0.0


@dataclass
class GradcheckResult:
    """What :func:`gradcheck` found: one row per ``x``; true when every row is ok."""

    rows: list[TensorCheck]
    dtype: str
    atol: float
    rtol: float
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every tensor within tolerance."""
        return all(r.ok for r in self.rows)

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        lines = [f"{'variable':28s} {'backward':>14s} {'finite diff':>14s} {'abs. error':>10s} {'step':>8s}  ok"]
        for r in self.rows:
            flag = "yes" if r.ok else "NO"
            kink = " (kink: smaller step)" if r.kinked else ""
            lines.append(
                f"{r.name:28s} {r.analytic:14.6g} {r.numeric:14.6g} {r.error:10.2e} {r.step:8.1e}  {flag}{kink}"
            )
        verdict = "ok" if self.ok else "FAILED"
        lines.append(f"gradcheck {verdict} in {self.dtype} (atol {self.atol:g}, rtol {self.rtol:g})")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


def gradcheck(
    model: Any,
    xs: Sequence[str],
    y: str,
    *,
    eps: float | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    directions: int = 3,
    dtype: str = "float64",
    feeds: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    registry: GradRegistry | None = None,
    allow_unused: bool = False,
) -> GradcheckResult:
    """Checks the backward graph of ``y`` against central finite differences.

    Args:
        model: a ModelProto (ours or ``onnx``'s).
        xs: the tensors to check: inputs, initializers or intermediate values.
        y: the output differentiated (``dy`` is random).
        eps: the step relative to each tensor's RMS (default 1e-6 in float64, 1e-3 in
            float32); retried smaller where the function is kinked.
        atol: absolute tolerance (default 1e-6; 1e-3 when the check runs in float32).
        rtol: relative tolerance (default 1e-4; 1e-2 in float32).
        directions: random directions per tensor.
        dtype: ``"float64"`` (float tensors converted where possible) or ``"float32"``
            (the model as it is).
        feeds: values of graph inputs (others are random normal; initializers keep
            their values).
        seed: seed of the random inputs, directions and ``dy``.
        registry: gradient rules (default: ``DefaultGradRegistry()``).
        allow_unused: an ``x`` that does not reach ``y`` has a zero gradient (checked
            as such) instead of being an error.

    Returns:
        A :class:`GradcheckResult`: ``bool(result)`` is the verdict, ``str(result)``
        a table.

    Raises:
        OnnxLightError: ``eps`` or ``directions`` not positive, an unknown ``dtype``,
            or the model cannot be differentiated or run.
    """
    if eps is not None and not eps > 0:
        raise OnnxLightError(f"gradcheck: eps must be positive, got {eps}")
    if directions < 1:
        raise OnnxLightError(f"gradcheck: directions must be at least 1, got {directions}")
    if not isinstance(y, str):
        raise OnnxLightError(f"gradcheck: y must be one value name, got {y!r}")
    if dtype not in ("float64", "float32"):
        raise OnnxLightError(f"gradcheck: dtype must be 'float64' or 'float32', not {dtype!r}")
    model = from_onnx(model)
    notes: list[str] = []
    if dtype == "float64":
        model, why = _try_float64(model, xs, y, feeds)
        if why:
            notes.append(f"checked in the model's own precision: {why}")
            dtype = "float32"
    tight = dtype == "float64"
    atol = (DEFAULT_ATOL if tight else 1e-3) if atol is None else atol
    rtol = (DEFAULT_RTOL if tight else 1e-2) if rtol is None else rtol
    check = _Check(model, list(xs), y, registry or DefaultGradRegistry(), feeds or {}, seed)
    check.allow_unused = allow_unused
    rows = [check.tensor(x, eps, atol, rtol, directions) for x in xs]
    return GradcheckResult(rows, dtype, atol, rtol, notes)


def _try_float64(
    model: ModelProto, xs: Sequence[str], y: str, feeds: Mapping[str, np.ndarray] | None
) -> tuple[ModelProto, str]:
    """The float64 model, or the original one and why it could not be converted."""
    try:
        wide = to_float64(model)
        _Check(wide, list(xs), y, DefaultGradRegistry(), feeds or {}, 0).forward()
    except OnnxLightError as err:
        return model, str(err).splitlines()[0]
    return wide, ""


def to_float64(model: ModelProto) -> ModelProto:
    """A copy of ``model`` with every float tensor, type and Cast target in float64."""
    out = ModelProto()
    out.CopyFrom(model)
    _widen_graph(out.graph)
    for fn in out.functions:
        for node in fn.node:
            _widen_node(node)
    return out


def _widen_graph(graph: Any) -> None:
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is not None and tt.elem_type in _FLOATS:
            tt.elem_type = TensorProto.DOUBLE
    graph.initializer[:] = [_widen_tensor(t) for t in graph.initializer]
    for node in graph.node:
        _widen_node(node)


def _widen_node(node: Any) -> None:
    for attr in node.attribute:
        if attr.HasField("t"):
            attr.t.CopyFrom(_widen_tensor(attr.t))
        if attr.name in ("to", "dtype") and attr.type == attr.INT and attr.i in _FLOATS:
            attr.i = TensorProto.DOUBLE
        if attr.HasField("g"):
            _widen_graph(attr.g)
        for g in attr.graphs:
            _widen_graph(g)


def _widen_tensor(t: TensorProto) -> TensorProto:
    if t.data_type not in _FLOATS:
        return t
    wide = numpy_helper.from_array(np.asarray(numpy_helper.to_array(t), dtype=np.float64), t.name)
    return wide


class _Check:
    """The forward and backward sessions of one model and the point they are checked at."""

    def __init__(
        self,
        model: ModelProto,
        xs: list[str],
        y: str,
        registry: GradRegistry,
        feeds: Mapping[str, np.ndarray],
        seed: int,
    ) -> None:
        self.model, self.xs, self.y, self.registry = model, xs, y, registry
        self.rng = np.random.default_rng(seed)
        self.inits = {t.name: np.array(numpy_helper.to_array(t)) for t in model.graph.initializer}
        self.point = {**self.inits, **self._random_inputs(feeds)}
        self._sessions: dict[str, InferenceSession] = {}
        self._inputs: dict[str, set[str]] = {}
        self.allow_unused = False

    def _random_inputs(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for vi in self.model.graph.input:
            if vi.name in feeds:  # a float feed takes the input's (perhaps widened) type
                value = np.asarray(feeds[vi.name])
                want = vi.type.tensor_type.elem_type
                if value.dtype.kind == "f" and want == TensorProto.DOUBLE:
                    value = value.astype(np.float64)
                out[vi.name] = value
            elif vi.name not in self.inits:
                out[vi.name] = _random_feed(vi, self.rng)
        return out

    def forward(self, cut: str | None = None, moved: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """``y`` at the point (``moved`` replacing some values; ``cut`` an intermediate fed)."""
        key = cut or ""
        if key not in self._sessions:
            typed = (
                None
                if cut is None
                else helper.make_tensor_value_info(
                    cut, helper.np_dtype_to_tensor_dtype(self.values[cut].dtype), list(self.values[cut].shape)
                )
            )
            feedable = _feedable(self.model, typed)
            self._sessions[key] = InferenceSession(feedable)
            self._inputs[key] = {i.name for i in feedable.graph.input}
        sess, names = self._sessions[key], self._inputs[key]
        values = {**self.point, **(moved or {})}
        return np.asarray(sess.run([self.y], {k: v for k, v in values.items() if k in names})[0])

    def tensor(self, x: str, eps: float | None, atol: float, rtol: float, directions: int) -> TensorCheck:
        """The worst of ``directions`` random directions for ``x``."""
        if not hasattr(self, "grads"):
            self._backward()
        base = self.values[x]
        grad = self.grads[x].astype(np.float64)
        cut = None if x in self.point else x
        rel = eps if eps is not None else _STEP.get(base.dtype, 1e-3)
        scale = rel * max(1.0, float(np.sqrt(np.mean(np.square(base.astype(np.float64))))) if base.size else 1.0)
        worst: TensorCheck | None = None
        for _ in range(directions):
            v = self.rng.standard_normal(base.shape)
            v /= max(float(np.sqrt(np.mean(v * v))), 1e-300) if v.size else 1.0
            analytic = float(np.sum(grad * v))
            numeric, step, kinked, spread = self._difference(x, cut, base, v, scale, _SETTLED * atol)
            error = abs(analytic - numeric)
            ok = error <= atol + rtol * max(abs(analytic), abs(numeric)) + spread
            row = TensorCheck(x, analytic, numeric, error, ok, step, kinked, spread)
            if worst is None or (not row.ok, row.error) > (not worst.ok, worst.error):
                worst = row
        assert worst is not None
        return worst

    def _difference(
        self, x: str, cut: str | None, base: np.ndarray, v: np.ndarray, step: float, settled: float
    ) -> tuple[float, float, bool, float]:
        """(estimate, its step, retried, spread): a central difference along ``v``, retried
        smaller while successive estimates disagree; the smaller step of two that agree,
        else the larger of the closest two."""

        def estimate(h: float) -> float:
            plus = self.forward(cut, {x: (base + h * v).astype(base.dtype)})
            minus = self.forward(cut, {x: (base - h * v).astype(base.dtype)})
            return float(np.sum(self.dy * (plus.astype(np.float64) - minus.astype(np.float64)))) / (2 * h)

        agree, retries = _AGREE.get(base.dtype, 3e-2), _RETRIES.get(base.dtype, 1)
        seen = [(step, estimate(step))]
        for attempt in range(retries):
            step /= _SHRINK
            seen.append((step, estimate(step)))
            previous, smaller = seen[-2][1], seen[-1][1]
            if math.isclose(previous, smaller, rel_tol=agree, abs_tol=settled):
                return smaller, step, attempt > 0, abs(previous - smaller)

        def gap(i: int) -> float:
            a, b = seen[i][1], seen[i + 1][1]
            return abs(a - b) / max(abs(a), abs(b), 1e-300)

        best = min(range(len(seen) - 1), key=gap)
        (h, coarse), (_, fine) = seen[best], seen[best + 1]
        close = math.isclose(coarse, fine, rel_tol=_LOOSE.get(base.dtype, 3e-2), abs_tol=settled)
        return coarse, h, True, abs(coarse - fine) if close else 0.0

    def _backward(self) -> None:
        """Runs the backward graphs at the point; keeps ``dy``, values and gradients.

        The inputs and initializers among ``xs`` share one backward graph; each
        intermediate value gets its own (differentiating with respect to a value and
        to what it is computed from at once is not one gradient).
        """
        given = [x for x in self.xs if x in self.point]
        groups = ([given] if given else []) + [[x] for x in self.xs if x not in self.point]
        bwds = [
            _GradientOfFunction(self.model, group, self.y, None, self.registry, allow_unused=self.allow_unused)
            for group in groups
        ]
        # each backward's last input is its seed ("dy", or another name when the model has an input dy)
        needed = {n for b in bwds for n in b.input[:-1]} | set(self.xs)
        inner = sorted(needed - set(self.point))
        self.values = {**self.point, **_intermediates(self.model, self.point, inner)}
        y0 = self.forward()
        self.dy = self.rng.standard_normal(y0.shape)
        self.grads: dict[str, np.ndarray] = {}
        for group, bwd in zip(groups, bwds):
            feeds = {n: self.values[n] for n in bwd.input[:-1]}
            feeds[bwd.input[-1]] = self.dy.astype(y0.dtype)
            self.grads.update(zip(group, InferenceSession(bwd).run(None, feeds)))


def _random_feed(vi: Any, rng: np.random.Generator) -> np.ndarray:
    tt = vi.type.tensor_type
    shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim]
    np_dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
    if np_dtype.kind == "f":
        return rng.standard_normal(shape).astype(np_dtype)
    if np_dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(np_dtype)
    return np.zeros(shape, np_dtype)


def _feedable(model: ModelProto, cut: ValueInfoProto | None) -> ModelProto:
    """A copy whose initializers are inputs too and, with ``cut``, whose value ``cut`` is an input."""
    out = ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    declared = {i.name for i in graph.input}
    for t in graph.initializer:
        if t.name not in declared:
            graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    if cut is not None:
        for node in graph.node:
            node.output[:] = [o if o != cut.name else f"{o}__gradcheck_cut" for o in node.output]
        graph.input.append(cut)
    return out


def _intermediates(model: ModelProto, point: Mapping[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    """The values of intermediate ``names`` at the point (one forward run)."""
    if not names:
        return {}
    probe = _feedable(model, None)
    probe.graph.output.extend(ValueInfoProto(name=n) for n in names)
    sess = InferenceSession(probe)
    inputs = {i.name for i in probe.graph.input}
    got = sess.run(names, {k: v for k, v in point.items() if k in inputs})
    return {n: np.asarray(v) for n, v in zip(names, got)}
