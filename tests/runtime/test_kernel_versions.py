"""Every default-domain kernel is registered for exactly the versions the ONNX schemas define.

From opset 7 (or the op's first version) to the newest onnx knows, the kernel in force
at each opset must be the one whose ``since`` equals the schema's ``since_version``.
"""

from __future__ import annotations

import onnx.defs
import pytest

from onnx_light.runtime import registered_kernels
from onnx_light.runtime._registry import lookup_kernel

# control flow is registered once and handles every version's semantics (Scan 8 apart)
SINGLE_KERNEL = {"If": "subgraph semantics unchanged", "Loop": "idem", "Scan": "8 and 9+ registered"}
OPS = sorted(op for (domain, op) in registered_kernels() if domain == "" and op not in SINGLE_KERNEL)


def test_kernels_are_registered() -> None:
    assert len(OPS) >= 130  # the list of ops (135 here) less control flow


@pytest.mark.parametrize("op", OPS)
def test_registered_for_every_version(op: str) -> None:
    for opset in range(7, onnx.defs.onnx_opset_version() + 1):
        try:
            since = onnx.defs.get_schema(op, opset, "").since_version
        except onnx.defs.SchemaError:
            continue  # the op does not exist yet at this opset
        info = lookup_kernel("", op, opset)
        assert info is not None and info.since == since, f"{op} at opset {opset}: schema {since}"


def test_one_kernel_serves_several_versions() -> None:
    from onnx_light.runtime._registry import KERNELS, kernel

    @kernel("test.versions", "Thrice", since=(2, 5))
    def thrice(x: object) -> object:
        return x

    try:
        assert registered_kernels()[("test.versions", "Thrice")] == [2, 5]
        assert lookup_kernel("test.versions", "Thrice", 1) is None
        for opset, since in ((2, 2), (4, 2), (5, 5), (9, 5)):
            info = lookup_kernel("test.versions", "Thrice", opset)
            assert info is not None and info.since == since and info.fn is thrice
    finally:
        KERNELS.remove("test.versions", "Thrice")
