"""Window geometry of convolutions and pooling, computed once for rules, inference and kernels.

Facts of the ONNX spec (Conv, ConvTranspose, MaxPool, AveragePool, LpPool docs):

* ``auto_pad``: NOTSET uses ``pads`` (begin values then end values), VALID pads nothing,
  SAME_UPPER / SAME_LOWER pad so that ``out = ceil(in / stride)`` (ConvTranspose:
  ``out = in * stride``), the total split in two halves; an odd total puts the extra cell
  at the end for SAME_UPPER and at the start for SAME_LOWER.
* ConvTranspose before opset 11 documented the opposite split of an imposed padding
  (``output_shape`` or SAME_*): ``If (auto_pads != SAME_UPPER): pads[start] = total / 2``,
  so SAME_UPPER put the extra cell at the start (``legacy=True`` below).
* Output size of a window op: ``floor((in + begin + end - ((k - 1) * d + 1)) / s) + 1``,
  rounded up with ``ceil_mode``, where a last window that would start in the end padding
  is dropped (as onnxruntime does).

Spatial dims may be unknown when the gradient pass runs (None, or a symbol, which the
geometry keeps as None): the attributes still fix the pads, except SAME_* with a stride
> 1, whose total ``(ceil(n / s) - 1) * s + (k - 1) * d + 1 - n`` depends on ``n mod s``
(:func:`runtime_pad_axes`; resolving them raises :class:`RunTimePads`). With stride 1 the
total is ``(k - 1) * d`` whatever ``n``; a ConvTranspose's SAME_* pads total
``(k - 1) * d + 1 + output_padding - s`` whatever ``n``. Output dims are None where the
input's are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "SAME_PADS",
    "Dim",
    "RunTimePads",
    "runtime_pad_axes",
    "Window",
    "TransposeWindow",
    "split_padding",
    "legacy_transpose_split",
    "resolve_pads",
    "window",
    "window_out_dim",
    "output_size",
    "transpose_window",
    "transpose_out_dim",
]

SAME_PADS = ("SAME_UPPER", "SAME_LOWER")
"""The ``auto_pad`` values whose padding is derived from the output size."""

Dim = int | str | None
"""A spatial dim: an int, a symbol, or None when unknown."""


class RunTimePads(ValueError):
    """The pads of a window depend on a size only known at run time."""


def _known(d: Any) -> int | None:
    """``d`` as an int, or None for a symbol or an unknown dim."""
    return int(d) if isinstance(d, (int, np.integer)) else None


def runtime_pad_axes(size: Sequence[Dim], strides: Sequence[int] | None, auto_pad: str) -> list[int]:
    """The spatial axes whose Conv / pooling pads are only known at run time.

    Those are the axes of unknown size with a stride > 1 under ``auto_pad=SAME_*``.

    Args:
        size: the input's spatial dims (int, symbol or None).
        strides: per axis (default 1).
        auto_pad: the ``auto_pad`` attribute.

    Returns:
        The axes (0 = the first spatial axis), empty when every pad is known.
    """
    if auto_pad not in SAME_PADS:
        return []
    strides_ = [int(s) for s in strides] if strides else [1] * len(size)
    return [i for i, (n, s) in enumerate(zip(size, strides_)) if _known(n) is None and s != 1]


def legacy_transpose_split(opset: int) -> bool:
    """Whether ConvTranspose at ``opset`` splits an odd imposed padding the opset-1 way."""
    return opset < 11


def split_padding(total: int, auto_pad: str, *, legacy: bool = False) -> tuple[int, int]:
    """Begin and end pads of one axis from its total padding.

    Args:
        total: the total padding of the axis.
        auto_pad: SAME_UPPER puts an odd cell at the end, anything else at the start.
        legacy: ConvTranspose before opset 11 (the opposite side).
            A negative total (ConvTranspose SAME_* with stride > kernel) is floored as
            onnx's reference implementation does (onnxruntime and onnx's shape inference
            give one cell fewer there).

    Returns:
        ``(begin, end)`` with ``begin + end == total``.
    """
    extra_at_end = (auto_pad == "SAME_UPPER") != legacy
    begin = total // 2 if extra_at_end else total - total // 2
    return begin, total - begin


def _span(k: int, d: int) -> int:
    return (k - 1) * d + 1


def resolve_pads(
    size: Sequence[Dim],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int] | None,
    auto_pad: str,
) -> tuple[list[int], list[int]]:
    """Begin and end pads per spatial axis of a Conv / pooling window after ``auto_pad``.

    Args:
        size: the input's spatial dims (a symbol or None where unknown).
        kernel: the kernel's spatial dims.
        strides: per axis.
        dilations: per axis.
        pads: the ``pads`` attribute (begins then ends), or None.
        auto_pad: the ``auto_pad`` attribute.

    Returns:
        ``(begin, end)`` lists.

    Raises:
        RunTimePads: SAME_* pads of an axis in :func:`runtime_pad_axes`.
    """
    nd = len(size)
    if auto_pad in SAME_PADS:
        late = runtime_pad_axes(size, strides, auto_pad)
        if late:
            raise RunTimePads(
                f"auto_pad={auto_pad} with strides > 1 pads spatial axes {late} by amounts that depend on "
                f"their sizes {[size[i] for i in late]}, only known at run time"
            )
        begin, end = [], []
        for n, k, s, d in zip(size, kernel, strides, dilations):
            m = _known(n)
            # (stride 1, size unknown: the total is (k - 1) * d whatever the size)
            total = _span(k, d) - 1 if m is None else max(0, (-(-m // s) - 1) * s + _span(k, d) - m)
            b, e = split_padding(total, auto_pad)
            begin.append(b)
            end.append(e)
        return begin, end
    if auto_pad == "VALID" or not pads:
        return [0] * nd, [0] * nd
    return [int(p) for p in pads[:nd]], [int(p) for p in pads[nd:]]


def output_size(n: int, k: int, s: int, d: int, b: int = 0, e: int = 0, ceil_mode: bool = False) -> int:
    """One output dim of a Conv / pooling window: input ``n``, kernel ``k``, stride ``s``,
    dilation ``d``, pads ``b`` and ``e`` (see the module docstring for ``ceil_mode``)."""
    room = n + b + e - _span(k, d)
    o = (-(-room // s) if ceil_mode else room // s) + 1
    return o - 1 if ceil_mode and (o - 1) * s >= n + b else o


class Window:
    """Resolved geometry of a Conv or pooling window along each spatial axis.

    Attributes:
        size: input spatial dims. kernel: kernel dims. out: output spatial dims.
        strides, dilations: per axis. begin, end: pads.
        ``size`` and ``out`` hold None where a dim is only known at run time.
    """

    __slots__ = ("size", "kernel", "strides", "dilations", "begin", "end", "out")

    def __init__(
        self,
        size: list[Any],
        kernel: list[int],
        strides: list[int],
        dilations: list[int],
        begin: list[int],
        end: list[int],
        out: list[Any],
    ) -> None:
        self.size, self.kernel, self.strides, self.dilations = size, kernel, strides, dilations
        self.begin, self.end, self.out = begin, end, out

    @property
    def nd(self) -> int:
        """The number of spatial axes."""
        return len(self.size)

    @property
    def is_static(self) -> bool:
        """True when every input and output spatial dim is known (an int)."""
        return all(isinstance(d, int) for d in self.size) and all(isinstance(d, int) for d in self.out)

    def _need_static(self, what: str) -> None:
        if not self.is_static:
            raise RunTimePads(f"{what} needs static spatial dims (got {self.size} -> {self.out})")

    def counts(self, include_pad: bool = False) -> np.ndarray:
        """The cells each window covers inside the input (or inside input + pads), shaped ``out``.

        The average pooling divisor: with ``ceil_mode`` a last window may overhang even
        the end pad, and those cells never count. Needs :attr:`is_static`.
        """
        self._need_static("Window.counts")
        total = np.ones((), dtype=np.int64)
        for n, k, s, d, b, e, o in self._axes():
            lo, hi = (-b, n + e) if include_pad else (0, n)
            pos = np.arange(o)[:, None] * s + np.arange(k)[None, :] * d - b
            total = np.multiply.outer(total, ((pos >= lo) & (pos < hi)).sum(axis=1))
        return total

    def overhangs(self) -> bool:
        """True when some window reaches past the end pad (possible with ``ceil_mode``).

        Needs :attr:`is_static`.
        """
        self._need_static("Window.overhangs")
        return any((o - 1) * s + (k - 1) * d - b >= n + e for n, k, s, d, b, e, o in self._axes())

    def _axes(self) -> zip[tuple[int, int, int, int, int, int, int]]:
        return zip(self.size, self.kernel, self.strides, self.dilations, self.begin, self.end, self.out)


def window(
    size: Sequence[Dim],
    kernel: Sequence[int],
    strides: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    auto_pad: str = "NOTSET",
    ceil_mode: bool = False,
) -> Window:
    """The geometry of a Conv or pooling node.

    Args:
        size: the input's spatial dims (a symbol or None where unknown: that output dim
            is None).
        kernel: the kernel's spatial dims.
        strides: per axis (default 1).
        dilations: per axis (default 1).
        pads: the ``pads`` attribute, or None.
        auto_pad: the ``auto_pad`` attribute.
        ceil_mode: pooling's ``ceil_mode``.

    Returns:
        The resolved :class:`Window`.

    Raises:
        RunTimePads: SAME_* pads of an axis in :func:`runtime_pad_axes`.
    """
    nd = len(size)
    size_, kernel_ = [_known(n) for n in size], [int(k) for k in kernel]
    strides_ = [int(s) for s in strides] if strides else [1] * nd
    dilations_ = [int(d) for d in dilations] if dilations else [1] * nd
    begin, end = resolve_pads(size_, kernel_, strides_, dilations_, pads, auto_pad)
    out = [
        None if n is None else output_size(n, k, s, d, b, e, ceil_mode)
        for n, k, s, d, b, e in zip(size_, kernel_, strides_, dilations_, begin, end)
    ]
    return Window(size_, kernel_, strides_, dilations_, begin, end, out)


def window_out_dim(
    d: Dim, k: Dim, stride: int, pad_begin: int, pad_end: int, dilation: int, auto_pad: str, ceil_mode: bool
) -> Dim:
    """One output dim of a Conv or pooling window; None when it depends on an unknown dim."""
    if not isinstance(d, int):
        return None
    if auto_pad in SAME_PADS:
        return -(-d // stride)
    if not isinstance(k, int):
        return None
    if auto_pad == "VALID":
        pad_begin = pad_end = 0
    return output_size(d, k, stride, dilation, pad_begin, pad_end, ceil_mode)


class TransposeWindow:
    """Resolved geometry of a ConvTranspose along each spatial axis.

    Attributes:
        size: input spatial dims. kernel: kernel dims. strides, dilations: per axis.
        output_padding: per axis.
        full: the uncropped output, ``(n - 1) * s + (k - 1) * d + 1 + output_padding``.
        begin, end: the pads cropped from ``full``. out: output spatial dims.
        ``size``, ``full`` and ``out`` hold None where a dim is only known at run time.
    """

    __slots__ = ("size", "kernel", "strides", "dilations", "output_padding", "full", "begin", "end", "out")

    def __init__(
        self,
        size: list[Any],
        kernel: list[int],
        strides: list[int],
        dilations: list[int],
        full: list[Any],
        begin: list[int],
        end: list[int],
        output_padding: list[int] | None = None,
    ) -> None:
        self.size, self.kernel, self.strides, self.dilations = size, kernel, strides, dilations
        self.output_padding = output_padding if output_padding is not None else [0] * len(size)
        self.full, self.begin, self.end = full, begin, end
        self.out: list[Any] = [None if f is None else f - b - e for f, b, e in zip(full, begin, end)]

    @property
    def is_static(self) -> bool:
        """True when every input and output spatial dim is known (an int)."""
        return all(isinstance(d, int) for d in self.size) and all(isinstance(d, int) for d in self.out)


def transpose_window(
    size: Sequence[Dim],
    kernel: Sequence[int],
    strides: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    auto_pad: str = "NOTSET",
    output_padding: Sequence[int] | None = None,
    output_shape: Sequence[int] | None = None,
    *,
    legacy: bool = False,
) -> TransposeWindow:
    """The geometry of a ConvTranspose node.

    Args:
        size: the input's spatial dims (a symbol or None where unknown: that output dim
            is None; the pads are known all the same, except with ``output_shape``).
        kernel: the kernel's spatial dims.
        strides: per axis (default 1).
        dilations: per axis (default 1).
        pads: the ``pads`` attribute, or None.
        auto_pad: the ``auto_pad`` attribute.
        output_padding: the ``output_padding`` attribute, or None.
        output_shape: the ``output_shape`` attribute (its last ``nd`` values), or None.
        legacy: the opset-1 split of an imposed padding (see
            :func:`legacy_transpose_split`).

    Returns:
        The resolved :class:`TransposeWindow`.

    Raises:
        RunTimePads: ``output_shape`` on an input of unknown spatial size (the pads are
            ``full - output_shape``).
    """
    nd = len(size)
    size_, kernel_ = [_known(n) for n in size], [int(k) for k in kernel]
    strides_ = [int(s) for s in strides] if strides else [1] * nd
    dilations_ = [int(d) for d in dilations] if dilations else [1] * nd
    extra = [int(e) for e in output_padding] if output_padding else [0] * nd
    full = [
        None if n is None else (n - 1) * s + _span(k, d) + e
        for n, s, k, d, e in zip(size_, strides_, kernel_, dilations_, extra)
    ]
    if output_shape or auto_pad in SAME_PADS:
        if output_shape:
            target = [int(t) for t in output_shape][-nd:]
            known = [f for f in full if f is not None]
            if len(known) != nd:
                raise RunTimePads(
                    f"output_shape={target} on an input with spatial dims {list(size)}: the pads depend "
                    "on the input's size, only known at run time"
                )
            totals = [f - t for f, t in zip(known, target)]
        else:  # out = n * s: the total is (k - 1) * d + 1 + output_padding - s whatever n
            totals = [_span(k, d) + e - s for s, k, d, e in zip(strides_, kernel_, dilations_, extra)]
        split = [split_padding(t, auto_pad, legacy=legacy) for t in totals]
        begin, end = [b for b, _ in split], [e for _, e in split]
    elif auto_pad == "VALID" or not pads:
        begin, end = [0] * nd, [0] * nd
    else:
        begin, end = [int(p) for p in pads[:nd]], [int(p) for p in pads[nd:]]
    return TransposeWindow(size_, kernel_, strides_, dilations_, full, begin, end, extra)


def transpose_out_dim(
    d: Dim, k: Dim, stride: int, pad_begin: int, pad_end: int, dilation: int, output_padding: int, auto_pad: str
) -> Dim:
    """One output dim of a ConvTranspose without ``output_shape``; None when unknown."""
    if not isinstance(d, int):
        return None
    if auto_pad in SAME_PADS:
        return d * stride
    if not isinstance(k, int):
        return None
    if auto_pad == "VALID":
        pad_begin = pad_end = 0
    return stride * (d - 1) + output_padding + _span(k, dilation) - pad_begin - pad_end
