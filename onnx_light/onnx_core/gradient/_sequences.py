"""Gradients of sequence values: the pass's one sequence-aware mechanism.

The gradient of a value of type ``seq(tensor)`` is a sequence of the same length whose
element ``i`` is the gradient of element ``i`` (zeros for an element never read). Rules
of the sequence ops take and return such sequences; the core only has to

* know which values are sequences: those declared with a sequence type (value_info)
  and the outputs whose formal parameter the op's schema types ``seq(...)`` only;
* know a sequence's element type (declared, or declared by the rule that emitted it),
  which the bodies below are typed with;
* sum several contributions to one sequence element-wise: one ``SequenceMap`` whose
  body is ``Add`` (two) or ``Sum`` (more) over the corresponding elements, which works
  for sequences whose length is known only at run time.
"""

from __future__ import annotations

import functools

from .._proto import GraphProto, ValueInfoProto
from ..helper import make_graph, make_node, make_tensor_sequence_value_info, make_tensor_value_info
from ..ops import SchemaError, get_schema
from ._types import ValueType

__all__ = ["sequence_elem_type", "output_is_sequence", "sum_body", "sequence_info"]


def sequence_elem_type(vi: ValueInfoProto) -> ValueType | None:
    """The element type of a ValueInfoProto declaring ``seq(tensor(...))`` (None otherwise)."""
    if not vi.HasField("type") or not vi.type.HasField("sequence_type"):
        return None
    elem = vi.type.sequence_type.elem_type
    if not elem.HasField("tensor_type"):
        return None
    tt = elem.tensor_type
    shape = None
    if tt.HasField("shape"):
        shape = tuple(
            d.dim_value if d.HasField("dim_value") else (d.dim_param if d.HasField("dim_param") else None)
            for d in tt.shape.dim
        )
    return ValueType(int(tt.elem_type), shape)


@functools.cache
def output_is_sequence(domain: str, op_type: str, opset: int, k: int) -> bool:
    """True when the schema types output ``k`` of ``domain::op_type`` as sequences only."""
    try:
        schema = get_schema(op_type, opset, domain)
    except SchemaError:
        return False
    if not schema.outputs:
        return False
    param = schema.outputs[min(k, len(schema.outputs) - 1)]  # a variadic last output repeats
    allowed: tuple[str, ...] = (param.type_str,)
    for c in schema.type_constraints:
        if c.type_param_str == param.type_str:
            allowed = c.allowed_type_strs
    return bool(allowed) and all(t.startswith("seq(") for t in allowed)


def sum_body(elem: ValueType, n: int, new_name: object) -> GraphProto:
    """A SequenceMap body adding ``n`` tensors of type ``elem`` (``Add`` for two, ``Sum`` more)."""
    assert callable(new_name)
    names = [new_name("seq_term") for _ in range(n)]
    total = new_name("seq_sum")
    node = make_node("Add" if n == 2 else "Sum", names, [total])
    return make_graph(
        [node],
        "sequence_sum",
        [make_tensor_value_info(a, elem.dtype, None) for a in names],
        [make_tensor_value_info(total, elem.dtype, None)],
    )


def sequence_info(name: str, elem: ValueType) -> ValueInfoProto:
    """The ValueInfoProto of a sequence of ``elem`` tensors."""
    return make_tensor_sequence_value_info(name, elem.dtype, elem.shape)
