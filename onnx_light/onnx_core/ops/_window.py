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
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "SAME_PADS",
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

_Dim = int | str | None


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
    size: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int] | None,
    auto_pad: str,
) -> tuple[list[int], list[int]]:
    """Begin and end pads per spatial axis of a Conv / pooling window after ``auto_pad``.

    Args:
        size: the input's spatial dims.
        kernel: the kernel's spatial dims.
        strides: per axis.
        dilations: per axis.
        pads: the ``pads`` attribute (begins then ends), or None.
        auto_pad: the ``auto_pad`` attribute.

    Returns:
        ``(begin, end)`` lists.
    """
    nd = len(size)
    if auto_pad in SAME_PADS:
        begin, end = [], []
        for n, k, s, d in zip(size, kernel, strides, dilations):
            total = max(0, (-(-n // s) - 1) * s + _span(k, d) - n)
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
    """

    __slots__ = ("size", "kernel", "strides", "dilations", "begin", "end", "out")

    def __init__(
        self,
        size: list[int],
        kernel: list[int],
        strides: list[int],
        dilations: list[int],
        begin: list[int],
        end: list[int],
        out: list[int],
    ) -> None:
        self.size, self.kernel, self.strides, self.dilations = size, kernel, strides, dilations
        self.begin, self.end, self.out = begin, end, out

    @property
    def nd(self) -> int:
        """The number of spatial axes."""
        return len(self.size)

    def counts(self, include_pad: bool = False) -> np.ndarray:
        """The cells each window covers inside the input (or inside input + pads), shaped ``out``.

        The average pooling divisor: with ``ceil_mode`` a last window may overhang even
        the end pad, and those cells never count.
        """
        total = np.ones((), dtype=np.int64)
        for n, k, s, d, b, e, o in self._axes():
            lo, hi = (-b, n + e) if include_pad else (0, n)
            pos = np.arange(o)[:, None] * s + np.arange(k)[None, :] * d - b
            total = np.multiply.outer(total, ((pos >= lo) & (pos < hi)).sum(axis=1))
        return total

    def overhangs(self) -> bool:
        """True when some window reaches past the end pad (possible with ``ceil_mode``)."""
        return any((o - 1) * s + (k - 1) * d - b >= n + e for n, k, s, d, b, e, o in self._axes())

    def _axes(self) -> zip[tuple[int, int, int, int, int, int, int]]:
        return zip(self.size, self.kernel, self.strides, self.dilations, self.begin, self.end, self.out)


def window(
    size: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    auto_pad: str = "NOTSET",
    ceil_mode: bool = False,
) -> Window:
    """The geometry of a Conv or pooling node with static spatial dims.

    Args:
        size: the input's spatial dims.
        kernel: the kernel's spatial dims.
        strides: per axis (default 1).
        dilations: per axis (default 1).
        pads: the ``pads`` attribute, or None.
        auto_pad: the ``auto_pad`` attribute.
        ceil_mode: pooling's ``ceil_mode``.

    Returns:
        The resolved :class:`Window`.
    """
    nd = len(size)
    size_, kernel_ = [int(n) for n in size], [int(k) for k in kernel]
    strides_ = [int(s) for s in strides] if strides else [1] * nd
    dilations_ = [int(d) for d in dilations] if dilations else [1] * nd
    begin, end = resolve_pads(size_, kernel_, strides_, dilations_, pads, auto_pad)
    out = [
        output_size(n, k, s, d, b, e, ceil_mode)
        for n, k, s, d, b, e in zip(size_, kernel_, strides_, dilations_, begin, end)
    ]
    return Window(size_, kernel_, strides_, dilations_, begin, end, out)


def window_out_dim(
    d: _Dim, k: _Dim, stride: int, pad_begin: int, pad_end: int, dilation: int, auto_pad: str, ceil_mode: bool
) -> _Dim:
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
        full: the uncropped output, ``(n - 1) * s + (k - 1) * d + 1 + output_padding``.
        begin, end: the pads cropped from ``full``. out: output spatial dims.
    """

    __slots__ = ("size", "kernel", "strides", "dilations", "full", "begin", "end", "out")

    def __init__(
        self,
        size: list[int],
        kernel: list[int],
        strides: list[int],
        dilations: list[int],
        full: list[int],
        begin: list[int],
        end: list[int],
    ) -> None:
        self.size, self.kernel, self.strides, self.dilations = size, kernel, strides, dilations
        self.full, self.begin, self.end = full, begin, end
        self.out = [f - b - e for f, b, e in zip(full, begin, end)]


def transpose_window(
    size: Sequence[int],
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
    """The geometry of a ConvTranspose node with static spatial dims.

    Args:
        size: the input's spatial dims.
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
    """
    nd = len(size)
    size_, kernel_ = [int(n) for n in size], [int(k) for k in kernel]
    strides_ = [int(s) for s in strides] if strides else [1] * nd
    dilations_ = [int(d) for d in dilations] if dilations else [1] * nd
    extra = [int(e) for e in output_padding] if output_padding else [0] * nd
    full = [(n - 1) * s + _span(k, d) + e for n, s, k, d, e in zip(size_, strides_, kernel_, dilations_, extra)]
    if output_shape or auto_pad in SAME_PADS:
        target = [int(t) for t in output_shape][-nd:] if output_shape else [n * s for n, s in zip(size_, strides_)]
        split = [split_padding(f - t, auto_pad, legacy=legacy) for f, t in zip(full, target)]
        begin, end = [b for b, _ in split], [e for _, e in split]
    elif auto_pad == "VALID" or not pads:
        begin, end = [0] * nd, [0] * nd
    else:
        begin, end = [int(p) for p in pads[:nd]], [int(p) for p in pads[nd:]]
    return TransposeWindow(size_, kernel_, strides_, dilations_, full, begin, end)


def transpose_out_dim(
    d: _Dim, k: _Dim, stride: int, pad_begin: int, pad_end: int, dilation: int, output_padding: int, auto_pad: str
) -> _Dim:
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
