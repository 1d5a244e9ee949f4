"""``family()``: a model and its derivative siblings, as CasADi's ONNX backend discovers them.

CasADi 3.8's ``GraphBuilder("dir/f.onnx").create(...)`` answers derivative requests from
sibling files: ``adj_f.onnx`` for reverse mode (``f.reverse(nadj)``), ``fwd_f.onnx`` for
forward mode, and the same rule again for the siblings (``fwd_adj_f.onnx``: forward over
reverse, what ``casadi.hessian`` needs). Its conventions, which the files follow:

* a sibling keeps the primal inputs (all of them) and appends one seed per differentiated
  value: ``adj_<y>`` inputs and ``adj_<x>`` outputs, ``fwd_<x>`` inputs and ``fwd_<y>``
  outputs; a name already carrying the prefix gets ``adj2_``/``fwd2_`` (CasADi's
  diff_prefix), with seed dimension ``nadj2``/``nfwd2``;
* CasADi is 2-D: a rank-0 or rank-1 value is a column, rank 2 a matrix (row-major in the
  tensor), a higher rank the column of its elements in row-major order; the seeds of an
  r-by-c value are one r-by-(nseed c) matrix ``[S_1 | S_2 | ...]``. The seed dimension is
  symbolic (``nadj``, or ``nadj_x<c>`` for nadj times c); CasADi binds each from the shape
  it expects;
* weights are embedded (CasADi hands the bytes to onnxruntime).

``layout="onnx"`` keeps our internal form instead: each seed tensor is the value's shape
with a trailing seed axis.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .onnx_core import (
    AttributeProto,
    FunctionProto,
    GraphProto,
    ModelProto,
    NodeProto,
    OnnxLightError,
    OperatorSetIdProto,
    TensorProto,
    ValueInfoProto,
    from_onnx,
    helper,
    numpy_helper,
    save,
)
from .onnx_core.gradient import FLOAT_TYPES, GradientOfFunction, GradRegistry, TangentOfFunction, diff_prefix
from .onnx_core.inliner import FunctionInliner
from .onnx_extensions.gradient import DefaultGradRegistry

__all__ = ["family", "adjoint_model", "tangent_model", "LAYOUTS"]

#: the seed layouts ``family`` writes
LAYOUTS = ("casadi", "onnx")


class FamilyError(OnnxLightError):
    """A model ``family`` cannot write siblings for (the message says why and what to do)."""


#: a value's dims: sizes, or the names of symbolic ones (the seed counts of a sibling)
Dims = tuple[int | str, ...]

#: seed counts whose adjoint runs the Loop body unrolled (an If per count, ahead of the Loop)
_UNROLLED_SEEDS = 4
#: bodies longer than this are unrolled for one seed only (the file holds 1 + 2 + ... copies)
_UNROLL_MAX_NODES = 400


def _dims(info: ValueInfoProto, what: str) -> Dims:
    t = info.type.tensor_type
    if not t.HasField("shape"):
        raise FamilyError(f"{what} {info.name!r} has no declared shape: CasADi needs fixed sizes; declare it")
    dims: list[int | str] = []
    for d in t.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.dim_param.startswith(("nfwd", "nadj")):
            dims.append(d.dim_param)  # a seed count of a sibling: bound by CasADi
        else:
            raise FamilyError(
                f"{what} {info.name!r} has the symbolic dimension {d.dim_param or '?'!r}: CasADi's matrices "
                "have fixed sizes; give the model static shapes before writing its family"
            )
    return tuple(dims)


def _is_float(info: ValueInfoProto) -> bool:
    return info.type.tensor_type.elem_type in FLOAT_TYPES


def _seed_dims(shape: Dims, seed: str, layout: str) -> list[int | str]:
    """The declared shape of the seeds of a value shaped ``shape``."""
    if layout == "onnx":
        return [*shape, seed]
    if len(shape) == 0:
        return [1, seed]
    if len(shape) == 1:
        return [shape[0], seed]
    if len(shape) == 2:
        c = shape[1]
        return [shape[0], seed if c == 1 else f"{seed}_x{c}" if isinstance(c, int) else f"{seed}_{c}"]
    return [_numel(shape), seed]


def _numel(shape: Dims) -> int:
    out = 1
    for d in shape:
        if not isinstance(d, int):
            raise FamilyError(f"a value of shape {shape} has a symbolic dimension beyond the first two")
        out *= d
    return out


class _Nodes:
    """A node list with fresh names, for the layout conversions and the seed loop."""

    def __init__(self, taken: set[str]) -> None:
        self.nodes: list[NodeProto] = []
        self.taken = taken

    def name(self, base: str) -> str:
        k, out = 0, base
        while out in self.taken:
            k += 1
            out = f"{base}_{k}"
        self.taken.add(out)
        return out

    def op(self, op_type: str, inputs: Sequence[str], out: str | None = None, **attrs: Any) -> str:
        name = out or self.name(f"family_{op_type}")
        self.nodes.append(helper.make_node(op_type, list(inputs), [name], **attrs))
        return name

    def ints(self, values: Sequence[int]) -> str:
        tensor = numpy_helper.from_array(np.asarray(values, np.int64), self.name("family_shape"))
        return self.op("Constant", [], tensor.name, value=tensor)

    def dim(self, primal: str, shape: Dims, axis: int) -> str:
        """Dimension ``axis`` of ``primal`` as a 1-element int64 tensor (a Constant when static)."""
        d = shape[axis]
        return self.ints([d]) if isinstance(d, int) else self.op("Shape", [primal], start=axis, end=axis + 1)

    def to_internal(self, t: str, primal: str, shape: Dims, layout: str, out: str) -> str:
        """Seeds in ``layout`` -> the value's shape with a trailing seed axis."""
        if layout == "onnx" or len(shape) == 1:
            return self.op("Identity", [t], out)
        if len(shape) == 0:
            return self.op("Reshape", [t, self.ints([-1])], out)
        if len(shape) == 2:
            target = self.op("Concat", [self.ints([0, -1]), self.dim(primal, shape, 1)], axis=0)
            return self.op("Transpose", [self.op("Reshape", [t, target])], out, perm=[0, 2, 1])
        # static sizes where known: an adjoint seeds an output it never computes
        sizes = [d for d in shape if isinstance(d, int)]
        if len(sizes) == len(shape):
            return self.op("Reshape", [t, self.ints([*sizes, -1])], out)
        target = self.op("Concat", [*(self.dim(primal, shape, a) for a in range(len(shape))), self.ints([-1])], axis=0)
        return self.op("Reshape", [t, target], out)

    def from_stacked(self, t: str, shape: Dims, layout: str, out: str) -> str:
        """The seed axis first (a Loop's stacked outputs) -> seeds in ``layout``, one Transpose."""
        r = len(shape)
        if layout == "onnx":
            return self.op("Transpose", [t], out, perm=[*range(1, r + 1), 0])
        if r == 0:
            return self.op("Unsqueeze", [t, self.ints([0])], out)
        if r == 1:
            return self.op("Transpose", [t], out, perm=[1, 0])
        if r == 2:
            return self.op("Reshape", [self.op("Transpose", [t], perm=[1, 0, 2]), self.ints([0, -1])], out)
        return self.op("Transpose", [self.op("Reshape", [t, self.ints([0, -1])])], out, perm=[1, 0])

    def from_one(self, t: str, shape: Dims, layout: str, out: str) -> str:
        """The value's shape (its one seed) -> seeds in ``layout``: reshapes only."""
        r = len(shape)
        if layout == "onnx" or r == 1:
            return self.op("Unsqueeze", [t, self.ints([-1])], out)
        if r == 2:
            return self.op("Identity", [t], out)
        return self.op("Reshape", [t, self.ints([-1, 1])], out)

    def from_unrolled(self, ts: list[str], shape: Dims, layout: str, out: str) -> str:
        """The value's shape once per seed -> seeds in ``layout``: one Concat (reshapes for one seed)."""
        if len(ts) == 1:
            return self.from_one(ts[0], shape, layout, out)
        r = len(shape)
        if layout == "onnx":
            return self.op("Concat", [self.op("Unsqueeze", [t, self.ints([-1])]) for t in ts], out, axis=-1)
        if r == 2:
            return self.op("Concat", ts, out, axis=1)
        columns = [
            self.op("Unsqueeze", [t, self.ints([1])]) if r == 1 else self.op("Reshape", [t, self.ints([-1, 1])])
            for t in ts
        ]
        return self.op("Concat", columns, out, axis=1)

    def from_internal(self, t: str, shape: Dims, layout: str, out: str) -> str:
        """The value's shape with a trailing seed axis -> seeds in ``layout``."""
        if layout == "onnx" or len(shape) == 1:
            return self.op("Identity", [t], out)
        if len(shape) == 2:
            return self.op("Reshape", [self.op("Transpose", [t], perm=[0, 2, 1]), self.ints([0, -1])], out)
        if len(shape) == 0:
            return self.op("Unsqueeze", [t, self.ints([0])], out)
        return self.op("Flatten", [t], out, axis=len(shape))


def _names(model: ModelProto) -> set[str]:
    g = model.graph
    taken = {i.name for i in [*g.input, *g.output]} | {t.name for t in g.initializer}
    taken.update(o for n in g.node for o in [*n.input, *n.output])
    return taken


def _seed_dim(prefix: str) -> str:
    """``adj_`` -> ``nadj``, ``fwd2_`` -> ``nfwd2`` (CasADi's seed dimensions)."""
    return "n" + prefix[:3] + prefix[3:-1]


def _free_inputs(model: ModelProto) -> list[ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def adjoint_model(model: ModelProto, *, layout: str = "casadi", registry: GradRegistry | None = None) -> ModelProto:
    """The reverse-mode sibling: inputs ``[*inputs, *adj_<y>]``, outputs ``[*adj_<x>]``.

    ``adj_x = J^T adj_y`` for every float input x and output y, for any number of seeds
    (the symbolic dimension ``nadj``) in one run: the backward nodes that read the seed run
    in a Loop over the seeds (unrolled for up to ``_UNROLLED_SEEDS`` seeds), the others
    once before it.

    Args:
        model: the primal model (static shapes, weights as initializers).
        layout: "casadi" (CasADi's matrices) or "onnx" (a trailing seed axis).
        registry: the rules (default: ``DefaultGradRegistry()``).

    Returns:
        The adjoint ModelProto, weights embedded.
    """
    return _adjoint_models(from_onnx(model), layout, registry, (_UNROLLED_SEEDS,))[0]


def _adjoint_models(
    model: ModelProto, layout: str, registry: GradRegistry | None, unrolled: Sequence[int]
) -> list[ModelProto]:
    """``adjoint_model`` once per count in ``unrolled`` (seed counts up to it unrolled),
    from one reverse pass; ``family`` differentiates the count-1 form for ``fwd_adj_f``
    (forward mode would otherwise differentiate every unrolled copy)."""
    _check_layout(layout)
    inputs, outputs = _free_inputs(model), list(model.graph.output)
    xs = [i for i in inputs if _is_float(i)]
    ys = [o for o in outputs if _is_float(o)]
    if not xs or not ys:
        raise FamilyError("the model needs a float input and a float output to have an adjoint")
    _refuse_passthrough(xs, ys)
    shapes = {v.name: _dims(v, "input") for v in inputs} | {v.name: _dims(v, "output") for v in ys}
    prefix = diff_prefix([v.name for v in [*inputs, *outputs]], "adj")
    dim = _seed_dim(prefix)
    b = _Nodes(_names(model))
    seeds = {y.name: b.name(f"{prefix}{y.name}") for y in ys}
    per_seed = {y.name: b.name(f"{seeds[y.name]}_seed") for y in ys}
    loss_name = b.name("family_loss")
    loss = _loss_graph(model, ys, per_seed, b, loss_name)
    bwd = GradientOfFunction(loss, [x.name for x in xs], loss_name, registry=registry or DefaultGradRegistry(),
                             allow_unused=True)  # fmt: skip
    # the seeds in our form (a trailing seed axis), then the backward nodes that read them in a Loop
    internal = {
        y.name: b.to_internal(seeds[y.name], y.name, shapes[y.name], layout, b.name(f"{seeds[y.name]}_t")) for y in ys
    }
    b.op("Constant", [], bwd.input[-1], value=numpy_helper.from_array(np.ones((), _np_dtype(ys[0]))))
    stacked = _seed_loop(b, bwd, internal, per_seed, [(f"grad_{x.name}", x.type.tensor_type.elem_type) for x in xs])
    _seed_first_gathers(b, {internal[y.name]: len(shapes[y.name]) + 1 for y in ys})
    seed_infos = [_info(seeds[y.name], y, _seed_dims(shapes[y.name], dim, layout)) for y in ys]
    shared, models = list(b.nodes), []
    for top in unrolled:
        b.nodes = list(shared)
        outs = _one_seed_or_loop(b, [(f"{prefix}{x.name}", shapes[x.name]) for x in xs], stacked, layout, top)
        out_infos = [_info(o, x, _seed_dims(shapes[x.name], dim, layout)) for o, x in zip(outs, xs)]
        name = f"adj_{model.graph.name}"
        models.append(_model(model, b.nodes, [*inputs, *seed_infos], out_infos, bwd.opset_import, name))
    return models


def _refuse_passthrough(xs: list[ValueInfoProto], ys: list[ValueInfoProto]) -> None:
    """An output that is also an input would name its seed ``adj_<name>`` like the input's
    adjoint (and ``fwd_<name>`` alike): one name for an input and an output of the sibling."""
    both = sorted({x.name for x in xs} & {y.name for y in ys})
    if both:
        raise FamilyError(
            f"the outputs {both} are also inputs of the model: their seeds and the inputs' derivatives would "
            "share one name; give each such output its own name (an Identity node)"
        )


def _loss_graph(model: ModelProto, ys: list[ValueInfoProto], seeds: dict[str, str], b: _Nodes, name: str) -> ModelProto:
    """The model with ``name = sum_y <seed_y, y>`` (one seed per output, shaped like it)."""
    g = model.graph
    nodes, terms = list(g.node), []
    for y in ys:
        prod, term = b.name("family_mul"), b.name("family_term")
        nodes.append(helper.make_node("Mul", [seeds[y.name], y.name], [prod]))
        nodes.append(helper.make_node("ReduceSum", [prod], [term], keepdims=0))
        if y.type.tensor_type.elem_type != ys[0].type.tensor_type.elem_type:
            cast = b.name("family_cast")
            nodes.append(helper.make_node("Cast", [term], [cast], to=ys[0].type.tensor_type.elem_type))
            term = cast
        terms.append(term)
    nodes.append(helper.make_node("Sum", terms, [name]))
    seed_infos = [
        _info(seeds[y.name], y, [d.dim_value or d.dim_param for d in y.type.tensor_type.shape.dim]) for y in ys
    ]
    loss = helper.make_tensor_value_info(name, ys[0].type.tensor_type.elem_type, [])
    graph = helper.make_graph(nodes, g.name, [*g.input, *seed_infos], [loss], list(g.initializer))
    graph.value_info.extend(g.value_info)
    out = ModelProto()
    out.CopyFrom(model)
    out.graph.CopyFrom(graph)
    return out


def _seed_loop(
    b: _Nodes, bwd: FunctionProto, internal: dict[str, str], per_seed: dict[str, str], grads: list[tuple[str, int]]
) -> list[str]:
    """Emits the backward nodes: those reading a seed in a Loop over the seeds (each iteration
    taking one slice of every seed), the others before it. Returns the stacked gradients
    (the seed axis first)."""
    varying = set(per_seed.values())  # and what is computed from them (dy is the constant 1, outside)
    body_nodes: list[NodeProto] = []
    k, cond = b.name("family_seed"), b.name("family_cond")
    for y, seed in per_seed.items():
        body_nodes.append(helper.make_node("Gather", [internal[y], k], [seed], axis=-1))
    for node in bwd.node:
        if any(i in varying for i in node.input) or _reads_any(node, varying):
            body_nodes.append(node)
            varying.update(o for o in node.output if o)
        else:
            b.nodes.append(node)
    cond_out = b.name("family_cond_out")
    outs = [b.name(f"{g}_k") for g, _ in grads]
    body_nodes.append(helper.make_node("Identity", [cond], [cond_out]))
    body_nodes += [helper.make_node("Identity", [g], [o]) for (g, _), o in zip(grads, outs)]
    vi = helper.make_tensor_value_info
    body_in = [vi(k, TensorProto.INT64, []), vi(cond, TensorProto.BOOL, [])]
    body_out = [vi(cond_out, TensorProto.BOOL, []), *(vi(o, dt, None) for o, (_, dt) in zip(outs, grads))]
    body = helper.make_graph(body_nodes, "family_seeds", body_in, body_out)
    first = next(iter(internal.values()))
    count = b.op("Squeeze", [b.op("Shape", [first], start=-1)])
    stacked = [b.name(f"{g}_stacked") for g, _ in grads]
    b.nodes.append(helper.make_node("Loop", [count, ""], stacked, body=body))
    return stacked


def _one_seed_or_loop(
    b: _Nodes, outputs: list[tuple[str, Dims]], stacked: list[str], layout: str, unrolled: int = _UNROLLED_SEEDS
) -> list[str]:
    """Replaces the seed Loop (the last node) by ``If(nseed == 1, body once, If(nseed == 2,
    body twice, ... Loop))``.

    The Loop's per-iteration output copies and the seed-first -> layout Transposes of the
    gradients cost as much as a backward Gemm (the 784x512 weight of the MLP: 1 ms per
    copy, onnxruntime copying again for the Reshape into the layout). A branch for n
    seeds runs the Loop body's nodes n times (``k = 0, ..., n - 1``) and writes the
    gradients in the layout with one Concat each (CasADi's ``[S_1 | S_2 | ...]`` is a
    Concat on axis 1; one seed: a reshape). Counts up to ``unrolled`` are unrolled (one
    only when the body is long or holds subgraphs).

    Args:
        b: the nodes, the seed Loop last.
        outputs: the sibling's output names and the shapes of their values.
        stacked: the Loop's outputs (seed axis first), one per output.
        layout: the seed layout.
        unrolled: the largest seed count whose branch runs the body unrolled.

    Returns:
        The output names (``outputs``' names, written by the outermost If).
    """
    loop = b.nodes.pop()
    body = next(a.g for a in loop.attribute if a.name == "body")
    many = _Nodes(b.taken)
    many.nodes.append(loop)
    branch = many.nodes
    branch_out = [many.from_stacked(t, shape, layout, b.name(f"{o}_loop")) for t, (o, shape) in zip(stacked, outputs)]
    vi = helper.make_tensor_value_info
    types = [o.type.tensor_type.elem_type for o in body.output[1:]]
    has_graphs = any(a.HasField("g") or len(a.graphs) for n in body.node for a in n.attribute)
    top = 1 if has_graphs or len(body.node) > _UNROLL_MAX_NODES else max(1, unrolled)
    for count in range(top, 0, -1):
        copies = _Nodes(b.taken)
        per_seed = [_body_copy(copies, body, k) for k in range(count)]
        names = [b.name(f"{o}_one" if count == 1 else f"{o}_{count}") for o, _ in outputs]
        for i, (name, (_, shape)) in enumerate(zip(names, outputs)):
            copies.from_unrolled([grads[i] for grads in per_seed], shape, layout, name)
        cond = b.op(
            "Equal", [loop.input[0], b.op("Constant", [], value=numpy_helper.from_array(np.array(count, np.int64)))]
        )
        then = _graph(copies.nodes, f"family_{count}_seeds", [vi(o, t, None) for o, t in zip(names, types)])
        other = _graph(branch, "family_seeds", [vi(o, t, None) for o, t in zip(branch_out, types)])
        branch_out = [o for o, _ in outputs] if count == 1 else [b.name(f"{o}_upto{count}") for o, _ in outputs]
        branch = [_if(cond, branch_out, then, other)]
        if count > 1:  # the condition is computed in the enclosing branch: move it in
            branch[:0] = b.nodes[-2:]
            del b.nodes[-2:]
    b.nodes += branch
    return [o for o, _ in outputs]


def _graph(nodes: list[NodeProto], name: str, outputs: list[ValueInfoProto]) -> GraphProto:
    """A branch graph holding ``nodes`` themselves (``helper.make_graph`` copies each node,
    and the nested Ifs of the unrolled seed counts would be copied once per level)."""
    graph = GraphProto()
    graph.name = name
    graph.node = nodes
    graph.output = outputs
    return graph


def _if(cond: str, outputs: list[str], then: GraphProto, other: GraphProto) -> NodeProto:
    """``If(cond)`` holding the branch graphs themselves (see ``_graph``)."""
    node = NodeProto()
    node.op_type = "If"
    node.input.append(cond)
    node.output.extend(outputs)
    for name, graph in (("then_branch", then), ("else_branch", other)):
        attr = AttributeProto()
        attr.name, attr.type, attr.g = name, AttributeProto.GRAPH, graph
        node.attribute.append(attr)
    return node


def _body_copy(b: _Nodes, body: GraphProto, k: int) -> list[str]:
    """The seed Loop body's nodes for iteration ``k`` (the counter a Constant, every value
    the body defines renamed apart from the other copies); returns its gradients."""
    counter, cond = body.input[0].name, body.input[1].name
    renamed = {counter: b.name(f"family_seed{k}")}
    b.nodes.append(
        helper.make_node("Constant", [], [renamed[counter]], value=numpy_helper.from_array(np.array(k, np.int64)))
    )
    for node in body.node:
        if cond in node.input:
            continue
        copy = NodeProto()
        copy.CopyFrom(node)
        copy.input[:] = [renamed.get(i, i) for i in node.input]
        for j, o in enumerate(node.output):
            if o:
                renamed[o] = copy.output[j] = b.name(f"{o}_s{k}")
        b.nodes.append(copy)
    return [renamed.get(o.name, o.name) for o in body.output[1:]]


def _seed_first_gathers(b: _Nodes, ranks: dict[str, int]) -> None:
    """Loop bodies take seed ``k`` of a trailing-seed-axis tensor with ``Gather(t, k, axis=-1)``:
    a strided copy of every element (onnxruntime: 7 ms for one 784x512 seed). This moves the
    seed axis first once, before the Loop (one Transpose, merged with the layout's), so each
    iteration takes one contiguous block: ``Gather(t_first, k, axis=0)``, the same values.

    Args:
        b: the nodes; their top-level Loops are rewritten in place.
        ranks: the trailing-seed-axis tensors (seed axis included in the rank) to rewrite.
    """
    out: list[NodeProto] = []
    first: dict[str, str] = {}
    for loop in b.nodes:
        bodies = [a.g for a in loop.attribute if a.name == "body"] if loop.op_type == "Loop" else []
        for node in bodies[0].node if bodies else []:
            data = node.input[0] if node.op_type == "Gather" else ""
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            if data not in ranks or node.input[1] != bodies[0].input[0].name or axis not in (-1, ranks[data] - 1):
                continue  # not a seed slice by the iteration counter (a scalar, so the shapes agree)
            if data not in first:
                r = ranks[data]
                first[data] = b.name(f"{data}_first")
                out.append(helper.make_node("Transpose", [data], [first[data]], perm=[r - 1, *range(r - 1)]))
            node.input[0] = first[data]
            del node.attribute[:]
            node.attribute.append(helper.make_attribute("axis", 0))
        out.append(loop)
    b.nodes[:] = out


def _reads_any(node: NodeProto, names: set[str]) -> bool:
    """True when a subgraph of ``node`` reads one of ``names``."""
    for attr in node.attribute:
        graphs: list[GraphProto] = ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)
        for g in graphs:
            for n in g.node:
                if any(i in names for i in n.input) or _reads_any(n, names):
                    return True
    return False


def tangent_model(model: ModelProto, *, layout: str = "casadi", registry: GradRegistry | None = None) -> ModelProto:
    """The forward-mode sibling: inputs ``[*inputs, *fwd_<x>]``, outputs ``[*fwd_<y>]``.

    ``fwd_y = J fwd_x`` for every float input x and output y, any number of seeds (the
    symbolic dimension ``nfwd``) in one run. Applied to the adjoint sibling it gives
    ``fwd_adj_f``: forward over reverse, Hessian-vector products.

    Args:
        model: the model (static shapes, weights as initializers).
        layout: "casadi" (CasADi's matrices) or "onnx" (a trailing seed axis).
        registry: the rules (default: ``DefaultGradRegistry()``).

    Returns:
        The tangent ModelProto, weights embedded.
    """
    _check_layout(layout)
    model = from_onnx(model)  # ours, or onnx's converted
    inputs, outputs = _free_inputs(model), list(model.graph.output)
    xs = [i for i in inputs if _is_float(i)]
    ys = [o for o in outputs if _is_float(o)]
    if not xs or not ys:
        raise FamilyError("the model needs a float input and a float output to have a tangent")
    _refuse_passthrough(xs, ys)
    shapes = {v.name: _dims(v, "input") for v in inputs} | {v.name: _dims(v, "output") for v in ys}
    rules = registry or DefaultGradRegistry()
    fn = TangentOfFunction(model, [x.name for x in xs], [y.name for y in ys], registry=rules, seeds="dynamic",
                           allow_unused=True)  # fmt: skip
    n_fwd = len(xs)
    prefix = fn.input[len(fn.input) - n_fwd][: -len(xs[0].name)]
    dim = _seed_dim(prefix)
    b = _Nodes(_names(model) | set(fn.input) | set(fn.output))
    call_in = list(fn.input[: len(fn.input) - n_fwd])
    for x in xs:
        t = b.to_internal(f"{prefix}{x.name}", x.name, shapes[x.name], layout, b.name(f"{prefix}{x.name}_t"))
        call_in.append(t)
    call_out = [b.name(f"{o}_t") for o in fn.output]
    call = helper.make_node(fn.name, call_in, call_out, domain=fn.domain)
    b.nodes += FunctionInliner([fn]).expand([call])
    _seed_first_gathers(b, {t: len(shapes[x.name]) + 1 for x, t in zip(xs, call_in[len(call_in) - n_fwd :])})
    for y, t in zip(ys, call_out):
        b.from_internal(t, shapes[y.name], layout, f"{prefix}{y.name}")
    seed_infos = [_info(f"{prefix}{x.name}", x, _seed_dims(shapes[x.name], dim, layout)) for x in xs]
    out_infos = [_info(f"{prefix}{y.name}", y, _seed_dims(shapes[y.name], dim, layout)) for y in ys]
    imports = [i for i in fn.opset_import if i.domain != fn.domain]
    return _model(model, b.nodes, [*inputs, *seed_infos], out_infos, imports, f"fwd_{model.graph.name}")


def _info(name: str, like: ValueInfoProto, dims: Sequence[int | str]) -> ValueInfoProto:
    return helper.make_tensor_value_info(name, like.type.tensor_type.elem_type, list(dims))


def _np_dtype(info: ValueInfoProto) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type))


def _model(
    source: ModelProto,
    nodes: list[NodeProto],
    inputs: list[ValueInfoProto],
    outputs: list[ValueInfoProto],
    imports: Sequence[OperatorSetIdProto],
    name: str,
) -> ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, list(source.graph.initializer))
    model = helper.make_model(graph, opset_imports=list(imports))
    model.ir_version = max(int(source.ir_version), 10)  # opset 21 needs IR 10
    return model


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise FamilyError(f"layout={layout!r}: give one of {LAYOUTS}")


def family(
    model: ModelProto,
    path: str | os.PathLike[str],
    *,
    layout: str = "casadi",
    second_order: bool = True,
    forward_sibling: bool = False,
    registry: GradRegistry | None = None,
) -> list[Path]:
    """Writes ``model`` to ``path`` and its derivative siblings beside it, with CasADi's conventions.

    For ``path = "out/f.onnx"``: ``out/f.onnx`` (the model, weights embedded),
    ``out/adj_f.onnx`` (reverse mode, see :func:`adjoint_model`), with ``second_order``
    ``out/fwd_adj_f.onnx`` (forward over reverse: what ``casadi.hessian`` needs), and with
    ``forward_sibling`` ``out/fwd_f.onnx`` (forward mode; worth it when the model has fewer
    inputs than outputs).

    Args:
        model: the model; its float inputs and outputs are differentiated.
        path: where the primal goes; the siblings are named from it.
        layout: "casadi" (CasADi's matrix layout) or "onnx" (each seed tensor the value's
            shape with a trailing seed axis).
        second_order: write ``fwd_adj_<name>`` too.
        forward_sibling: write ``fwd_<name>`` too.
        registry: the rules (default: ``DefaultGradRegistry()``).

    Returns:
        The paths written.
    """
    _check_layout(layout)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    primal = ModelProto()
    primal.CopyFrom(from_onnx(model))  # ours, or onnx's converted
    written = [path]
    save(primal, path)  # tensors loaded from external data are written inline
    adj = _adjoint_models(primal, layout, registry, (_UNROLLED_SEEDS, 1) if second_order else (_UNROLLED_SEEDS,))
    written.append(path.with_name(f"adj_{path.name}"))
    save(adj[0], written[-1])
    if second_order:  # from the Loop-only adjoint: the unrolled copies would each get a tangent
        written.append(path.with_name(f"fwd_adj_{path.name}"))
        save(tangent_model(adj[-1], layout=layout, registry=registry), written[-1])
    if forward_sibling:
        written.append(path.with_name(f"fwd_{path.name}"))
        save(tangent_model(primal, layout=layout, registry=registry), written[-1])
    return written
