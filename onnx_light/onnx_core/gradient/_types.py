"""Light type and shape inference for the gradient pass.

Every value gets a :class:`ValueType`: its TensorProto element type and its shape,
each dimension an ``int``, a symbolic name (``str``) or ``None`` (unknown), or the
whole shape ``None`` when even the rank is unknown. Rules read these to choose
static code (axes known when the pass runs) over dynamic code (``Shape`` nodes at
run time). Small integer tensors that are constant when the pass runs (initializers,
``Constant`` nodes, ``Shape`` of a static shape, ...) are folded so that ``Reshape``
or ``Slice`` targets are known.

Per-op inference functions live in :data:`INFER`; an op without one yields unknown
types for its outputs (the pass then falls back to shapes computed at run time).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._attributes import get_attribute_value
from .._proto import AttributeProto, NodeProto
from ..ops._registries import INFER as _INFER_TABLE

__all__ = [
    "ValueType",
    "Dim",
    "Shape",
    "InferContext",
    "INFER",
    "infer",
    "infer_types",
    "attribute_values",
    "NodeInfo",
    "UNKNOWN",
    "merge_types",
]

Dim = int | str | None
Shape = tuple[Dim, ...] | None


@dataclass(frozen=True)
class ValueType:
    """The element type and shape of one value (``dtype`` 0 = unknown)."""

    dtype: int
    shape: Shape

    def __init__(self, dtype: int, shape: Shape) -> None:
        # the generated frozen __init__ sets each field through object.__setattr__;
        # the pass makes one ValueType per value, so the fields go into __dict__ directly
        fields = self.__dict__
        fields["dtype"] = dtype
        fields["shape"] = shape

    def __eq__(self, other: object) -> bool:
        # what the generated __eq__ answers, without its two tuples (inference compares the
        # input types of most elementwise nodes); the generated __hash__ stays
        if type(other) is not ValueType:
            return NotImplemented
        return self is other or (self.dtype == other.dtype and self.shape == other.shape)

    @property
    def rank(self) -> int | None:
        """The number of dimensions, or None when unknown."""
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        """True when every dimension is a known integer."""
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)


UNKNOWN = ValueType(0, None)


@dataclass
class InferContext:
    """What an inference function sees of one node."""

    node: NodeProto
    inputs: list[ValueType]
    #: values of inputs known when the pass runs (None where not constant)
    values: list[np.ndarray | None]
    attrs: dict[str, Any]
    opset: int
    #: shape-like input values only partly known (object arrays of ``int | str | None``
    #: entries, e.g. ``Shape`` of a value with a symbolic batch dim); None elsewhere.
    #: Kept apart from ``values`` so that only fully known values become constants.
    partial: list[np.ndarray | None] = field(default_factory=list)
    #: the node's input names when the caller has them read (else ``node.input`` is read)
    names: list[str] | None = None

    def attr(self, name: str, default: Any = None) -> Any:
        """The attribute's Python value, or ``default``."""
        return self.attrs.get(name, default)


#: op_type -> fn(ctx) returning one ValueType per output, and optionally (as a second
#: element of a tuple) the constant values of outputs
InferFn = Callable[[InferContext], "list[ValueType] | tuple[list[ValueType], list[np.ndarray | None]]"]
#: the inference functions, an OpTable by opset range (``INFER.at(opset)``: by op type)
INFER = _INFER_TABLE
#: ops (default domain) whose inference function, when every input has one same fully
#: known type and no input value is known, gives exactly that type to their one output
#: and folds nothing: :func:`infer_types` answers those nodes without calling it
SAME_TYPE: set[str] = set()


def infer(
    *op_types: str, same_type: bool = False, since: int = 1, until: int | None = None
) -> Callable[[InferFn], InferFn]:
    """Registers an inference function for ``op_types`` (default domain, opsets ``since..until``).

    ``same_type=True`` declares that ``fn`` behaves as :data:`SAME_TYPE` describes (for
    every op in ``op_types``); registering an op again without it withdraws that.
    """

    def register(fn: InferFn) -> InferFn:
        for op in op_types:
            INFER.register("", op, fn, since=since, until=until)
            if same_type:
                SAME_TYPE.add(op)
            else:
                SAME_TYPE.discard(op)
        return fn

    return register


def attribute_values(attributes: Iterable[AttributeProto]) -> dict[str, Any]:
    """A node's attributes as Python values by name (strings decoded from UTF-8)."""
    out: dict[str, Any] = {}
    if not attributes:
        return out
    for a in attributes:
        v = get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode("utf-8")
        out[a.name] = v
    return out


def _type_of(name: str, types: dict[str, ValueType], consts: dict[str, np.ndarray]) -> ValueType:
    """The known type of a value, else the type of its known constant value."""
    if not name:
        return UNKNOWN
    t = types.get(name)
    if t is not None and t.shape is not None and t.dtype:
        return t
    v = consts.get(name)
    if v is None:
        return t or UNKNOWN
    from .._dtypes import np_dtype_to_tensor_dtype

    try:
        dtype = np_dtype_to_tensor_dtype(np.asarray(v).dtype)
    except ValueError:
        return t or UNKNOWN
    return ValueType(t.dtype if t is not None and t.dtype else dtype, tuple(np.shape(v)))


def _same_unfolded(
    inputs: list[str],
    t: ValueType,
    types_get: Callable[[str], ValueType | None],
    consts: dict[str, np.ndarray],
    partial: dict[str, np.ndarray],
) -> bool:
    """True when every input has type ``t`` and none has a known or partly known value."""
    for n in inputs:
        if n in consts or n in partial:
            return False
    first = inputs[0]
    for n in inputs:
        if n != first and (u := types_get(n)) is not t and u != t:
            return False
    return True


def _merge_dim(inferred: Dim, given: Dim) -> Dim:
    """The more precise of two views of one dim: a known int over a name over None
    (inference wins when both are ints)."""
    if isinstance(inferred, int):
        return inferred
    if isinstance(given, int):
        return given
    return inferred if inferred is not None else given


def merge_types(inferred: ValueType, given: ValueType) -> ValueType:
    """An inferred type completed from a declared one (value_info, a graph input or
    output), dimension by dimension: a known int beats a symbol, a symbol beats None.

    Where the ranks disagree the inferred shape is kept; the dtype is the inferred one
    when known.
    """
    a, b = inferred.shape, given.shape
    if a is None:
        shape = b
    elif b is None or len(a) != len(b):
        shape = a
    else:
        shape = tuple([_merge_dim(x, y) for x, y in zip(a, b)])
    return ValueType(inferred.dtype or given.dtype, shape)


#: what :func:`infer_types` reads of a node: ``(op_type, domain, inputs, outputs, attrs)``
#: (``attrs`` as :func:`attribute_values` gives them, or None to have them read)
NodeInfo = tuple[str, str, "list[str]", "list[str]", "dict[str, Any] | None"]


def infer_types(
    nodes: Iterable[NodeProto],
    known: dict[str, ValueType],
    constants: dict[str, np.ndarray],
    opset: int,
    *,
    infos: Iterable[NodeInfo] | None = None,
    declared: Callable[[str], ValueType | None] | None = None,
) -> tuple[dict[str, ValueType], dict[str, np.ndarray]]:
    """Infers the type of every value the nodes produce.

    Args:
        nodes: nodes in topological order.
        known: types of graph inputs and initializers (and any value_info).
        constants: values known when the pass runs (small initializers).
        opset: the default-domain opset of the nodes.
        infos: the nodes' fields, one :data:`NodeInfo` per node, when the caller has
            read them already (the gradient pass does, once for all its phases).
        declared: the declared type of a node output missing from ``known``, looked up
            only where inference leaves a dim unknown or symbolic (the gradient pass reads
            value_info lazily). A declared (or known) type completes the inferred one
            dimension by dimension (:func:`merge_types`).

    Returns:
        ``(types, constants)`` extended with every node output.
    """
    nodes = list(nodes)
    if infos is None:
        infos = [(n.op_type, n.domain, list(n.input), list(n.output), None) for n in nodes]
    state = _InferState(known, constants, opset, declared)
    types_get = state.types.get
    for node, (op_type, domain, inputs, outputs, attrs) in zip(nodes, infos):
        if op_type in SAME_TYPE and len(outputs) == 1 and inputs and (not domain or domain == "ai.onnx"):
            # the elementwise ops that make up most of a graph, answered without an
            # InferContext (see SAME_TYPE); otherwise they go the general way below
            t = types_get(inputs[0]) if inputs[0] else None
            if (
                t is not None
                and t.dtype
                and t.shape is not None
                and _same_unfolded(inputs, t, types_get, state.consts, state.partial)
            ):
                if outputs[0]:
                    state.types[outputs[0]] = t
                continue
        outs, vals = state.infer_node(node, op_type, domain, inputs, attrs)
        state.store(outputs, outs, vals)
    return state.types, state.consts


class _InferState:
    """The values :func:`infer_types` has typed or folded so far, and its two phases per
    node: inferring the outputs (:meth:`infer_node`) and recording them (:meth:`store`)."""

    __slots__ = ("types", "consts", "partial", "opset", "infer_get", "known_get", "declared")

    def __init__(
        self,
        known: dict[str, ValueType],
        constants: dict[str, np.ndarray],
        opset: int,
        declared: Callable[[str], ValueType | None] | None,
    ) -> None:
        self.types = dict(known)
        self.consts = dict(constants)
        self.partial: dict[str, np.ndarray] = {}
        self.opset = opset
        self.infer_get = INFER.at(opset).get  # the inference functions covering this opset
        self.known_get = known.get
        self.declared = declared

    def infer_node(
        self, node: NodeProto, op_type: str, domain: str, inputs: list[str], attrs: dict[str, Any] | None
    ) -> tuple[list[ValueType], list[np.ndarray | None]]:
        """The node's output types and known output values (empty lists when unknown)."""
        fn = self.infer_get(op_type) if not domain or domain == "ai.onnx" else None
        outs: list[ValueType] = []
        vals: list[np.ndarray | None] = []
        if fn is _CONSTANT and attrs is not None and "value" in attrs and "sparse_value" not in attrs:
            # a Constant with a tensor (a quarter of the nodes of an exported graph): what
            # _infer_tensor.constant gives, without an InferContext
            try:
                t, v = _infer_tensor.tensor_constant(attrs["value"])
                outs, vals = [t], [v]
            except Exception:  # as below: unknown, never wrong
                pass
        elif fn is not None:
            ctx = self._context(node, inputs, attrs)
            try:
                result = fn(ctx)
            except Exception:  # inference is best effort: unknown, never wrong
                result = []
            if isinstance(result, tuple):
                outs, vals = result
            else:
                outs = result
        elif not domain or domain == "ai.onnx":
            outs = self._control_flow(node, op_type)
        return outs, vals

    def _control_flow(self, node: NodeProto, op_type: str) -> list[ValueType]:
        """The outputs of If, Loop and Scan, typed from their bodies (a Loop's carried list, which
        no value_info of an export declares, then has its element type): [] for other ops."""
        from .._infer_model import CONTROL_FLOW  # the model-level engine imports this module

        fn = CONTROL_FLOW.get(op_type)
        if fn is None:
            return []
        try:
            return fn(node, self.types, self.consts, self.opset, [])
        except Exception:  # as above: unknown, never wrong
            return []

    def _context(self, node: NodeProto, inputs: list[str], attrs: dict[str, Any] | None) -> InferContext:
        """The InferContext of a node: each input's type, known value and partly known value."""
        types, consts = self.types, self.consts
        types_get, consts_get, partial_get = types.get, consts.get, self.partial.get
        in_types = []
        in_values: list[np.ndarray | None] = []
        in_partial: list[np.ndarray | None] = []
        for n in inputs:
            if not n:
                in_types.append(UNKNOWN)
                in_values.append(None)
                in_partial.append(None)
                continue
            t = types_get(n)  # _type_of, inlined for the common case of a fully known type
            in_types.append(t if t is not None and t.shape is not None and t.dtype else _type_of(n, types, consts))
            in_values.append(consts_get(n))
            in_partial.append(partial_get(n))
        return InferContext(
            node,
            in_types,
            in_values,
            attribute_values(node.attribute) if attrs is None else attrs,
            self.opset,
            in_partial,
            inputs,
        )

    def store(self, outputs: list[str], outs: list[ValueType], vals: list[np.ndarray | None]) -> None:
        """Records each output's type (completed from its declared type) and known value."""
        types, consts, partial = self.types, self.consts, self.partial
        known_get, declared = self.known_get, self.declared
        n_outs = len(outs)
        n_vals = len(vals)
        for i, name in enumerate(outputs):
            if not name:
                continue
            t = outs[i] if i < n_outs else UNKNOWN
            shape = t.shape
            if shape is None or t.dtype == 0 or not all(type(d) is int for d in shape):
                given = known_get(name)
                if given is None and declared is not None:
                    given = declared(name)
                if given is not None:
                    t = merge_types(t, given)
            types[name] = t
            v = vals[i] if i < n_vals else None
            if v is not None:
                if isinstance(v, np.ndarray) and v.dtype == object:
                    partial[name] = v
                else:
                    consts[name] = v


from ..ops import _infer_math, _infer_nn, _infer_tensor  # noqa: E402, F401  (registers the ops)

#: the registered inference of Constant, which infer_types answers directly (registering
#: another function for Constant withdraws that)
_CONSTANT = _infer_tensor.constant
