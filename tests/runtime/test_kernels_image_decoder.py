"""ImageDecoder: lossless round trips with Pillow (skipped without it) and the error without it."""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest
from ort_reference import rng

import onnx_light as ol
from onnx_light.onnx_core._errors import RuntimeFailure


def _session(pixel_format: str) -> ol.runtime.InferenceSession:
    h = ol.helper
    node = h.make_node("ImageDecoder", ["encoded"], ["image"], pixel_format=pixel_format)
    graph = h.make_graph(
        [node],
        "g",
        [h.make_tensor_value_info("encoded", ol.TensorProto.UINT8, [None])],
        [h.make_tensor_value_info("image", ol.TensorProto.UINT8, [None, None, None])],
    )
    return ol.runtime.InferenceSession(h.make_model(graph, opset_imports=[h.make_opsetid("", 20)]))


def _encode(pixels: np.ndarray, fmt: str) -> np.ndarray:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt)
    return np.frombuffer(buf.getvalue(), dtype=np.uint8)


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "TIFF", "PPM"])
def test_lossless_formats_decode_exactly(fmt: str) -> None:
    pytest.importorskip("PIL")
    pixels = rng().integers(0, 256, (7, 5, 3), dtype=np.uint8)
    encoded = _encode(pixels, fmt)
    np.testing.assert_array_equal(_session("RGB").run(None, {"encoded": encoded})[0], pixels)
    np.testing.assert_array_equal(_session("BGR").run(None, {"encoded": encoded})[0], pixels[:, :, ::-1])


def test_grayscale_is_the_601_luma_with_one_channel() -> None:
    pytest.importorskip("PIL")
    pixels = rng().integers(0, 256, (4, 6, 3), dtype=np.uint8)
    got = _session("Grayscale").run(None, {"encoded": _encode(pixels, "PNG")})[0]
    luma = pixels.astype(np.float64) @ np.array([0.299, 0.587, 0.114])
    assert got.shape == (4, 6, 1) and got.dtype == np.uint8
    assert np.abs(got[..., 0].astype(np.float64) - luma).max() <= 1.0


def test_gray_png_decodes_to_three_equal_channels_in_rgb() -> None:
    pytest.importorskip("PIL")
    gray = rng().integers(0, 256, (3, 4), dtype=np.uint8)
    got = _session("RGB").run(None, {"encoded": _encode(gray, "PNG")})[0]
    np.testing.assert_array_equal(got, np.repeat(gray[:, :, None], 3, axis=2))


def test_undecodable_stream_gives_an_empty_image() -> None:
    pytest.importorskip("PIL")
    junk = np.frombuffer(b"not an image at all", dtype=np.uint8)
    assert _session("RGB").run(None, {"encoded": junk})[0].shape == (0, 0, 3)
    assert _session("Grayscale").run(None, {"encoded": junk})[0].shape == (0, 0, 1)


def test_without_pillow_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "PIL", None)  # makes `import PIL` fail as if not installed
    with pytest.raises(RuntimeFailure, match=r"ImageDecoder.*Pillow.*onnx-light\[image\]"):
        _session("RGB").run(None, {"encoded": np.zeros(8, np.uint8)})
