"""Op expansion: an op the spec defines by a function body, rewritten as standard ops.

:data:`EXPANSIONS` holds, per ``(domain, op_type)`` and opset range, a function
``fn(e: Expander) -> output names`` that emits the op's decomposition at one node's
types and opset. Two kinds fill it:

* ops with a static body (``has_function``: Swish, SwiGLU, Celu, Mish, ...): the spec's
  body, carried as data in the generated ``_function_bodies.py``, instantiated with the
  node's attributes (schema defaults for the omitted ones);
* context-dependent ones (Attention, RotaryEmbedding, LinearAttention, CausalConvWithState,
  CenterCropPad): our own decompositions from the spec text, in ``_expand_attention.py``.

:func:`expand` is the one entry point; the gradient pass and forward mode use it for an
op that has no rule of its own (a rule, where one exists, wins).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._dtypes import tensor_dtype_to_np_dtype
from .._errors import OnnxLightError
from .._proto import AttributeProto, NodeProto
from ..helper import get_attribute_value, make_attribute, make_node
from ..numpy_helper import from_array
from ._schema import get_schema, has_schema
from ._table import DEFAULT_DOMAIN, OpTable, normalise_domain, op_label

__all__ = [
    "EXPANSIONS",
    "Expander",
    "ExpansionError",
    "expansion",
    "expand",
    "has_expansion",
    "body_op_types",
    "expandable_op_types",
]

#: a value's (element type, shape) as the caller knows it (0 / None when unknown)
TypeOf = Callable[[str], tuple[int, tuple[Any, ...] | None]]
ExpandFn = Callable[["Expander"], Sequence[str]]

EXPANSIONS: OpTable[ExpandFn] = OpTable("expansion", "register one with onnx_core.ops.expansion(op_type, since=...)")


class ExpansionError(OnnxLightError):
    """A node cannot be expanded at the types or attributes it has."""


class Expander:
    """What an expansion function reads (the node, its attributes, its values' types) and
    the builder it emits with (:meth:`op`, :meth:`const`)."""

    def __init__(self, node: NodeProto, type_of: TypeOf, opset: int, new_name: Callable[[str], str]) -> None:
        self.node, self.opset, self._type_of, self._new_name = node, opset, type_of, new_name
        self.out: list[NodeProto] = []
        self._attrs = {a.name: a for a in node.attribute}

    # -- the node ----------------------------------------------------------------------
    def input(self, i: int) -> str:
        """The node's ``i``-th input ("" when omitted)."""
        return self.node.input[i] if i < len(self.node.input) else ""

    def attr(self, name: str, default: Any = None) -> Any:
        """An attribute's value (strings decoded), else ``default``."""
        a = self._attrs.get(name)
        if a is None:
            return default
        v = get_attribute_value(a)
        return v.decode("utf-8") if isinstance(v, bytes) else v

    def dtype(self, name: str) -> int:
        """The element type of ``name`` (0 when unknown)."""
        return self._type_of(name)[0]

    def shape(self, name: str) -> tuple[Any, ...] | None:
        """The shape of ``name`` (None when even the rank is unknown)."""
        return self._type_of(name)[1]

    def rank(self, name: str) -> int | None:
        """The rank of ``name`` (None when unknown)."""
        s = self.shape(name)
        return None if s is None else len(s)

    def error(self, message: str) -> ExpansionError:
        """An :class:`ExpansionError` naming the node, ``domain::op_type`` and the opset."""
        node = self.node
        label = op_label(node.domain, node.op_type)
        return ExpansionError(
            f"node {node.name!r} ({label} -> {list(node.output)}) at opset {self.opset}: cannot expand: {message}"
        )

    # -- emitting ----------------------------------------------------------------------
    def op(self, op_type: str, *inputs: str, n_out: int = 1, **attrs: Any) -> Any:
        """Emits ``op_type(*inputs)`` with fresh outputs: one name, or a list when ``n_out > 1``."""
        outs = [self._new_name(f"{self.node.op_type}_{op_type}") for _ in range(n_out)]
        kept = {k: v for k, v in attrs.items() if v is not None}
        self.out.append(make_node(op_type, list(inputs), outs, name=self.node_name(op_type), **kept))
        return outs[0] if n_out == 1 else outs

    def node_name(self, op_type: str) -> str:
        """A fresh name for an emitted node: the expanded node's, then the op (so that an error
        on a node of the expansion names the node it came from)."""
        node = self.node
        first = node.output[0] if node.output else ""
        return self._new_name(f"{node.name or f'{node.op_type}({first})'}/{op_type}")

    def subgraph(self) -> Expander:
        """A builder of the same node whose nodes go to a list of their own (a subgraph's
        body); names stay fresh across both."""
        return Expander(self.node, self._type_of, self.opset, self._new_name)

    def fresh(self, prefix: str) -> str:
        """A fresh value name (a subgraph's input, say)."""
        return self._new_name(f"{self.node.op_type}_{prefix}")

    def const(self, value: Any, dtype: int | np.dtype | type | None = None) -> str:
        """A Constant of ``value`` (``dtype``: a TensorProto type or a numpy dtype)."""
        if isinstance(dtype, int):
            dtype = tensor_dtype_to_np_dtype(dtype)
        return self.op("Constant", value=from_array(np.asarray(value, dtype=dtype)))

    def ints(self, *values: int) -> str:
        """A 1-D int64 Constant."""
        return self.const([int(v) for v in values], np.int64)

    def scalar_like(self, value: float, like: str) -> str:
        """A scalar of ``like``'s element type (a CastLike when that type is unknown here)."""
        dt = self.dtype(like)
        if dt:
            return self.const(value, dt)
        return self.op("CastLike", self.const(value, np.float32), like)


def expansion(
    *op_types: str, since: int, until: int | None = None, domain: str = DEFAULT_DOMAIN
) -> Callable[[ExpandFn], ExpandFn]:
    """Registers an expansion function for ``op_types`` at opsets ``since..until``."""

    def register(fn: ExpandFn) -> ExpandFn:
        for op in op_types:
            EXPANSIONS.register(domain, op, fn, since=since, until=until)
        return fn

    return register


def _static_body(version: tuple[Any, ...]) -> ExpandFn:
    """The expansion of one version of a static body (see ``_function_bodies.py``)."""
    _, _, _, formal_in, formal_out, nodes = version

    def body(e: Expander) -> list[str]:
        node = e.node
        rename = {f: e.input(i) for i, f in enumerate(formal_in)}
        schema = get_schema(node.op_type, e.opset, node.domain)
        for domain, op_type, ins, outs, attrs in nodes:
            for o in outs:
                rename[o] = e._new_name(f"{node.op_type}_{o}")
            bound = [a for a in (_bind(a, e, schema) for a in attrs) if a is not None]
            new = make_node(
                op_type,
                [rename.get(i, "") if i else "" for i in ins],
                [rename[o] for o in outs],
                name=e.node_name(op_type),
                domain=domain or None,
            )
            new.attribute.extend(bound)
            e.out.append(new)
        return [rename[f] for f in formal_out]

    return body


def _bind(attr: tuple[Any, ...], e: Expander, schema: Any) -> AttributeProto | None:
    name, kind, payload = attr
    if kind == "ref":
        value = e.attr(payload, schema.attribute_default(payload))
        return None if value is None else make_attribute(name, value)
    if kind == "tensor":
        data_type, dims, values = payload
        return make_attribute(name, from_array(np.asarray(values, tensor_dtype_to_np_dtype(data_type)).reshape(dims)))
    return make_attribute(name, payload)


@functools.cache
def _load() -> None:
    """Registers the static bodies and imports our own decompositions (once)."""
    from . import _expand_attention  # noqa: F401  (registers Attention, RotaryEmbedding, ...)
    from ._function_bodies import BODIES

    for (domain, op_type), versions in BODIES.items():
        for version in versions:
            if EXPANSIONS.lookup(domain, op_type, version[0]) is not None:
                continue  # a decomposition of our own replaces the data
            EXPANSIONS.register(domain, op_type, _static_body(version), since=version[0], until=version[1])


def body_op_types(op_type: str, domain: str = DEFAULT_DOMAIN) -> frozenset[str] | None:
    """The op types the spec's static bodies of ``domain::op_type`` use (every version), or
    None for an op without a static body (ours are decompositions into standard ops)."""
    from ._function_bodies import BODIES

    versions = BODIES.get((normalise_domain(domain), op_type))
    if versions is None:
        return None
    return frozenset(n[1] for v in versions for n in v[5])


#: (the (domain, op_type) keys of EXPANSIONS, their op types) when last asked
_EXPANDABLE: list[frozenset[Any]] = [frozenset(), frozenset()]


def expandable_op_types() -> frozenset[str]:
    """The op types that have an expansion in some domain at some opset."""
    _load()
    keys = EXPANSIONS.keys()
    if _EXPANDABLE[0] != keys:  # registered or removed since: computed again
        _EXPANDABLE[:] = [frozenset(keys), frozenset(op for _, op in keys)]
    return _EXPANDABLE[1]


def has_expansion(domain: str, op_type: str, opset: int) -> bool:
    """True when :func:`expand` can expand ``domain::op_type`` at ``opset``."""
    _load()
    return EXPANSIONS.lookup(normalise_domain(domain), op_type, opset) is not None


def expand(node: NodeProto, type_of: TypeOf, opset: int, new_name: Callable[[str], str]) -> list[NodeProto] | None:
    """The standard-op nodes that compute ``node`` at ``opset``, or None when it has no expansion.

    Args:
        node: the node to expand (not mutated); its outputs keep their names.
        type_of: ``(element type, shape)`` of a value, as the caller knows it.
        opset: the default-domain opset the node runs at.
        new_name: a fresh value name for a prefix.

    Raises:
        ExpansionError: the node's types or attributes do not allow the expansion.
    """
    _load()
    domain = normalise_domain(node.domain)
    fn = EXPANSIONS.lookup(domain, node.op_type, opset)
    if fn is None or not has_schema(node.op_type, opset, domain):
        return None
    e = Expander(node, type_of, opset, new_name)
    results = fn(e)
    for result, out in zip(results, node.output):
        if out:
            e.out.append(make_node("Identity", [result], [out], name=e.node_name("Identity")))
    return e.out
