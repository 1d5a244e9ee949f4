"""Text forms of protos: onnx's ``printable_*`` and our readable :func:`to_text`.

``printable_node`` / ``printable_graph`` and friends produce the same text as
``onnx.helper``'s functions of those names (except where onnx embeds protobuf's own
text format for a TypeProto attribute, where ours prints our repr).

:func:`to_text` is onnx-light's own listing, one node per line::

    graph main (%X: FLOAT[N,3], %W: FLOAT[3,2]) -> (%Y: FLOAT[N,2])
      initializers: %W: FLOAT[3,2]
      %XW = MatMul(%X, %W)
      %Y = Softmax(%XW) {axis=-1}
"""

from __future__ import annotations

from typing import Any

from ._interop import from_foreign
from ._proto import (
    AttributeProto,
    FunctionProto,
    GraphProto,
    ModelProto,
    NodeProto,
    TensorProto,
    TensorShapeProto,
    TypeProto,
    ValueInfoProto,
)

__all__ = [
    "printable_attribute",
    "printable_dim",
    "printable_type",
    "printable_value_info",
    "printable_tensor_proto",
    "printable_node",
    "printable_graph",
    "to_text",
]


def _sanitize(s: Any) -> str:
    text = s if isinstance(s, str) else bytes(s).decode("utf-8", errors="ignore")
    if len(text) < 64:
        return text
    return text[:64] + f"...<+len={len(text) - 64}>"


def _g15(f: float) -> str:
    return f"{f:.15g}"


def _scalar_tensor_values(t: TensorProto) -> list[Any]:
    from ._dtypes import tensor_dtype_to_field

    return list(getattr(t, tensor_dtype_to_field(t.data_type)))


def printable_attribute(attr: AttributeProto, subgraphs: bool = False) -> str | tuple[str, list[GraphProto]]:
    """``name = value`` as onnx prints an attribute.

    Args:
        attr: the attribute.
        subgraphs: also return the graphs the attribute holds.

    Returns:
        The text, or ``(text, graphs)`` when ``subgraphs`` is True.
    """
    text, graphs = _attribute_and_graphs(attr)
    return (text, graphs) if subgraphs else text


def _attribute_and_graphs(attr: AttributeProto) -> tuple[str, list[GraphProto]]:
    content = [attr.name, "="]
    graphs: list[GraphProto] = []
    if attr.HasField("f"):
        content.append(_g15(attr.f))
    elif attr.HasField("i"):
        content.append(str(attr.i))
    elif attr.HasField("s"):
        content.append(repr(_sanitize(attr.s)))
    elif attr.HasField("t"):
        if len(attr.t.dims) > 0:
            content.append("<Tensor>")
        else:
            content.append(f"<Scalar Tensor {_scalar_tensor_values(attr.t)}>")
    elif attr.HasField("g"):
        content.append(f"<graph {attr.g.name}>")
        graphs.append(attr.g)
    elif attr.HasField("tp"):
        content.append(f"<Type Proto {attr.tp}>")
    elif attr.HasField("sparse_tensor"):
        content.append("<Sparse Tensor>")
    elif attr.floats:
        content.append("[" + ", ".join(map(_g15, attr.floats)) + "]")
    elif attr.ints:
        content.append("[" + ", ".join(map(str, attr.ints)) + "]")
    elif attr.strings:
        content.append(str([_sanitize(s) for s in attr.strings]))
    elif attr.tensors:
        content.append("[<Tensor>, ...]")
    elif attr.sparse_tensors:
        content.append("[<Sparse Tensor>, ...]")
    elif attr.type_protos:
        n = len(attr.type_protos)
        content.append("[")
        content.extend(f"<Type Proto {tp}>{',' if i != n - 1 else ''}" for i, tp in enumerate(attr.type_protos))
        content.append("]")
    elif attr.graphs:
        n = len(attr.graphs)
        content.append("[")
        content.extend(f"<graph {g.name}>{',' if i != n - 1 else ''}" for i, g in enumerate(attr.graphs))
        content.append("]")
        graphs.extend(attr.graphs)
    else:
        content.append("<Unknown>")
    return " ".join(content), graphs


def printable_dim(dim: TensorShapeProto.Dimension) -> str:
    """A dimension as onnx prints it: its value, its parameter, or ``?``."""
    which = dim.WhichOneof("value")
    return "?" if which is None else str(getattr(dim, which))


def printable_type(t: TypeProto) -> str:
    """A TypeProto as onnx prints it (``FLOAT, 2x3``, ``FLOAT, scalar``)."""
    which = t.WhichOneof("value")
    if which == "tensor_type":
        s = TensorProto.DataType.Name(t.tensor_type.elem_type)
        if t.tensor_type.HasField("shape"):
            dims = t.tensor_type.shape.dim
            s += ", " + "x".join(map(printable_dim, dims)) if len(dims) else ", scalar"
        return s
    if which is None:
        return ""
    return f"Unknown type {which}"


def printable_value_info(v: ValueInfoProto) -> str:
    """``%name[TYPE, dims]`` as onnx prints a ValueInfoProto."""
    # onnx tests ``if v.type:``, which is true even for an unset type: always print it
    return f"%{v.name}[{printable_type(v.type)}]"


def printable_tensor_proto(t: TensorProto) -> str:
    """``%name[TYPE, dims]`` as onnx prints an initializer."""
    s = f"%{t.name}[" + TensorProto.DataType.Name(t.data_type)
    s += ", " + "x".join(map(str, t.dims)) if len(t.dims) else ", scalar"
    return s + "]"


def printable_node(node: NodeProto, prefix: str = "", subgraphs: bool = False) -> str | tuple[str, list[GraphProto]]:
    """``%out = Op[attrs](%in, ...)`` as onnx prints a node.

    Args:
        node: the node.
        prefix: text put before the line.
        subgraphs: also return the graphs held by its attributes.

    Returns:
        The text, or ``(text, graphs)`` when ``subgraphs`` is True.
    """
    line, graphs = _node_and_graphs(node, prefix)
    return (line, graphs) if subgraphs else line


def _node_and_graphs(node: NodeProto, prefix: str) -> tuple[str, list[GraphProto]]:
    content = []
    if len(node.output):
        content.append(", ".join(f"%{name}" for name in node.output))
        content.append("=")
    graphs: list[GraphProto] = []
    printed = []
    for attr in node.attribute:
        text, inner = _attribute_and_graphs(attr)
        printed.append(text)
        graphs.extend(inner)
    inputs = ", ".join(f"%{name}" for name in node.input)
    if node.attribute:
        content.append(f"{node.op_type}[{', '.join(sorted(printed))}]({inputs})")
    else:
        content.append(f"{node.op_type}({inputs})")
    return prefix + " ".join(content), graphs


def printable_graph(graph: GraphProto, prefix: str = "") -> str:
    """A graph as onnx's ``printable_graph`` lays it out, subgraphs after it.

    Args:
        graph: the graph.
        prefix: text put before every line of the graph.

    Returns:
        The multi-line text.
    """
    lines: list[str] = []
    header = ["graph", graph.name]
    initializers = {t.name for t in graph.initializer}
    if len(graph.input):
        header.append("(")
        plain = [printable_value_info(i) for i in graph.input if i.name not in initializers]
        with_init = [printable_value_info(i) for i in graph.input if i.name in initializers]
        if plain:
            lines.append(prefix + " ".join(header))
            header = []
            lines.extend(prefix + "  " + s for s in plain)
        header.append(")")
        if with_init:
            header.append("optional inputs with matching initializers (")
            lines.append(prefix + " ".join(header))
            header = []
            lines.extend(prefix + "  " + s for s in with_init)
            header.append(")")
        if len(with_init) < len(initializers):
            input_names = {i.name for i in graph.input}
            header.append("initializers (")
            lines.append(prefix + " ".join(header))
            header = []
            lines.extend(
                prefix + "  " + printable_tensor_proto(t) for t in graph.initializer if t.name not in input_names
            )
            header.append(")")
    header.append("{")
    lines.append(prefix + " ".join(header))
    indent = prefix + "  "
    graphs: list[GraphProto] = []
    for node in graph.node:
        text, inner = _node_and_graphs(node, indent)
        lines.append(text)
        graphs.extend(inner)
    tail = ["return"]
    if len(graph.output):
        tail.append(", ".join(f"%{o.name}" for o in graph.output))
    lines.append(indent + " ".join(tail))
    lines.append(prefix + "}")
    lines.extend("\n" + printable_graph(g) for g in graphs)
    return "\n".join(lines)


# ----------------------------------------------------------------------------
# to_text: onnx-light's readable listing
# ----------------------------------------------------------------------------
def _type_text(t: TypeProto) -> str:
    which = t.WhichOneof("value")
    if which in ("tensor_type", "sparse_tensor_type"):
        tt = getattr(t, which)
        s = TensorProto.DataType.Name(tt.elem_type) if tt.elem_type else "?"
        if tt.HasField("shape"):
            s += "[" + ",".join(printable_dim(d) for d in tt.shape.dim) + "]"
        return s if which == "tensor_type" else f"sparse({s})"
    if which == "sequence_type":
        return f"seq({_type_text(t.sequence_type.elem_type)})"
    if which == "optional_type":
        return f"optional({_type_text(t.optional_type.elem_type)})"
    if which == "map_type":
        key = TensorProto.DataType.Name(t.map_type.key_type)
        return f"map({key}, {_type_text(t.map_type.value_type)})"
    if which == "opaque_type":
        return f"opaque({t.opaque_type.domain}::{t.opaque_type.name})"
    return "?"


def _value_text(v: ValueInfoProto) -> str:
    return f"%{v.name}: {_type_text(v.type)}" if v.HasField("type") else f"%{v.name}"


def _tensor_text(t: TensorProto, values: bool = False) -> str:
    s = TensorProto.DataType.Name(t.data_type) + "[" + ",".join(map(str, t.dims)) + "]"
    if values and t.data_type != TensorProto.STRING:
        count = 1
        for d in t.dims:
            count *= d
        if count <= 8:
            try:
                from .numpy_helper import to_array

                s += " " + str(to_array(t).reshape(-1).tolist())
            except Exception:  # noqa: BLE001  (a listing never fails on odd data)
                pass
    return s


def _attr_text(attr: AttributeProto) -> str:
    if attr.ref_attr_name:
        return f"{attr.name}=@{attr.ref_attr_name}"
    t = attr.type
    if t == AttributeProto.FLOAT:
        value = f"{attr.f:.7g}"
    elif t == AttributeProto.INT:
        value = str(attr.i)
    elif t == AttributeProto.STRING:
        value = repr(_sanitize(attr.s))
    elif t == AttributeProto.TENSOR:
        value = "tensor(" + _tensor_text(attr.t, values=True) + ")"
    elif t == AttributeProto.GRAPH:
        value = f"<graph {attr.g.name}>"
    elif t == AttributeProto.TYPE_PROTO:
        value = _type_text(attr.tp)
    elif t == AttributeProto.SPARSE_TENSOR:
        value = "sparse_tensor(" + ",".join(map(str, attr.sparse_tensor.dims)) + ")"
    elif t == AttributeProto.FLOATS:
        value = "[" + ", ".join(f"{f:.7g}" for f in attr.floats) + "]"
    elif t == AttributeProto.INTS:
        value = str(list(attr.ints))
    elif t == AttributeProto.STRINGS:
        value = str([_sanitize(s) for s in attr.strings])
    elif t == AttributeProto.TENSORS:
        value = "[" + ", ".join("tensor(" + _tensor_text(x) + ")" for x in attr.tensors) + "]"
    elif t == AttributeProto.GRAPHS:
        value = "[" + ", ".join(f"<graph {g.name}>" for g in attr.graphs) + "]"
    elif t == AttributeProto.TYPE_PROTOS:
        value = "[" + ", ".join(_type_text(x) for x in attr.type_protos) + "]"
    else:
        value = "?"
    return f"{attr.name}={value}"


def _node_lines(node: NodeProto, indent: str) -> list[str]:
    outs = ", ".join(f"%{o}" if o else "_" for o in node.output)
    op = f"{node.domain}::{node.op_type}" if node.domain else node.op_type
    ins = ", ".join(f"%{i}" if i else "_" for i in node.input)
    line = f"{indent}{outs + ' = ' if outs else ''}{op}({ins})"
    if node.attribute:
        line += " {" + ", ".join(_attr_text(a) for a in node.attribute) + "}"
    lines = [line]
    for attr in node.attribute:
        for g in [attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs):
            lines.append(f"{indent}    {attr.name}:")
            lines.extend(_graph_lines(g, indent + "      "))
    return lines


def _graph_lines(graph: GraphProto, indent: str) -> list[str]:
    ins = ", ".join(_value_text(v) for v in graph.input)
    outs = ", ".join(_value_text(v) for v in graph.output)
    lines = [f"{indent}graph {graph.name} ({ins}) -> ({outs})"]
    inner = indent + "  "
    if graph.initializer:
        inits = ", ".join(f"%{t.name}: {_tensor_text(t)}" for t in graph.initializer)
        lines.append(f"{inner}initializers: {inits}")
    if graph.sparse_initializer:
        names = ", ".join(f"%{s.values.name}" for s in graph.sparse_initializer)
        lines.append(f"{inner}sparse initializers: {names}")
    for node in graph.node:
        lines.extend(_node_lines(node, inner))
    return lines


def _opsets_text(opsets: Any) -> str:
    return "{" + ", ".join(f"{o.domain or 'ai.onnx'}: {o.version}" for o in opsets) + "}"


def _function_lines(f: FunctionProto, indent: str) -> list[str]:
    attrs = list(f.attribute) + [a.name for a in f.attribute_proto]
    head = f"{indent}function {f.domain}::{f.name}"
    if f.overload:
        head += f":{f.overload}"
    head += f" ({', '.join('%' + i for i in f.input)}) -> ({', '.join('%' + o for o in f.output)})"
    lines = [head]
    inner = indent + "  "
    lines.append(f"{inner}opset_import: {_opsets_text(f.opset_import)}")
    if attrs:
        lines.append(f"{inner}attributes: {', '.join(attrs)}")
    for node in f.node:
        lines.extend(_node_lines(node, inner))
    return lines


def to_text(proto: ModelProto | GraphProto | FunctionProto | NodeProto) -> str:
    """A readable listing of a model, graph, function or node, one node per line.

    Each node reads ``%y = Mul(%a, %b) {attr=value}`` (``domain::Op`` outside
    ai.onnx, ``_`` for an omitted optional name); a graph starts with its inputs and
    outputs and lists its initializers; subgraphs of control-flow nodes are nested
    under their node; a model adds its header and model-local functions.

    Args:
        proto: the message to list.

    Returns:
        The text (no trailing newline).

    Raises:
        TypeError: ``proto`` is not one of the accepted messages.
    """
    proto = from_foreign(proto)
    if isinstance(proto, ModelProto):
        head = f"model ir_version={proto.ir_version} opset_import={_opsets_text(proto.opset_import)}"
        if proto.producer_name:
            head += f" producer={proto.producer_name} {proto.producer_version}".rstrip()
        lines = [head]
        lines.extend(_graph_lines(proto.graph, ""))
        for f in proto.functions:
            lines.extend(_function_lines(f, ""))
        return "\n".join(lines)
    if isinstance(proto, GraphProto):
        return "\n".join(_graph_lines(proto, ""))
    if isinstance(proto, FunctionProto):
        return "\n".join(_function_lines(proto, ""))
    if isinstance(proto, NodeProto):
        return "\n".join(_node_lines(proto, ""))
    raise TypeError(f"to_text takes a ModelProto, GraphProto, FunctionProto or NodeProto, not {type(proto).__name__}")
