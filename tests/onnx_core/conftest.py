"""The codec tests run twice: with the native codec (src/codec.cpp) and with its
pure-Python twin (``_wire.py``), as DESIGN.md section 6 asks. A module opts in with
``pytestmark = pytest.mark.usefixtures("codec")``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from onnx_light.onnx_core import _native_codec


@pytest.fixture(params=["native", "twin"], scope="module")
def codec(request: pytest.FixtureRequest) -> Iterator[str]:
    """Selects the native codec or the pure-Python twin for the whole module."""
    if request.param == "native" and not _native_codec.available():
        if os.environ.get("CI"):
            pytest.fail("onnx_light._native was not built: the CI install must build the extension")
        pytest.xfail("onnx_light._native is not built in this environment")
    old = _native_codec.set_enabled(request.param == "native")
    try:
        yield request.param
    finally:
        _native_codec.set_enabled(old)
