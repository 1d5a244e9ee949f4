"""Rules for the signal ops: DFT and STFT; the windows and MelWeightMatrix pass no gradient.

Complex values travel as a trailing axis of 2 (real, imaginary); a real signal has a
trailing axis of 1. Both transforms are real-linear in the signal, so the gradient is the
adjoint: for the complex DFT matrix F (length m), F^H = m * F^-1, i.e. an inverse DFT of
dY times m (a forward DFT divided by m for ``inverse=1``); zero-padding the signal to
``dft_length`` is undone by a crop and a crop by zero-padding; keeping the real part of the
result undoes a real input; a one-sided spectrum's missing bins get zeros. STFT is bilinear
in (signal, window): the frames' gradient is that adjoint times the window, added back
where each frame was read (frames overlap), and the window's is the frames times the
adjoint, summed over batch and frames.

The windows (Hann, Hamming, Blackman) and MelWeightMatrix read integer sizes only (the
mel filter edges are rounded to FFT bins): their outputs are constants to the pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...onnx_core import TensorProto
from ...onnx_core.gradient import GradContext, Grads, TangentContext, Tangents, same_op
from ._table import jvp_rule, no_grad, refuses, rule
from ._tensor_common import axis_index, const_ints, pad_axes

no_grad("", "HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix")


def _static_int(ctx: GradContext, name: str, what: str) -> int | None:
    """The value of a scalar integer input (None when omitted); refused when computed at run time."""
    if not name:
        return None
    known = const_ints(ctx, name)
    if known is None:
        raise ctx.error(f"needs {what} ({name!r}) as a constant (an initializer or Constant) to differentiate")
    return known[0]


def _static_dim(ctx: GradContext, name: str, axis: int, what: str) -> int:
    shape = ctx.require_shape(name)
    d = shape[axis]
    if not isinstance(d, int):
        raise ctx.error(f"needs the static length of {what} (dim {axis} of {name!r}) to build its adjoint")
    return d


def _crop_or_pad(ctx: GradContext, v: str, rank: int, axis: int, have: int, want: int) -> str:
    """``v`` (length ``have`` along ``axis``) cropped or zero-padded at the end to ``want``."""
    if have == want:
        return v
    if have > want:
        return ctx.op.Slice(v, ctx.ints([0]), ctx.ints([want]), ctx.ints([axis]))
    return pad_axes(ctx, v, rank, [axis], [0], [want - have])


def _real_part(ctx: GradContext, v: str) -> str:
    return ctx.op.Slice(v, ctx.ints([0]), ctx.ints([1]), ctx.ints([-1]))


def _like_input(ctx: GradContext, h: str, x: str) -> str:
    """A complex gradient ``h`` ([..., 2]) in the form of the signal ``x``: its real part
    for a real signal ([..., 1]), as is for a complex one; the first ``Shape(x)[-1]``
    entries of the last axis when the pass does not know which."""
    shape = ctx.shape(x)
    c = shape[-1] if shape else None
    if c == 2:
        return h
    if c == 1:
        return _real_part(ctx, h)
    return ctx.op.Slice(h, ctx.ints([0]), ctx.op.Shape(x, start=-1), ctx.ints([-1]))


def _scaled(ctx: GradContext, v: str, factor: float, like: str) -> str:
    """``v * factor``, the constant in ``like``'s type (a DFT's output type is not inferred)."""
    return v if factor == 1.0 else ctx.op.Mul(v, ctx.const(factor, like=like))


@rule("", "DFT")
def dft_grad(ctx: GradContext, dy: str) -> Grads:
    """dX = the adjoint of (pad/crop to m, DFT or inverse DFT, keep the one-sided bins)
    applied to dY (module docstring); the IRFFT form (inverse and onesided) in ``_irfft_grad``.
    Needs the signal's length along ``axis``, ``dft_length`` and ``axis`` known when the
    pass runs (the batch dims may be symbolic)."""
    x = ctx.inputs[0]
    rank = ctx.require_rank(x)
    a = _static_int(ctx, ctx.input(2), "the axis")
    if a is None:  # DFT-17's attribute (the pass upgrades it to the input of DFT-20)
        a = int(ctx.attr("axis", -2))
    axis = axis_index(a, rank)
    inverse, onesided = int(ctx.attr("inverse", 0)), int(ctx.attr("onesided", 0))
    if not onesided and not ctx.input(1):  # m = n: no crop or pad, n may be known at run time only
        h = ctx.op.DFT(dy, "", ctx.ints(axis), inverse=1 - inverse)
        m = ctx.op.CastLike(ctx.op.Shape(x, start=axis, end=axis + 1), dy)
        h = ctx.op.Div(h, m) if inverse else ctx.op.Mul(h, m)
        return _like_input(ctx, h, x), None, None
    n = _static_dim(ctx, x, axis, "the signal")
    if inverse and onesided:
        return _irfft_grad(ctx, dy, rank, axis, n)
    m = _static_int(ctx, ctx.input(1), "dft_length") or n
    g = dy
    if onesided:  # the bins above m // 2 were dropped: zeros
        g = _crop_or_pad(ctx, g, rank, axis, m // 2 + 1, m)
    # F^H g = m * IDFT(g); the adjoint of IDFT = F^H / m is F / m
    h = ctx.op.DFT(g, "", ctx.ints(axis), inverse=1 - inverse)
    h = _scaled(ctx, h, 1.0 / m if inverse else float(m), dy)
    h = _crop_or_pad(ctx, h, rank, axis, m, n)
    return _like_input(ctx, h, x), None, None


def _irfft_grad(ctx: GradContext, dy: str, rank: int, axis: int, n: int) -> Grads:
    """IRFFT: y_t = (1/m) Σ_k w_k Re(X_k e^{2πikt/m}) over the bins k <= m // 2 (w = 1 at
    DC and, for even m, at the Nyquist bin, 2 between; the imaginary parts there unused),
    so dX_k = (w_k / m) RFFT(dY)_k; the given bins beyond m // 2 get zeros."""
    m = _static_int(ctx, ctx.input(1), "dft_length") or 2 * (n - 1)
    bins = m // 2 + 1
    weights = np.full(bins, 2.0 / m)
    weights[0] = 1.0 / m
    if m % 2 == 0:
        weights[-1] = 1.0 / m
    spectrum = ctx.op.DFT(dy, "", ctx.ints(axis), onesided=1)
    w = ctx.const(weights.reshape((bins,) + (1,) * (rank - 1 - axis)), like=dy)
    return _crop_or_pad(ctx, ctx.op.Mul(spectrum, w), rank, axis, bins, n), None, None


jvp_rule("", "DFT")(same_op(0))


def _stft_geometry(ctx: GradContext) -> tuple[int, int, int, int]:
    """(signal length N, frame step, frame length L, frame count) of an STFT node, known when the pass runs."""
    signal, window = ctx.inputs[0], ctx.input(2)
    n = _static_dim(ctx, signal, 1, "the signal")
    step = _static_int(ctx, ctx.inputs[1], "frame_step")
    length = _static_int(ctx, ctx.input(3), "frame_length")
    if length is None:
        length = _static_dim(ctx, window, 0, "the window") if window else n
    assert step is not None  # frame_step is a required input
    return n, step, length, (n - length) // step + 1


def _frame_index(step: int, length: int, frames: int) -> np.ndarray:
    """idx[f, t] = f * step + t: where each frame reads the signal."""
    return np.arange(frames)[:, None] * step + np.arange(length)[None, :]


@rule("", "STFT")
def stft_grad(ctx: GradContext, dy: str) -> Grads:
    """H = F^H dY per frame (one-sided bins padded with zeros; an inverse DFT times L);
    dSignal = Σ over the frames reading each sample of window * H (its real part for a
    real signal), a ScatterElements-add by ``f * step + t``; dWindow[t] = Σ_{b,f} Re(conj(Z) H)
    with Z the frames. Needs the signal length, frame_step and frame_length static."""
    signal, window = ctx.inputs[0], ctx.input(2)
    n, step, length, frames = _stft_geometry(ctx)
    c = _static_dim(ctx, signal, 2, "the complex axis")
    g = dy
    if int(ctx.attr("onesided", 1)):
        g = _crop_or_pad(ctx, g, 4, 2, length // 2 + 1, length)
    h = _scaled(ctx, ctx.op.DFT(g, "", ctx.ints(2), inverse=1), float(length), dy)  # [B, F, L, 2]
    if c == 1:
        h = _real_part(ctx, h)
    idx = _frame_index(step, length, frames)
    d_signal = d_window = None
    if ctx.needs_grad(0):
        per_frame = ctx.op.Mul(h, ctx.op.Reshape(window, ctx.ints([1, 1, length, 1]))) if window else h
        updates = ctx.op.Reshape(per_frame, ctx.ints([0, frames * length, c]))
        where = ctx.op.Expand(ctx.const(idx.reshape(1, -1, 1), dtype=TensorProto.INT64), ctx.op.Shape(updates))
        d_signal = ctx.op.ScatterElements(ctx.zeros_like(signal), where, updates, axis=1, reduction="add")
    if window and ctx.needs_grad(2):
        z = ctx.op.Gather(signal, ctx.const(idx, dtype=TensorProto.INT64), axis=1)  # [B, F, L, c]
        d_window = ctx.op.ReduceSum(ctx.op.Mul(z, h), ctx.ints([0, 1, 3]), keepdims=0)
    return (d_signal, None, d_window, None)[: len(ctx.inputs)]


@jvp_rule("", "STFT")
def stft_jvp(ctx: TangentContext, ts: Sequence[str | None]) -> Tangents:
    """tY = STFT(tSignal, window) + STFT(signal, tWindow) (bilinear)."""
    inputs = list(ctx.inputs)
    terms = []
    if ts[0] is not None:
        terms.append(ctx.emit_like([ts[0], *inputs[1:]]))
    tw = ts[2] if len(ts) > 2 else None
    if tw is not None:
        terms.append(ctx.emit_like([inputs[0], inputs[1], tw, *inputs[3:]]))
    return ctx.add(*(str(t) for t in terms))


# -- what these rules refuse (the README's table) ----------------------------------------------
refuses(
    "",
    "DFT",
    what="`axis` or `dft_length` computed at run time; with `onesided` or `dft_length`, a signal length "
    "known only at run time",
    why="the adjoint's crops and zero pads are static",
)
refuses(
    "",
    "STFT",
    what="a signal length, `frame_step` or `frame_length` known only at run time",
    why="the frames are read and added back at static positions",
)
