"""ImageDecoder (20): encoded image bytes to a (H, W, C) uint8 array, with Pillow.

Pillow is an optional dependency (the ``image`` extra: ``pip install 'onnx-light[image]'``),
imported only when an ImageDecoder node runs; without it the node fails with an error
saying so. Pillow reads every format the spec lists (BMP, JPEG, JPEG 2000, TIFF, PNG,
WebP, PBM/PGM/PPM). ``pixel_format`` RGB and BGR give three channels, Grayscale one
(Pillow's ITU-R 601-2 luma). A stream that cannot be decoded gives an empty
``(0, 0, C)`` array, as the spec asks.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from onnx_light.runtime._registry import kernel

#: pixel_format -> (Pillow mode, channels)
_FORMATS = {"RGB": ("RGB", 3), "BGR": ("RGB", 3), "Grayscale": ("L", 1)}

_MISSING_PILLOW = (
    "ImageDecoder decodes images with Pillow, which is not installed; "
    "install it with `pip install 'onnx-light[image]'` (or `pip install pillow`)"
)


def _pillow() -> Any:
    """The ``PIL.Image`` module, or an ImportError that says how to install it."""
    try:
        from PIL import Image
    except ImportError:
        raise ImportError(_MISSING_PILLOW) from None
    return Image


@kernel("", "ImageDecoder", since=20, fresh_output=True)
def image_decoder(encoded_stream: np.ndarray, *, pixel_format: str = "RGB") -> np.ndarray:
    """The decoded image, channel-last: (H, W, 3) for RGB / BGR, (H, W, 1) for Grayscale."""
    if pixel_format not in _FORMATS:
        raise ValueError(f"ImageDecoder: pixel_format must be one of {sorted(_FORMATS)}, got {pixel_format!r}")
    mode, channels = _FORMATS[pixel_format]
    image_module = _pillow()
    data = np.ascontiguousarray(encoded_stream, dtype=np.uint8).tobytes()
    try:
        with image_module.open(io.BytesIO(data)) as img:
            pixels = np.asarray(img.convert(mode), dtype=np.uint8)
    except (OSError, ValueError, SyntaxError, EOFError):  # what Pillow raises on a bad stream
        return np.empty((0, 0, channels), dtype=np.uint8)
    if channels == 1:
        return pixels.reshape(*pixels.shape[:2], 1).copy()
    return np.ascontiguousarray(pixels[:, :, ::-1] if pixel_format == "BGR" else pixels)
