"""RNN, GRU and LSTM: one driver for the three recurrences (opsets 7, 14 and 22).

Shapes with ``layout=0`` (the default): X ``[T, N, I]``, W ``[D, G*H, I]``, R ``[D, G*H, H]``,
B ``[D, 2*G*H]`` (the W biases, then the R biases), initial states ``[D, N, H]``, Y
``[T, D, N, H]``; ``layout=1`` puts the batch first (X ``[N, T, I]``, states ``[N, D, H]``, Y
``[N, T, D, H]``). G is the number of gates: 1 for RNN, 3 for GRU (z, r, h), 4 for LSTM
(i, o, f, c). D is 2 for ``direction="bidirectional"``, else 1.

The input projection of all steps is one GEMM per direction (``X W^T``); each step is one
GEMM against R. Batch entries shorter than T (``sequence_lens``) stop updating their state
after their last step and write zeros to Y there; the reverse direction reads each entry's
own valid steps backwards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onnx_light.runtime._registry import kernel

Activation = Callable[[np.ndarray], np.ndarray]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) in four passes; exp(-x) overflowing to inf gives the right 0."""
    out = np.negative(x)
    with np.errstate(over="ignore"):
        np.exp(out, out=out)
    out += 1
    np.reciprocal(out, out=out)
    return out


def _tanh(x: np.ndarray) -> np.ndarray:
    """tanh(x); for float32 as 2 * sigmoid(2x) - 1 (numpy's float32 exp is vectorised, its tanh
    is not on AVX2 machines: 3x faster here, absolute error ~1e-7)."""
    if x.dtype != np.float32:
        return np.tanh(x)
    out = np.multiply(x, -2.0, dtype=np.float32)
    with np.errstate(over="ignore"):
        np.exp(out, out=out)
    out += 1
    np.divide(2.0, out, out=out)
    out -= 1
    return out


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(x, np.zeros((), x.dtype)).astype(x.dtype, copy=False)


#: name (lower case) -> (function of x, alpha, beta; number of parameters it takes; default alpha,
#: default beta). Defaults are those of the ONNX op of that name; Affine and ScaledTanh have no
#: op in the current spec and default to 0 as onnxruntime does.
_ACTIVATIONS: dict[str, tuple[Callable[[np.ndarray, float, float], np.ndarray], int, float, float]] = {
    "relu": (lambda x, a, b: np.maximum(x, 0), 0, 0.0, 0.0),
    "tanh": (lambda x, a, b: _tanh(x), 0, 0.0, 0.0),
    "sigmoid": (lambda x, a, b: _sigmoid(x), 0, 0.0, 0.0),
    "affine": (lambda x, a, b: a * x + b, 2, 0.0, 0.0),
    "leakyrelu": (lambda x, a, b: np.where(x >= 0, x, a * x), 1, 0.01, 0.0),
    "thresholdedrelu": (lambda x, a, b: np.where(x > a, x, 0), 1, 1.0, 0.0),
    "scaledtanh": (lambda x, a, b: a * np.tanh(b * x), 2, 0.0, 0.0),
    "hardsigmoid": (lambda x, a, b: np.clip(a * x + b, 0, 1), 2, 0.2, 0.5),
    "elu": (lambda x, a, b: np.where(x >= 0, x, a * (np.exp(np.minimum(x, 0)) - 1)), 1, 1.0, 0.0),
    "softsign": (lambda x, a, b: x / (1 + np.abs(x)), 0, 0.0, 0.0),
    "softplus": (lambda x, a, b: _softplus(x), 0, 0.0, 0.0),
}


def _activations(
    names: Sequence[str] | None,
    alphas: Sequence[float] | None,
    betas: Sequence[float] | None,
    defaults: Sequence[str],
    num_directions: int,
    clip: float | None,
) -> list[list[Activation]]:
    """The activation functions of each direction (f, g[, h] per direction).

    ``activation_alpha`` and ``activation_beta`` are consumed in the order of the activations by
    the functions that take an alpha (a beta), one value each (as onnxruntime reads them); where
    a list runs out, the function's default applies.
    """
    per_dir = len(defaults)
    names = list(names) if names else list(defaults) * num_directions
    if len(names) == per_dir and num_directions == 2:
        names = names * 2
    if len(names) != per_dir * num_directions:
        raise ValueError(f"activations: expected {per_dir * num_directions} names, got {len(names)}: {names}")
    alpha_left, beta_left = list(alphas or ()), list(betas or ())
    funcs: list[Activation] = []
    for name in names:
        entry = _ACTIVATIONS.get(name.lower())
        if entry is None:
            raise ValueError(f"activations: unknown function {name!r}; known: {sorted(_ACTIVATIONS)}")
        fn, n_params, a, b = entry
        if n_params >= 1 and alpha_left:
            a = float(alpha_left.pop(0))
        if n_params == 2 and beta_left:
            b = float(beta_left.pop(0))
        funcs.append(_bind(fn, a, b, clip))
    return [funcs[d * per_dir : (d + 1) * per_dir] for d in range(num_directions)]


def _bind(fn: Callable[[np.ndarray, float, float], np.ndarray], a: float, b: float, clip: float | None) -> Activation:
    """``fn`` with its alpha and beta, applied to the input clipped to [-clip, clip] when ``clip`` is set."""
    if clip is None:
        return lambda x: fn(x, a, b)
    return lambda x: fn(np.clip(x, -clip, clip), a, b)


class _Sequence:
    """X in time-major order, the valid length of each batch entry, and the step order per direction."""

    def __init__(self, x: np.ndarray, sequence_lens: np.ndarray | None, layout: int) -> None:
        self.x = np.swapaxes(x, 0, 1) if layout == 1 else x
        self.steps, self.batch = self.x.shape[0], self.x.shape[1]
        if sequence_lens is None:
            self.lens = np.full(self.batch, self.steps, dtype=np.int64)
        else:
            self.lens = np.asarray(sequence_lens, dtype=np.int64).reshape(-1)
            if self.lens.shape[0] != self.batch or (self.lens < 0).any() or (self.lens > self.steps).any():
                raise ValueError(f"sequence_lens must hold {self.batch} lengths in [0, {self.steps}], got {self.lens}")
        self.full = bool((self.lens == self.steps).all())
        #: active[t, n]: step t is within entry n's sequence
        self.active = np.arange(self.steps)[:, None] < self.lens[None, :]

    def order(self, reverse: bool) -> np.ndarray | None:
        """``idx[t, n]``: the time index entry n reads at step t, its valid steps backwards (None: forward).

        Each column is its own inverse (a reversed prefix), so the same gather undoes it.
        """
        if not reverse:
            return None
        t = np.arange(self.steps)[:, None]
        return np.where(self.active, self.lens[None, :] - 1 - t, t)

    def reorder(self, values: np.ndarray, idx: np.ndarray | None) -> np.ndarray:
        """``values[idx[t, n], n]`` for every step t and entry n."""
        if idx is None:
            return values
        if self.full:
            return values[::-1]
        return values[idx, np.arange(self.batch)[None, :]]


def _unstack(arr: np.ndarray | None, d: int, layout: int) -> np.ndarray | None:
    """Direction ``d`` of an initial state given as ``[D, N, H]`` (layout 0) or ``[N, D, H]`` (layout 1)."""
    if arr is None:
        return None
    return arr[:, d] if layout == 1 else arr[d]


def _outputs(ys: list[np.ndarray], hs: list[np.ndarray], layout: int) -> tuple[np.ndarray, np.ndarray]:
    """Y ``[T, D, N, H]`` and Y_h ``[D, N, H]`` (or their batch-first forms)."""
    y = np.stack(ys, axis=1)
    h = np.stack(hs, axis=0)
    if layout == 1:
        return np.transpose(y, (2, 0, 1, 3)), np.swapaxes(h, 0, 1)
    return y, h


def _compute_dtype(x: np.ndarray) -> np.dtype:
    return np.dtype(np.float32) if x.dtype.itemsize < 4 else x.dtype


def _directions(direction: str) -> list[bool]:
    if direction == "forward":
        return [False]
    if direction == "reverse":
        return [True]
    if direction == "bidirectional":
        return [False, True]
    raise ValueError(f"direction must be forward, reverse or bidirectional, got {direction!r}")


def _run(
    cell: Callable[[int, np.ndarray, Any, np.ndarray], Any],
    seq: _Sequence,
    projected: np.ndarray,
    state: Any,
    reverse: bool,
    hidden: int,
    dtype: np.dtype,
) -> tuple[np.ndarray, Any]:
    """Runs ``cell(t, x_proj_t, state, active_t) -> state`` over the steps: Y of the direction, last state.

    ``state[0]`` is H; entries whose sequence ended keep their state and get zeros in Y.
    """
    idx = seq.order(reverse)
    xs = seq.reorder(projected, idx)
    y = np.zeros((seq.steps, seq.batch, hidden), dtype)
    for t in range(seq.steps):
        active = seq.active[t]
        new = cell(t, xs[t], state, active)
        if seq.full:
            state = new
        else:
            mask = active[:, None]
            state = tuple(np.where(mask, n, o) for n, o in zip(new, state))
        y[t] = state[0] if seq.full else np.where(active[:, None], state[0], 0)
    return seq.reorder(y, idx), state


def _common(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    sequence_lens: np.ndarray | None,
    layout: int,
    direction: str,
    hidden_size: int | None,
) -> tuple[_Sequence, list[bool], int, np.dtype]:
    seq = _Sequence(x.astype(_compute_dtype(x), copy=False), sequence_lens, layout)
    dirs = _directions(direction)
    if w.shape[0] != len(dirs):
        raise ValueError(f"W has {w.shape[0]} directions, direction={direction!r} needs {len(dirs)}")
    return seq, dirs, int(hidden_size) if hidden_size else r.shape[-1], seq.x.dtype


def _project(seq: _Sequence, w: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """``X W^T + bias`` for every step at once: ``[T, N, G*H]``."""
    t, n, i = seq.x.shape
    out = (seq.x.reshape(t * n, i) @ w.T).reshape(t, n, w.shape[0])
    if bias is not None:
        out += bias
    return out


def _initial(h0: np.ndarray | None, seq: _Sequence, hidden: int, dtype: np.dtype) -> np.ndarray:
    return np.zeros((seq.batch, hidden), dtype) if h0 is None else h0.astype(dtype, copy=False)


def _cast_back(x: np.ndarray, *values: np.ndarray) -> tuple[np.ndarray, ...]:
    return tuple(v.astype(x.dtype, copy=False) for v in values)


@kernel("", "RNN", since=(7, 14, 22))
def rnn(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None = None,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
    *,
    activation_alpha: list[float] | None = None,
    activation_beta: list[float] | None = None,
    activations: list[str] | None = None,
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int | None = None,
    layout: int = 0,
) -> tuple[np.ndarray, ...]:
    """H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb)."""
    seq, dirs, hidden, dtype = _common(x, w, r, sequence_lens, layout, direction, hidden_size)
    acts = _activations(activations, activation_alpha, activation_beta, ("Tanh",), len(dirs), clip)
    ys, hs = [], []
    for d, reverse in enumerate(dirs):
        (f,) = acts[d]
        rt = r[d].astype(dtype, copy=False).T
        bias = None if b is None else (b[d, :hidden] + b[d, hidden:]).astype(dtype, copy=False)
        proj = _project(seq, w[d].astype(dtype, copy=False), bias)

        def cell(t: int, xp: np.ndarray, state: Any, active: np.ndarray, f: Activation = f, rt: np.ndarray = rt) -> Any:
            return (f(xp + state[0] @ rt),)

        h0 = _initial(_unstack(initial_h, d, layout), seq, hidden, dtype)
        y, (h,) = _run(cell, seq, proj, (h0,), reverse, hidden, dtype)
        ys.append(y)
        hs.append(h)
    return _cast_back(x, *_outputs(ys, hs, layout))


@kernel("", "GRU", since=(7, 14, 22))
def gru(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None = None,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
    *,
    activation_alpha: list[float] | None = None,
    activation_beta: list[float] | None = None,
    activations: list[str] | None = None,
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int | None = None,
    layout: int = 0,
    linear_before_reset: int = 0,
) -> tuple[np.ndarray, ...]:
    """z = f(X Wz + H Rz + b), r = f(X Wr + H Rr + b), h = g(X Wh + (r*H) Rh + b) (or
    g(X Wh + r*(H Rh + Rbh) + Wbh) with linear_before_reset), H' = (1 - z) h + z H."""
    seq, dirs, hidden, dtype = _common(x, w, r, sequence_lens, layout, direction, hidden_size)
    acts = _activations(activations, activation_alpha, activation_beta, ("Sigmoid", "Tanh"), len(dirs), clip)
    ys, hs = [], []
    for d, reverse in enumerate(dirs):
        f, g = acts[d]
        rd = r[d].astype(dtype, copy=False)
        r_zr, r_h = rd[: 2 * hidden].T, rd[2 * hidden :].T
        wb = np.zeros(3 * hidden, dtype) if b is None else b[d, : 3 * hidden].astype(dtype, copy=False)
        rb = np.zeros(3 * hidden, dtype) if b is None else b[d, 3 * hidden :].astype(dtype, copy=False)
        # z and r take both biases in the projection; h takes Wbh there, and Rbh where the reset applies
        bias = wb + np.concatenate([rb[: 2 * hidden], np.zeros(hidden, dtype)])
        proj = _project(seq, w[d].astype(dtype, copy=False), bias)
        rbh = rb[2 * hidden :]

        def cell(
            t: int,
            xp: np.ndarray,
            state: Any,
            active: np.ndarray,
            f: Activation = f,
            g: Activation = g,
            r_zr: np.ndarray = r_zr,
            r_h: np.ndarray = r_h,
            rbh: np.ndarray = rbh,
        ) -> Any:
            h = state[0]
            zr = f(xp[:, : 2 * hidden] + h @ r_zr)
            z, rg = zr[:, :hidden], zr[:, hidden:]
            if linear_before_reset:
                cand = g(xp[:, 2 * hidden :] + rg * (h @ r_h + rbh))
            else:
                cand = g(xp[:, 2 * hidden :] + (rg * h) @ r_h + rbh)
            return ((1 - z) * cand + z * h,)

        h0 = _initial(_unstack(initial_h, d, layout), seq, hidden, dtype)
        y, (h,) = _run(cell, seq, proj, (h0,), reverse, hidden, dtype)
        ys.append(y)
        hs.append(h)
    return _cast_back(x, *_outputs(ys, hs, layout))


@kernel("", "LSTM", since=(7, 14, 22))
def lstm(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None = None,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
    initial_c: np.ndarray | None = None,
    p: np.ndarray | None = None,
    *,
    activation_alpha: list[float] | None = None,
    activation_beta: list[float] | None = None,
    activations: list[str] | None = None,
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int | None = None,
    input_forget: int = 0,
    layout: int = 0,
) -> tuple[np.ndarray, ...]:
    """i = f(X Wi + H Ri + Pi*C + b), f' = f(X Wf + H Rf + Pf*C + b), c = g(X Wc + H Rc + b),
    C' = f'*C + i*c, o = f(X Wo + H Ro + Po*C' + b), H' = o*h(C'); gates in the order i, o, f, c.
    ``input_forget`` couples the gates: f' = 1 - i."""
    seq, dirs, hidden, dtype = _common(x, w, r, sequence_lens, layout, direction, hidden_size)
    acts = _activations(activations, activation_alpha, activation_beta, ("Sigmoid", "Tanh", "Tanh"), len(dirs), clip)
    # h is applied to the cell state, which clip does not bound (onnxruntime clips the gates only)
    unclipped = _activations(
        activations, activation_alpha, activation_beta, ("Sigmoid", "Tanh", "Tanh"), len(dirs), None
    )
    ys, hs, cs = [], [], []
    for d, reverse in enumerate(dirs):
        f, g, _ = acts[d]
        hact = unclipped[d][2]
        rt = r[d].astype(dtype, copy=False).T
        bias = None if b is None else (b[d, : 4 * hidden] + b[d, 4 * hidden :]).astype(dtype, copy=False)
        proj = _project(seq, w[d].astype(dtype, copy=False), bias)
        pd = None if p is None else p[d].astype(dtype, copy=False)

        def cell(
            t: int,
            xp: np.ndarray,
            state: Any,
            active: np.ndarray,
            f: Activation = f,
            g: Activation = g,
            hact: Activation = hact,
            rt: np.ndarray = rt,
            pd: np.ndarray | None = pd,
        ) -> Any:
            h, c = state
            gates = h @ rt
            gates += xp
            cand = g(gates[:, 3 * hidden :])
            if pd is None:
                # f applies to the i, o and f gates alike: one call on the three adjacent blocks
                iof = f(gates[:, : 3 * hidden])
                i, o_act, fg = iof[:, :hidden], iof[:, hidden : 2 * hidden], iof[:, 2 * hidden :]
                if input_forget:
                    fg = 1 - i
                c_new = fg * c
                c_new += i * cand
                return (o_act * hact(c_new), c_new)
            i = f(gates[:, :hidden] + pd[:hidden] * c)
            fg = 1 - i if input_forget else f(gates[:, 2 * hidden : 3 * hidden] + pd[2 * hidden :] * c)
            c_new = fg * c
            c_new += i * cand
            o_act = f(gates[:, hidden : 2 * hidden] + pd[hidden : 2 * hidden] * c_new)
            return (o_act * hact(c_new), c_new)

        h0 = _initial(_unstack(initial_h, d, layout), seq, hidden, dtype)
        c0 = _initial(_unstack(initial_c, d, layout), seq, hidden, dtype)
        y, (h, c) = _run(cell, seq, proj, (h0, c0), reverse, hidden, dtype)
        ys.append(y)
        hs.append(h)
        cs.append(c)
    y_out, h_out = _outputs(ys, hs, layout)
    c_out = np.stack(cs, axis=0)
    if layout == 1:
        c_out = np.swapaxes(c_out, 0, 1)
    return _cast_back(x, y_out, h_out, c_out)
