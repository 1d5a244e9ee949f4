"""What a short-form rule sees: :class:`GradContext` and the ``ctx.op`` node builder."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .._errors import GradientError
from .._proto import NodeProto, TensorProto
from ._fastpath import Fields, node_fields
from ._types import UNKNOWN, ValueType

if TYPE_CHECKING:
    from ._pass import _GradientPass

__all__ = ["GradContext", "OpBuilder", "FLOAT_TYPES"]

#: element types that carry gradients
FLOAT_TYPES = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16})


class OpBuilder:
    """``ctx.op.Mul(a, b)`` emits a backward node and returns its output name.

    Positional arguments are input names (``None`` or ``""`` for an omitted optional
    input, a numpy array for a constant); keyword arguments are attributes, except
    ``_outputs`` (number of outputs; a list of names is returned when it is not 1)
    and ``_domain``.
    """

    __slots__ = ("_pass", "_prefix")

    def __init__(self, grad_pass: _GradientPass, prefix: str) -> None:
        self._pass = grad_pass
        self._prefix = prefix

    def __getattr__(self, op_type: str) -> Any:
        if op_type.startswith("_"):
            raise AttributeError(op_type)
        # The builder of ``op_type`` becomes a method of the class: every later
        # ``ctx.op.<op_type>`` is an ordinary method lookup, not a failed attribute
        # lookup (an AttributeError raised and caught) plus a new closure per node.
        method = _builder(op_type)
        setattr(OpBuilder, op_type, method)
        return method.__get__(self, OpBuilder)


def _builder(op_type: str) -> Callable[..., Any]:
    """The ``OpBuilder`` method that emits an ``op_type`` node."""

    def build(self: OpBuilder, *inputs: Any, _outputs: int = 1, _domain: str = "", **attrs: Any) -> Any:
        names = []
        for value in inputs:
            if type(value) is str or isinstance(value, str):
                names.append(value)
            elif value is None:
                names.append("")
            elif isinstance(value, np.ndarray):
                names.append(self._pass.constant(value))
            else:
                raise TypeError(
                    f"ctx.op.{op_type}: inputs are value names or numpy arrays, got {type(value).__name__} "
                    "(use ctx.const(value, like=name) for a scalar)"
                )
        outs = self._pass.emit(op_type, names, _outputs, _domain, attrs, self._prefix)
        return outs[0] if _outputs == 1 else outs

    build.__name__ = build.__qualname__ = op_type
    return build


class GradContext:
    """The node being differentiated and the tools to emit its backward nodes.

    Attributes:
        node: the forward node.
        inputs: the node's input names ("" for an omitted optional input).
        outputs: the node's output names.
        output_grads: the gradient of each output, None where it has none.
        attrs: the node's attributes as Python values.
        opset: the opset the backward graph is emitted at.
        op: the node builder (``ctx.op.Mul(dy, b)``).
    """

    __slots__ = ("node", "inputs", "outputs", "output_grads", "attrs", "opset", "op", "_pass", "_needs", "_index")

    def __init__(
        self,
        grad_pass: _GradientPass,
        node: NodeProto,
        output_grads: list[str | None],
        needs: list[bool],
        attrs: dict[str, Any],
        fields: Fields | None = None,
        index: int | None = None,
    ) -> None:
        # fields: the node's (op_type, domain, inputs, outputs, attributes) when the pass has them;
        # index: the node's position among the pass's nodes, when it knows it
        op_type, _, inputs, outputs, _ = node_fields(node) if fields is None else fields
        self._pass = grad_pass
        self.node = node
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.output_grads = output_grads
        self.attrs = attrs
        self.opset = grad_pass.opset
        self._needs = needs
        self._index = index
        op = grad_pass.builders.get(op_type)
        if op is None:
            op = grad_pass.builders[op_type] = OpBuilder(grad_pass, op_type)
        self.op = op

    # -- the node -------------------------------------------------------------------
    def input(self, i: int) -> str:
        """The name of input ``i`` ("" when omitted or absent)."""
        return self.inputs[i] if i < len(self.inputs) else ""

    def output(self, i: int) -> str:
        """The name of output ``i`` ("" when omitted or absent)."""
        return self.outputs[i] if i < len(self.outputs) else ""

    def attr(self, name: str, default: Any = None) -> Any:
        """The attribute ``name`` as a Python value, or ``default``."""
        return self.attrs.get(name, default)

    def forward_output(self, i: int) -> str:
        """Output ``i`` of the forward node, asked of the re-emitted node if the source
        omitted it (MaxPool's Indices, LayerNormalization's Mean and InvStdDev, ...)."""
        return self._pass.forward_output(self.node, i, self._index)

    def needs_grad(self, i: int) -> bool:
        """True when input ``i`` lies on a path from a differentiated variable."""
        return i < len(self._needs) and self._needs[i]

    # -- types ----------------------------------------------------------------------
    def type(self, name: str) -> ValueType:
        """The inferred type of a value (``UNKNOWN`` when inference could not tell)."""
        return self._pass.types.get(name, UNKNOWN)

    def dtype(self, name: str) -> int:
        """The TensorProto element type of a value (0 when unknown)."""
        return self.type(name).dtype

    def shape(self, name: str) -> tuple[Any, ...] | None:
        """The inferred shape (dims int, symbolic str or None), None when the rank is unknown."""
        return self.type(name).shape

    def rank(self, name: str) -> int | None:
        """The inferred rank, or None."""
        return self.type(name).rank

    def static_shape(self, name: str) -> tuple[int, ...] | None:
        """The shape when every dimension is known, else None."""
        t = self.type(name)
        return tuple(cast("tuple[int, ...]", t.shape)) if t.is_static else None

    def require_rank(self, name: str) -> int:
        """The rank of ``name``; raises a GradientError naming the node when unknown."""
        r = self.rank(name)
        if r is None:
            raise self.error(f"needs the rank of {name!r}, which shape inference could not determine")
        return r

    def require_shape(self, name: str) -> tuple[Any, ...]:
        """The shape of ``name`` (dims int, symbolic str or None); raises a GradientError naming
        the node when its rank is unknown."""
        shape = self.shape(name)
        if shape is None:
            raise self.error(f"needs the rank of {name!r}, which shape inference could not determine")
        return shape

    def error(self, message: str) -> GradientError:
        """A GradientError naming this node; ``raise ctx.error("...")``."""
        return self._pass.node_error(self.node, message)

    # -- building -------------------------------------------------------------------
    def const(self, value: Any, *, like: str | None = None, dtype: int | None = None) -> str:
        """A Constant holding ``value`` with the dtype of ``like`` (or ``dtype``).

        Equal constants are emitted once per backward graph.
        """
        return self._pass.typed_constant(value, like=like, dtype=dtype)

    def ints(self, values: Sequence[int] | int) -> str:
        """An int64 Constant (axes, shapes, starts, ...)."""
        return self._pass.int_constant(values)

    def shape_of(self, name: str) -> str:
        """A ``Shape(name)`` value (static shapes become a Constant)."""
        return self._pass.shape_value(name)

    def zeros_like(self, name: str) -> str:
        """Zeros with the shape and dtype of ``name``."""
        return self._pass.zeros_like(name)

    def unbroadcast(self, grad: str, to: str, frm: str | None = None, shape: tuple[Any, ...] | None = None) -> str:
        """Sums ``grad`` back to the shape of ``to`` (numpy broadcasting undone).

        ``grad`` is shaped like ``frm`` (default: output 0), or like ``shape`` when the
        rule knows it; where dims are symbolic the axes are computed at run time.
        """
        return self._pass.unbroadcast(grad, frm or self.output(0), to, shape)

    def value(self, name: str) -> np.ndarray | None:
        """The value of ``name`` when it is a constant known to the pass (small integer tensors), else None."""
        return self._pass.constants.get(name)
