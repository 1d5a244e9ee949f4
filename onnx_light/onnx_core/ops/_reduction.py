"""The Reduce* family's facts: which ops, their versions, and when ``axes`` became an input.

Read by the inference, the upgrade, the kernels and the rules instead of each keeping
its own list.
"""

from __future__ import annotations

__all__ = ["REDUCE_OPS", "REDUCE_VERSIONS", "axes_input_since"]

#: since-versions of each Reduce* op in the spec (onnx 1.23)
REDUCE_VERSIONS: dict[str, tuple[int, ...]] = {
    "ReduceSum": (1, 11, 13),
    "ReduceMean": (1, 11, 13, 18),
    "ReduceMax": (1, 11, 12, 13, 18, 20),
    "ReduceMin": (1, 11, 12, 13, 18, 20),
    "ReduceProd": (1, 11, 13, 18),
    "ReduceL1": (1, 11, 13, 18),
    "ReduceL2": (1, 11, 13, 18),
    "ReduceLogSum": (1, 11, 13, 18, 28),
    "ReduceLogSumExp": (1, 11, 13, 18, 28),
    "ReduceSumSquare": (1, 11, 13, 18),
}

#: every Reduce* op type
REDUCE_OPS: tuple[str, ...] = tuple(REDUCE_VERSIONS)


def axes_input_since(op_type: str) -> int:
    """The opset from which a Reduce* op reads ``axes`` as input 1 instead of an attribute."""
    return 13 if op_type == "ReduceSum" else 18
