"""What a short-form rule sees: :class:`GradContext` and the ``ctx.op`` node builder."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .._errors import GradientError
from .._proto import NodeProto, TensorProto, ValueInfoProto
from ..ops import Signature, UnknownOp, signature
from ._fastpath import Fields, node_fields, value_type
from ._types import UNKNOWN, ValueType

if TYPE_CHECKING:
    from ._opset import Opset as _TypedOpset  # generated: a typed method per op (tools/gen_ctx_opset.py)
    from ._pass import _GradientPass
else:
    _TypedOpset = object

__all__ = ["GradContext", "OpBuilder", "BuilderError", "FLOAT_TYPES"]

_UNSEEN: Any = object()

#: element types that carry gradients
FLOAT_TYPES = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16})


class BuilderError(GradientError):
    """A rule asked ``ctx.op`` for a node its op's schema does not allow (the pass adds the rule's name)."""


class OpBuilder(_TypedOpset):
    """``ctx.op.Mul(a, b)`` emits a backward node and returns its output name.

    Positional arguments are input names (``None`` or ``""`` for an omitted optional
    input, a numpy array for a constant); keyword arguments are attributes, except
    ``_outputs`` (number of outputs; a list of names is returned when it is not 1)
    and ``_domain``.

    Each call is checked against the op's schema at the pass's opset (the op exists,
    input and output counts, attribute names, types and required ones), as onnxscript's
    opset classes do: a misspelt op or attribute raises :class:`BuilderError` at once.
    Ops of domains the spec does not know (custom ops) are not checked.
    """

    __slots__ = ("_pass", "_prefix", "_opset")

    def __init__(self, grad_pass: _GradientPass, prefix: str) -> None:
        self._pass = grad_pass
        self._prefix = prefix
        self._opset = grad_pass.opset

    def emit(self, op_type: str, *inputs: Any, _outputs: int = 1, _domain: str = "", **attrs: Any) -> Any:
        """``ctx.op.emit("MyOp", x, _domain="my.ops")``: the same as ``ctx.op.MyOp(x, ...)``,
        for ops type checkers do not know (custom domains)."""
        return getattr(self, op_type)(*inputs, _outputs=_outputs, _domain=_domain, **attrs)

    if not TYPE_CHECKING:  # type checkers see the generated methods only, so a typo is an error

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
    checked: dict[Any, Signature | None] = {}  # by opset (default domain) or (domain, opset)

    def build(self: OpBuilder, *inputs: Any, _outputs: int = 1, _domain: str = "", **attrs: Any) -> Any:
        opset = self._opset
        sig = checked.get((_domain, opset) if _domain else opset, _UNSEEN)
        if sig is _UNSEEN:
            try:
                sig = checked[(_domain, opset) if _domain else opset] = signature(op_type, opset, _domain)
            except UnknownOp as e:
                raise BuilderError(f"ctx.op.{op_type}: {e}") from None
        n = len(inputs)
        # the common node (no attribute, one output, a valid input count) in three comparisons
        if sig is not None and (
            attrs or _outputs != 1 or not (sig.one_output and sig.min_inputs <= n <= sig.input_limit)
        ):
            problem = sig.problem(n, _outputs, attrs)
            if problem is not None:
                raise BuilderError(f"ctx.op.{op_type}: {problem}")
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
        if _outputs == 1 and not attrs and not _domain:  # (emit's common case, in one call)
            return self._pass.emit_one(op_type, names, self._prefix)
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

    def replace_forward(self, nodes: Sequence[NodeProto]) -> bool:
        """Emits ``nodes`` instead of the forward node: they compute its outputs under the same
        names (from what it reads, fresh names else) and more that the backward may read, e.g.
        a Loop recording its tape too, so the loop runs once. False when the node is not run
        again by the result (it computes an x, or draws random numbers): the rule then emits
        what it needs under names of its own."""
        if self._index is None:
            return False
        return self._pass.replace_forward(self._index, list(nodes))

    @property
    def captured(self) -> list[str]:
        """The outer-scope names the node's subgraphs read, each once; a rule may return
        their gradients after its inputs' ones, in this order (If, Scan, Loop)."""
        return self._pass.captured(self._index) if self._index is not None else []

    def captured_needs_grad(self, name: str) -> bool:
        """True when the captured value ``name`` lies on a path from a differentiated variable."""
        return self._pass.depends(name)

    @property
    def registry(self) -> Any:
        """The GradRegistry of the pass (to differentiate a subgraph with the same rules)."""
        return self._pass.registry

    def declare(self, name: str, info: ValueInfoProto, scan_axis: int | None = None) -> None:
        """Records the type ``info`` declares as the type of ``name`` (an emitted value inference
        cannot follow, e.g. a Scan output); ``scan_axis``: a dimension of unknown size is
        inserted there (a stacked scan output)."""
        t = value_type(info)
        if t is None:
            return
        if scan_axis is not None and t.shape is not None:
            dims = list(t.shape)
            axis = scan_axis % (len(dims) + 1)
            t = ValueType(t.dtype, (*dims[:axis], None, *dims[axis:]))
        self._pass.types[name] = t
        self._pass.declared_outputs.append(name)

    def sequence_type(self, name: str) -> ValueType | None:
        """The element type of sequence ``name`` when known (declared, or declared by the rule
        that emitted it); None otherwise. The gradient of a sequence is a sequence."""
        return self._pass.sequence_type(name)

    def is_sequence(self, name: str) -> bool:
        """True when ``name`` is a sequence (declared as one, or so typed by its op's schema)."""
        return self._pass.is_sequence(name)

    def declare_sequence(self, name: str, elem: ValueType) -> None:
        """Records that the emitted value ``name`` is a sequence of ``elem`` tensors (so its
        contributions are summed element-wise and the result declares its type)."""
        self._pass.declare_sequence(name, elem)

    def emit_nodes(self, nodes: Sequence[NodeProto]) -> None:
        """Appends ready-made nodes (their names fresh, see ``fresh_name``) to the backward graph."""
        for node in nodes:
            self._pass.push_node(node)

    def fresh_name(self, prefix: str) -> str:
        """A name not used anywhere in the source or the backward graph (for subgraph values)."""
        return self._pass.new_name(prefix)

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
            index = self._pass._producer.get(name)
            if index is None:
                where = "a graph input declared without a shape"
                fix = f"declare the shape of {name!r} (its dims may be symbolic)"
            else:
                node = self._pass.nodes[index]
                named = f"node {node.name!r} " if node.name else "the node "
                where = f"the output of {named}({node.domain or 'ai.onnx'}::{node.op_type})"
                fix = f"declare its rank with a value_info for {name!r} (dims may be symbolic)"
            raise self.error(
                f"needs the rank of {name!r}, {where}, whose rank is not known before run time "
                f"(it depends on data, or on values shape inference cannot follow); {fix}"
            )
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
