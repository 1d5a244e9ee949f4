"""Col2Im (18) and MaxUnpool (9, 11, 22): scattering blocks or pooled maxima back into an image.

Col2Im adds each block offset's column slab into the padded image with one strided slice
per offset (``prod(block_shape)`` whole-array steps); MaxUnpool is one flat scatter.
"""

from __future__ import annotations

import math

import numpy as np

from onnx_light.runtime._native import max_unpool_f32
from onnx_light.runtime._registry import kernel
from onnx_light.runtime.kernels.conv import kernel_offsets


@kernel("", "Col2Im", since=18)
def col2im(
    x: np.ndarray,
    image_shape: np.ndarray,
    block_shape: np.ndarray,
    *,
    dilations: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> np.ndarray:
    """Col2Im-18: ``(N, C * prod(block), L)`` columns summed into ``(N, C, *image_shape)``."""
    image = [int(v) for v in np.asarray(image_shape).ravel()]
    block = [int(v) for v in np.asarray(block_shape).ravel()]
    nd = len(image)
    dil = list(dilations or [1] * nd)
    step = list(strides or [1] * nd)
    pad = list(pads or [0] * (2 * nd))
    if len(block) != nd or len(dil) != nd or len(step) != nd or len(pad) != 2 * nd:
        raise ValueError(f"Col2Im: image_shape {image}, block_shape {block}, dilations, strides, pads disagree in rank")
    blocks = [
        (i + pad[d] + pad[d + nd] - dil[d] * (b - 1) - 1) // step[d] + 1 for d, (i, b) in enumerate(zip(image, block))
    ]
    k = math.prod(block)
    n, ck, length = x.shape
    if ck % k or length != math.prod(blocks) or min(blocks) <= 0:
        raise ValueError(
            f"Col2Im: input of shape {list(x.shape)} does not fit block_shape {block} over image {image}: "
            f"want (N, C * {k}, {math.prod(blocks)})"
        )
    c = ck // k
    cols = x.reshape(n, c, *block, *blocks)
    buf = np.zeros((n, c, *(i + pad[d] + pad[d + nd] for d, i in enumerate(image))), dtype=x.dtype)
    lead = (slice(None), slice(None))
    for offset, sl in kernel_offsets(block, step, dil, blocks):
        src: tuple[slice | int, ...] = (*lead, *offset)
        buf[(*lead, *sl)] += cols[src]
    crop = tuple(slice(pad[d], pad[d] + i) for d, i in enumerate(image))
    return np.ascontiguousarray(buf[(*lead, *crop)])


@kernel("", "MaxUnpool", since=(9, 11, 22), writes_out=True)
def max_unpool(
    x: np.ndarray,
    indices: np.ndarray,
    output_shape: np.ndarray | None = None,
    *,
    kernel_shape: list[int],
    pads: list[int] | None = None,
    strides: list[int] | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """MaxUnpool: zeros with each value of ``x`` put at its flat index (as MaxPool's Indices give).

    ``out``: a pool's buffer, taken when it has the result's dtype and shape (``KernelOptions.writes_out``).
    """
    nd = x.ndim - 2
    step = list(strides or [1] * nd)
    pad = list(pads or [0] * (2 * nd))
    inferred = [*x.shape[:2]] + [
        (i - 1) * s - pad[d] - pad[d + nd] + k for d, (i, s, k) in enumerate(zip(x.shape[2:], step, kernel_shape))
    ]
    shape = inferred
    if output_shape is not None and np.asarray(output_shape).size:
        shape = [int(v) for v in np.asarray(output_shape).ravel()]
    if indices.shape != x.shape or len(shape) != x.ndim:
        raise ValueError(
            f"MaxUnpool: indices {list(indices.shape)} and output_shape {shape} must match X's rank and shape "
            f"{list(x.shape)}"
        )
    bad_indices = f"MaxUnpool: indices must lie in [0, {math.prod(inferred)}) (the unpooled shape {inferred})"
    if shape == inferred and x.dtype == np.float32 and not x.dtype.metadata and indices.dtype == np.int64:
        # a float32 gradient's MaxUnpool: one native pass (zeros, bounds and scatter together)
        fits = out is not None and list(out.shape) == shape and out.dtype == x.dtype and out.flags.c_contiguous
        result = out if out is not None and fits else np.empty(shape, np.float32)
        if not max_unpool_f32(np.ascontiguousarray(x), np.ascontiguousarray(indices), result):
            raise ValueError(bad_indices)
        return result
    flat = indices.astype(np.int64, copy=False).ravel()
    if flat.size and (flat.min() < 0 or flat.max() >= math.prod(inferred)):
        raise ValueError(bad_indices)
    if shape == inferred:  # one flat write (a gradient's MaxUnpool; 10x the unravelled form)
        lent = out is not None and list(out.shape) == shape and out.dtype == x.dtype and not x.dtype.metadata
        if out is not None and lent and out.flags.c_contiguous:
            out.fill(0)
            out.reshape(-1)[flat] = x.ravel()
            return out
        flat_out = np.zeros(math.prod(shape), dtype=x.dtype)
        flat_out[flat] = x.ravel()
        return flat_out.reshape(shape)
    # the indices count in the unpooled shape MaxPool saw; output_shape may be larger
    coords = np.unravel_index(flat, inferred)
    if any(int(c.max(initial=0)) >= n for c, n in zip(coords, shape)):
        raise ValueError(f"MaxUnpool: output_shape {shape} is smaller than the unpooled shape {inferred}")
    result = np.zeros(shape, dtype=x.dtype)
    result[coords] = x.ravel()
    return result
