"""A small node emitter for the graphs the training toolkit writes (loss, optimizer)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..onnx_core import NodeProto, helper, numpy_helper

__all__ = ["Emitter"]


class Emitter:
    """Appends standard ONNX nodes to ``nodes``; every value it makes is ``<prefix><n>``.

    ``emitter.Mul(a, b)`` emits a Mul and returns its output's name; ``out=`` names the
    output, ``n_out=`` asks for several; other keywords are attributes.
    """

    def __init__(self, prefix: str, taken: set[str] | None = None) -> None:
        self.nodes: list[NodeProto] = []
        self.prefix = prefix
        self.taken = taken if taken is not None else set()
        self._n = 0
        self._consts: dict[tuple[str, bytes, tuple[int, ...]], str] = {}

    def child(self) -> Emitter:
        """A new emitter (its own node list and constants) sharing this one's names."""
        return Emitter(self.prefix, self.taken)

    def fresh(self, hint: str = "") -> str:
        """A name not used yet."""
        while True:
            self._n += 1
            name = f"{self.prefix}{hint}{self._n}"
            if name not in self.taken:
                self.taken.add(name)
                return name

    def const(self, value: Any, dtype: Any = np.float32) -> str:
        """A Constant node holding ``value`` (shared between equal constants)."""
        arr = np.asarray(value, dtype=dtype)
        key = (arr.dtype.str, arr.tobytes(), arr.shape)
        if key not in self._consts:
            name = self.fresh("c")
            tensor = numpy_helper.from_array(arr, name)
            self.nodes.append(helper.make_node("Constant", [], [name], value=tensor))
            self._consts[key] = name
        return self._consts[key]

    def __getattr__(self, op_type: str) -> Any:
        if not op_type[:1].isupper():
            raise AttributeError(op_type)

        def emit(*inputs: str, out: str | list[str] | None = None, n_out: int = 1, **attrs: Any) -> Any:
            if out is None:
                outs = [self.fresh(op_type) for _ in range(n_out)]
            else:
                outs = [out] if isinstance(out, str) else list(out)
            self.nodes.append(helper.make_node(op_type, list(inputs), outs, **attrs))
            return outs[0] if len(outs) == 1 else outs

        return emit
