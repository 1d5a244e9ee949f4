"""RNN, GRU and LSTM: one driver for the three recurrences (opsets 7, 14 and 22).

Shapes with ``layout=0`` (the default): X ``[T, N, I]``, W ``[D, G*H, I]``, R ``[D, G*H, H]``,
B ``[D, 2*G*H]`` (the W biases, then the R biases), initial states ``[D, N, H]``, Y
``[T, D, N, H]``; ``layout=1`` puts the batch first (X ``[N, T, I]``, states ``[N, D, H]``, Y
``[N, T, D, H]``). G is the number of gates: 1 for RNN, 3 for GRU (z, r, h), 4 for LSTM
(i, o, f, c). D is 2 for ``direction="bidirectional"``, else 1.

The input projection of all steps is one GEMM per direction (``X W^T``); each step is one
batched GEMM against R for all directions with the same activations. Batch entries shorter
than T (``sequence_lens``) stop updating their state after their last step and write zeros
to Y there; the reverse direction reads each entry's own valid steps backwards.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from onnx_light.runtime import _native
from onnx_light.runtime._registry import kernel

from .conv import _immutable

State = tuple[np.ndarray, ...]
#: one step: (projected input of the step [D, N, G*H], state) -> new state (H first)
Cell = Callable[[np.ndarray, State], State]


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
    is not on AVX2 machines: 3x faster there, absolute error ~1e-7)."""
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
    "scaledtanh": (lambda x, a, b: a * _tanh(b * x), 2, 0.0, 0.0),
    "hardsigmoid": (lambda x, a, b: np.clip(a * x + b, 0, 1), 2, 0.2, 0.5),
    "elu": (lambda x, a, b: np.where(x >= 0, x, a * (np.exp(np.minimum(x, 0)) - 1)), 1, 1.0, 0.0),
    "softsign": (lambda x, a, b: x / (1 + np.abs(x)), 0, 0.0, 0.0),
    "softplus": (lambda x, a, b: _softplus(x), 0, 0.0, 0.0),
}


@dataclass(frozen=True)
class Act:
    """One activation function with its alpha and beta, its input clipped to ``[-clip, clip]``."""

    name: str
    alpha: float
    beta: float
    clip: float | None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.clip is not None:
            x = np.clip(x, -self.clip, self.clip)
        return _ACTIVATIONS[self.name][0](x, self.alpha, self.beta)

    def unclipped(self) -> Act:
        """The same function without the clip (LSTM's h acts on the cell state, which clip leaves alone)."""
        return Act(self.name, self.alpha, self.beta, None)


def parse_activations(
    names: Sequence[str] | None,
    alphas: Sequence[float] | None,
    betas: Sequence[float] | None,
    defaults: Sequence[str],
    num_directions: int,
    clip: float | None,
) -> list[tuple[Act, ...]]:
    """The activation functions of each direction (f, g[, h] per direction).

    ``activation_alpha`` and ``activation_beta`` are consumed in the order of the activations by
    the functions that take an alpha (a beta), one value each (as onnxruntime reads them); where
    a list runs out, the function's default applies.
    """
    key = (tuple(names or ()), tuple(alphas or ()), tuple(betas or ()), tuple(defaults), num_directions, clip)
    return list(_parsed_activations(*key))


@functools.lru_cache(maxsize=256)
def _parsed_activations(
    names: tuple[str, ...],
    alphas: tuple[float, ...],
    betas: tuple[float, ...],
    defaults: tuple[str, ...],
    num_directions: int,
    clip: float | None,
) -> tuple[tuple[Act, ...], ...]:
    """:func:`parse_activations` on hashable arguments, kept per node's attributes (the Acts are
    frozen: a session's every run of a node asks the same question)."""
    per_dir = len(defaults)
    names = names if names else defaults * num_directions
    if len(names) == per_dir and num_directions == 2:
        names = names * 2
    if len(names) != per_dir * num_directions:
        raise ValueError(f"activations: expected {per_dir * num_directions} names, got {len(names)}: {names}")
    alpha_left, beta_left = list(alphas), list(betas)
    acts: list[Act] = []
    for name in names:
        entry = _ACTIVATIONS.get(name.lower())
        if entry is None:
            raise ValueError(f"activations: unknown function {name!r}; known: {sorted(_ACTIVATIONS)}")
        _, n_params, a, b = entry
        if n_params >= 1 and alpha_left:
            a = float(alpha_left.pop(0))
        if n_params == 2 and beta_left:
            b = float(beta_left.pop(0))
        acts.append(Act(name.lower(), a, b, clip))
    return tuple(tuple(acts[d * per_dir : (d + 1) * per_dir]) for d in range(num_directions))


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

    @functools.cached_property
    def active(self) -> np.ndarray:
        """active[t, n]: step t is within entry n's sequence (the numpy step loop's mask)."""
        return np.arange(self.steps)[:, None] < self.lens[None, :]

    def reorder(self, values: np.ndarray, reverse: bool) -> np.ndarray:
        """``values[idx[t, n], n]``: each entry's valid steps backwards when ``reverse``.

        Each column of ``idx`` is its own inverse (a reversed prefix), so the same call undoes it.
        """
        if not reverse:
            return values
        if self.full:
            return values[::-1]
        t = np.arange(self.steps)[:, None]
        idx = np.where(self.active, self.lens[None, :] - 1 - t, t)
        return values[idx, np.arange(self.batch)[None, :]]


def _directions(direction: str) -> list[bool]:
    """The reverse flag of each direction."""
    flags = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}.get(direction)
    if flags is None:
        raise ValueError(f"direction must be forward, reverse or bidirectional, got {direction!r}")
    return flags


def _groups(acts: list[tuple[Act, ...]]) -> list[list[int]]:
    """Directions that share their activations run through one batched step loop."""
    if len(acts) == 2 and acts[0] == acts[1]:
        return [[0, 1]]
    return [[d] for d in range(len(acts))]


@dataclass
class _Recurrence:
    """What every recurrent op shares: the time-major input, directions, sizes, dtype."""

    seq: _Sequence
    reverse: list[bool]
    hidden: int
    dtype: np.dtype
    layout: int

    @classmethod
    def of(
        cls, x: np.ndarray, w: np.ndarray, r: np.ndarray, lens: np.ndarray | None, layout: int, direction: str
    ) -> _Recurrence:
        dtype = np.dtype(np.float32) if x.dtype.itemsize < 4 else x.dtype  # float16 computed in float32
        seq = _Sequence(x.astype(dtype, copy=False), lens, layout)
        reverse = _directions(direction)
        if w.shape[0] != len(reverse):
            raise ValueError(f"W has {w.shape[0]} directions, direction={direction!r} needs {len(reverse)}")
        return cls(seq, reverse, r.shape[-1], dtype, layout)

    def cast(self, a: np.ndarray) -> np.ndarray:
        return a.astype(self.dtype, copy=False)

    def projected(self, w: np.ndarray, bias: np.ndarray | None, dirs: list[int]) -> np.ndarray:
        """``X W_d^T + bias_d`` for every step, each direction in its step order: ``[T, D', N, G*H]``."""
        t, n, i = self.seq.x.shape
        flat = self.seq.x.reshape(t * n, i)
        out = []
        for d in dirs:
            p = (flat @ self.cast(w[d]).T).reshape(t, n, w.shape[1])
            if bias is not None:
                p += self.cast(bias[d])
            out.append(self.seq.reorder(p, self.reverse[d]))
        return np.stack(out, axis=1)

    def initial(self, state: np.ndarray | None, dirs: list[int]) -> np.ndarray:
        """The initial state of directions ``dirs``: ``[D', N, H]``."""
        if state is None:
            return np.zeros((len(dirs), self.seq.batch, self.hidden), self.dtype)
        per_dir = np.swapaxes(state, 0, 1) if self.layout == 1 else state
        return self.cast(per_dir[dirs])

    def run(self, cell: Cell, xs: np.ndarray, state: State, dirs: list[int]) -> tuple[list[np.ndarray], State]:
        """Runs ``cell`` over the steps; returns Y per direction (``[T, N, H]``, in time order) and the last state."""
        seq = self.seq
        y = np.zeros((seq.steps, len(dirs), seq.batch, self.hidden), self.dtype)
        for t in range(seq.steps):
            new = cell(xs[t], state)
            if seq.full:
                state = new
                y[t] = new[0]
            else:
                mask = seq.active[t][None, :, None]
                state = tuple(np.where(mask, n, o) for n, o in zip(new, state))
                y[t] = np.where(mask, state[0], 0)
        return [seq.reorder(y[:, k], self.reverse[d]) for k, d in enumerate(dirs)], state

    def outputs(self, y: np.ndarray, states: list[np.ndarray], like: np.ndarray) -> tuple[np.ndarray, ...]:
        """Y ``[T, D, N, H]`` and the last states ``[D, N, H]`` (batch first for layout 1), in X's dtype."""
        if self.layout == 1:
            y = np.transpose(y, (2, 0, 1, 3))
            states = [np.swapaxes(s, 0, 1) for s in states]
        return tuple(v.astype(like.dtype, copy=False) for v in (y, *states))


def _drive(
    rec: _Recurrence,
    acts: list[tuple[Act, ...]],
    make_cell: Callable[[list[int], tuple[Act, ...]], tuple[Cell, np.ndarray, State]],
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Runs each group of directions: Y ``[T, D, N, H]``, and each state stacked over the directions."""
    ys: list[np.ndarray] = [np.empty(0)] * len(rec.reverse)
    finals: list[list[np.ndarray]] = []
    for dirs in _groups(acts):
        cell, xs, state = make_cell(dirs, acts[dirs[0]])
        y, last = rec.run(cell, xs, state, dirs)
        for k, d in enumerate(dirs):
            ys[d] = y[k]
        finals.append(list(last))
    # states of each kind (H, C), directions in order
    return np.stack(ys, axis=1), [np.concatenate([f[k] for f in finals], axis=0) for k in range(len(finals[0]))]


_OPS = {"RNN": 0, "GRU": 1, "LSTM": 2}
#: activation name -> its number in src/recurrent.cpp (the order of _ACTIVATIONS)
_KINDS = {name: k for k, name in enumerate(_ACTIVATIONS)}


#: per thread: the native projection's result buffer (see _projected)
_SCRATCH = threading.local()
#: (id(W or R), what) -> (a weak reference to the array, its native packing): see _packed
_PACKED: dict[tuple[int, str], tuple[weakref.ref[np.ndarray], np.ndarray | None]] = {}
_PACKED_LIMIT = 64  # packed weights kept at most (a session's recurrent layers)


def _packed(w: np.ndarray, what: str, pack: Callable[[], np.ndarray | None]) -> np.ndarray | None:
    """``pack()``, the native packing of weights array ``w`` (``what``: which packing), kept per
    array while it lives when nothing can write it (a session's initializers; a stale packing would
    be a silent wrong answer), else None (the kernel packs per call, or does without)."""
    if not _immutable(w):
        return None
    key = (id(w), what)
    hit = _PACKED.get(key)
    if hit is not None and hit[0]() is w:
        return hit[1]
    packed = pack()
    if packed is not None:
        packed.flags.writeable = False
    if len(_PACKED) >= _PACKED_LIMIT:
        _PACKED.clear()

    def forget(ref: weakref.ref[np.ndarray], key: tuple[int, str] = key) -> None:
        if _PACKED.get(key, (None,))[0] is ref:
            del _PACKED[key]

    _PACKED[key] = (weakref.ref(w, forget), packed)
    return packed


def _projected(x: np.ndarray, w: np.ndarray, cols: int) -> np.ndarray:
    """``x W^T`` (x ``[M, I]``, W ``[D, G*H, I]`` float32): the native register-tiled GEMM on W packed
    once for constant weights (1.05-1.3x faster than numpy's BLAS here), numpy's otherwise."""
    flat = w.reshape(cols, x.shape[1])
    ext = _native.NATIVE
    packed = None
    if ext is not None and hasattr(ext, "project") and w.dtype == np.float32:
        # (packing per call costs what the packed GEMM saves: only constant weights take it)
        packed = _packed(w, "projection", lambda: ext.pack_weights(np.ascontiguousarray(flat)))
    if packed is None or x.dtype != np.float32:
        return np.matmul(x, flat.astype(x.dtype, copy=False).T)
    assert ext is not None
    # into this thread's buffer kept between calls: the result lives only within the kernel's call
    # (the step loop reads it), and megabytes of fresh pages cost ~1 ms of page faults per call
    size = x.shape[0] * cols
    buf: np.ndarray | None = getattr(_SCRATCH, "xs", None)
    if buf is None or buf.size < size:
        buf = _SCRATCH.xs = np.empty(size, np.float32)
    out = buf[:size].reshape(x.shape[0], cols)
    ext.project(np.ascontiguousarray(x), packed, cols, out)
    return out


def _native_steps(
    op: str,
    rec: _Recurrence,
    w: np.ndarray,
    r: np.ndarray,
    bias: np.ndarray | None,
    states: list[np.ndarray | None],
    acts: list[tuple[Act, ...]],
    extra: dict[str, np.ndarray | None] | None = None,
    input_forget: int = 0,
    linear_before_reset: int = 0,
) -> tuple[np.ndarray, list[np.ndarray]] | None:
    """Y ``[T, D, N, H]`` and the last states by the native step loop (``src/recurrent.cpp``), or None
    where it does not apply (no extension, ``ONNX_LIGHT_PURE_PYTHON=1``, not float32, negative clip):
    then :func:`_drive` runs its numpy twin. ``extra`` holds the LSTM's ``p`` or the GRU's ``rbh``.

    The input projection of all steps and directions is one GEMM (numpy's BLAS) in time order; the
    native loop adds the bias and reads the reverse direction's steps backwards itself.
    """
    flat = [a for per_dir in acts for a in per_dir]
    clip = flat[0].clip
    if not _native.RECURRENT or rec.dtype != np.float32 or (clip is not None and not clip >= 0):
        return None
    assert _native.NATIVE is not None
    seq = rec.seq
    t, n, i = seq.x.shape
    d, gh = len(rec.reverse), w.shape[1]
    xs = _projected(seq.x.reshape(t * n, i), w, d * gh)
    dirs = list(range(d))
    init = [np.ascontiguousarray(rec.initial(s, dirs)) for s in states]
    extra = {k: None if v is None else np.ascontiguousarray(rec.cast(v)) for k, v in (extra or {}).items()}
    ext = _native.NATIVE
    packed = None
    if r.dtype == np.float32 and hasattr(ext, "pack_recurrent"):
        # R^T packed once for a constant R (per call: ~0.1 ms at H = 128 of crnn's ~1 ms LSTM layers)
        packed = _packed(r, op, lambda: ext.pack_recurrent(_OPS[op], np.ascontiguousarray(r)))
    y, h, c = ext.recurrent(
        _OPS[op],
        xs.reshape(t, n, d * gh),
        np.ascontiguousarray(rec.cast(r)),
        init[0],
        init[1] if len(init) > 1 else None,
        extra.get("p"),
        extra.get("rbh"),
        None if bias is None else np.ascontiguousarray(rec.cast(bias)),
        seq.lens,
        rec.reverse,
        [_KINDS[a.name] for a in flat],
        [a.alpha for a in flat],
        [a.beta for a in flat],
        -1.0 if clip is None else float(clip),
        bool(input_forget),
        bool(linear_before_reset),
        packed,
    )
    return y, [h] if c is None else [h, c]


def _transposed(r: np.ndarray, rec: _Recurrence, dirs: list[int], rows: slice = slice(None)) -> np.ndarray:
    """``R_d[rows]^T`` of directions ``dirs``, contiguous: ``[D', H, rows]``."""
    return np.ascontiguousarray(np.swapaxes(rec.cast(r[dirs][:, rows]), 1, 2))


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
    rec = _Recurrence.of(x, w, r, sequence_lens, layout, direction)
    h = rec.hidden
    bias = None if b is None else b[:, :h] + b[:, h:]

    def make_cell(dirs: list[int], acts: tuple[Act, ...]) -> tuple[Cell, np.ndarray, State]:
        (f,) = acts
        rt = _transposed(r, rec, dirs)

        def cell(xp: np.ndarray, state: State) -> State:
            pre = np.matmul(state[0], rt)
            pre += xp
            return (f(pre),)

        return cell, rec.projected(w, bias, dirs), (rec.initial(initial_h, dirs),)

    acts = parse_activations(activations, activation_alpha, activation_beta, ("Tanh",), len(rec.reverse), clip)
    done = _native_steps("RNN", rec, w, r, bias, [initial_h], acts)
    y, states = done if done is not None else _drive(rec, acts, make_cell)
    return rec.outputs(y, states, x)


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
    rec = _Recurrence.of(x, w, r, sequence_lens, layout, direction)
    h = rec.hidden
    b_given = b
    if b is None:
        b = np.zeros((len(rec.reverse), 6 * h), rec.dtype)
    # z and r take both biases in the projection; h takes Wbh there, and Rbh where the reset applies
    bias = b[:, : 3 * h] + np.concatenate([b[:, 3 * h : 5 * h], np.zeros_like(b[:, :h])], axis=1)

    def make_cell(dirs: list[int], acts: tuple[Act, ...]) -> tuple[Cell, np.ndarray, State]:
        f, g = acts
        r_zr, r_h = _transposed(r, rec, dirs, slice(0, 2 * h)), _transposed(r, rec, dirs, slice(2 * h, 3 * h))
        rbh = rec.cast(b[dirs, 5 * h :])[:, None, :]

        def cell(xp: np.ndarray, state: State) -> State:
            prev = state[0]
            zr = np.matmul(prev, r_zr)
            zr += xp[..., : 2 * h]
            zr = f(zr)
            z, rg = zr[..., :h], zr[..., h:]
            if linear_before_reset:
                hr = np.matmul(prev, r_h)
                hr += rbh
                hr *= rg
            else:
                hr = np.matmul(rg * prev, r_h)
                hr += rbh
            hr += xp[..., 2 * h :]
            cand = g(hr)
            # (1 - z) * cand + z * prev
            new = prev - cand
            new *= z
            new += cand
            return (new,)

        return cell, rec.projected(w, bias, dirs), (rec.initial(initial_h, dirs),)

    acts = parse_activations(
        activations, activation_alpha, activation_beta, ("Sigmoid", "Tanh"), len(rec.reverse), clip
    )
    rbh = None if b_given is None else b_given[:, 5 * h :]
    done = _native_steps("GRU", rec, w, r, bias, [initial_h], acts, {"rbh": rbh}, 0, linear_before_reset)
    y, states = done if done is not None else _drive(rec, acts, make_cell)
    return rec.outputs(y, states, x)


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
    rec = _Recurrence.of(x, w, r, sequence_lens, layout, direction)
    h = rec.hidden
    bias = None if b is None else b[:, : 4 * h] + b[:, 4 * h :]

    def make_cell(dirs: list[int], acts: tuple[Act, ...]) -> tuple[Cell, np.ndarray, State]:
        f, g, hact = acts[0], acts[1], acts[2].unclipped()
        rt = _transposed(r, rec, dirs)
        peep = None if p is None else rec.cast(p[dirs])[:, None, :]

        def cell(xp: np.ndarray, state: State) -> State:
            prev_h, prev_c = state
            gates = np.matmul(prev_h, rt)
            gates += xp
            cand = g(gates[..., 3 * h :])
            if peep is None:
                # f applies to the i, o and f gates alike: one call on the three adjacent blocks
                iof = f(gates[..., : 3 * h])
                i, o_act = iof[..., :h], iof[..., h : 2 * h]
                fg = 1 - i if input_forget else iof[..., 2 * h :]
                c_new = fg * prev_c
                c_new += i * cand
            else:
                i = f(gates[..., :h] + peep[..., :h] * prev_c)
                fg = 1 - i if input_forget else f(gates[..., 2 * h : 3 * h] + peep[..., 2 * h :] * prev_c)
                c_new = fg * prev_c
                c_new += i * cand
                o_act = f(gates[..., h : 2 * h] + peep[..., h : 2 * h] * c_new)
            return (o_act * hact(c_new), c_new)

        state = (rec.initial(initial_h, dirs), rec.initial(initial_c, dirs))
        return cell, rec.projected(w, bias, dirs), state

    acts = parse_activations(
        activations, activation_alpha, activation_beta, ("Sigmoid", "Tanh", "Tanh"), len(rec.reverse), clip
    )
    done = _native_steps("LSTM", rec, w, r, bias, [initial_h, initial_c], acts, {"p": p}, input_forget)
    y, states = done if done is not None else _drive(rec, acts, make_cell)
    return rec.outputs(y, states, x)
