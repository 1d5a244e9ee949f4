"""Reverse-mode differentiation of ONNX nodes into a self-contained FunctionProto.

The pass (the seed's algorithm, with what it lacked):

1. upgrade forward nodes to the emitted opset and index every value's producer;
2. keep the ancestors of ``y`` (iteratively, no recursion) and infer types/shapes;
3. sweep forward once with one bit per ``x`` to know which values depend on which
   variables, differentiably (through float values and ops with gradients) and at all;
4. walk the nodes on a path from an ``x`` to ``y`` in reverse, calling each op's rule;
   contributions to a value are accumulated with one ``Add`` (two) or ``Sum`` (more),
   emitted only once a second contribution exists; broadcasting is undone here, not
   in the rules;
5. name each gradient ``grad_<x>`` with an ``Identity`` and re-emit, once and in
   order, the forward nodes whose values the backward nodes read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain, filterfalse
from operator import itemgetter
from typing import Any, cast

import numpy as np

from .._errors import GradientError, OnnxLightError
from .._proto import (
    AttributeProto,
    FunctionProto,
    GraphProto,
    NodeProto,
    TensorProto,
    ValueInfoProto,
)
from ..helper import (
    OPSET_VERSION,
    make_tensor_value_info,
    tensor_dtype_to_np_dtype,
)
from ..numpy_helper import from_array
from ..ops import DEFAULT_DOMAIN, is_random, normalise_domain, op_label, op_types_with, traits, upgrade_nodes
from ..optimizer._plan import EmitRecord
from ._assembly import NEEDED, function_proto, marked_ancestors, needed_indices, read_order, singles_live
from ._branches import condition_value, inline_graph
from ._context import FLOAT_TYPES, BuilderError, GradContext, OpBuilder
from ._expand import expand_ruleless
from ._fastpath import (
    Fields,
    attribute,
    attribute_values,
    copy_node,
    has_subgraph,
    new_node,
    node_fields,
    nodes_fields,
    raw_tensor,
    tensor_attribute,
    value_type,
)
from ._local_outputs import localised_outputs
from ._names import DY, EMITTED_OPSET, GradCounter, NewGradName, _SeedAccum, nested_names
from ._registry import GradRegistry, GradRule, SeedGradFn, ShortGradFn
from ._sequences import output_is_sequence, sequence_elem_type, sequence_info, sum_body
from ._types import INFER, UNKNOWN, NodeInfo, Shape, ValueType, infer_types

__all__ = ["FOLD_MAX", "subgraph_inputs"]

#: integer constants up to this many elements are folded for shape inference
FOLD_MAX = 64


def _attributes(attrs: dict[str, Any]) -> list[AttributeProto]:
    """The AttributeProtos of an emitted node: sorted by name, None values left out."""
    if len(attrs) == 1:  # most emitted nodes with attributes have one: nothing to sort
        ((key, value),) = attrs.items()
        return [] if value is None else [attribute(key, value)]
    out = []
    for key in sorted(attrs):
        value = attrs[key]
        if value is None:
            continue
        out.append(attribute(key, value))
    return out


class _GradientPass:
    """One run of the pass; see the module docstring."""

    def __init__(
        self,
        nodes: list[NodeProto],
        xs: Sequence[str],
        y: str,
        zs: Sequence[str] | None,
        registry: GradRegistry,
        *,
        allow_unused: bool,
        types: dict[str, ValueType],
        constants: dict[str, np.ndarray],
        free_order: Sequence[str],
        opset_imports: dict[str, int],
        name: str,
        declared: dict[str, ValueInfoProto] | None = None,
    ) -> None:
        if isinstance(xs, str):
            xs = [xs]
        self.xs = list(xs)
        if not isinstance(y, str):
            raise GradientError(f"y must be one value name, got {y!r}; differentiate each output on its own")
        if not all(isinstance(x, str) for x in self.xs):
            raise GradientError(f"xs must be value names, got {self.xs!r}")
        self.y = y
        self.zs = None if zs is None else list(zs)
        self.registry = registry
        self.allow_unused = allow_unused
        self.name = name
        self.source_opset = opset_imports.get("", EMITTED_OPSET)
        if self.source_opset > OPSET_VERSION:
            raise GradientError(
                f"the source imports ai.onnx opset {self.source_opset}, newer than the newest onnx-light knows "
                f"({OPSET_VERSION}): its ops may mean something else there; convert it to opset "
                f"{OPSET_VERSION} or older"
            )
        self.opset = max(EMITTED_OPSET, self.source_opset)
        self.opset_imports = dict(opset_imports)
        # the fields of every forward node, read once for all the phases (see _fastpath)
        fields = nodes_fields(nodes)
        clash = self._take_names(fields, free_order)
        # a rule nesting a body's vector-Jacobian product renames by name: no emitted name may
        # repeat one defined inside a subgraph (a backward function differentiated again)
        nested = [n for n, f in zip(nodes, fields) if f[4] and has_subgraph(f[4])]
        if nested:
            self.counter.taken.update(nested_names(nested))
            localised = localised_outputs(nodes, self.new_name)
            if localised is not nodes:  # a body returned an outer value directly
                nodes, fields = localised, nodes_fields(localised)
        #: value_info entries not read yet, by name (see _api._graph_types); each is read
        #: before anything can look its type up
        self._declared = declared or {}
        if self._declared and clash:
            self._read_declared(types, clash)  # their types move to the new names
        renamed_nodes, renamed = _rename_reserved(nodes, clash, self.new_name) if clash else (nodes, {})
        self.y = renamed.get(y, y)
        for old, new in renamed.items():
            if old in types:
                types[new] = types[old]
        upgraded = self._upgrade(renamed_nodes, types, fields)
        # a function op without a rule is differentiated through its expansion (ops/_expand.py)
        self.nodes = expand_ruleless(
            upgraded,
            types,
            constants,
            self.opset,
            lambda domain, op_type: registry.lookup(domain, op_type, self.opset) is not None,
            self.new_name,
            kinds=_kinds(fields) if upgraded is renamed_nodes else None,
        )
        if self.nodes is not nodes:  # renamed or upgraded: read the new nodes, reuse the others
            by_id = {id(n): f for n, f in zip(nodes, fields)}  # `nodes` is alive: ids are unique
            fields = [by_id.get(id(n)) or node_fields(n) for n in self.nodes]
        #: ``(op_type, domain, inputs, outputs, attributes)`` of each of ``self.nodes``
        self._fields: list[Fields] = fields
        #: attribute values of forward nodes by index, read when first needed
        self._attrs: dict[int, dict[str, Any]] = {}
        self.free_order = [renamed.get(n, n) for n in free_order]
        self.types = types
        self.constants = constants
        self._init_state()

    def _init_state(self) -> None:
        """The empty state the phases fill: emitted nodes, caches, indices."""
        self.backward: list[NodeProto] = []
        #: ``(reads, outputs, domain)`` of each backward node, for ``_assemble``
        self._backward_io: list[tuple[list[str], list[str], str]] = []
        self._const_cache: dict[tuple[Any, ...], str] = {}
        #: int_constant's names by the tuple of ints asked for
        self._ints_cache: dict[tuple[int, ...], str] = {}
        #: typed_constant's names of Python scalars by (dtype, type, value; a float by its bits)
        self._scalar_cache: dict[tuple[Any, ...], str] = {}
        self._shape_cache: dict[str, str] = {}
        self._extra_outputs: dict[int, dict[int, str]] = {}
        #: forward nodes a rule replaced by nodes computing their outputs and more (``replace_forward``)
        self._replaced: dict[int, list[NodeProto]] = {}
        self._index_of: dict[int, int] = {}
        self._producer: dict[str, int] = {}
        self._rule_cache: dict[tuple[str, str], GradRule | None] = {}
        #: emitted values whose types rules declared (written to the result's value_info)
        self.declared_outputs: list[str] = []
        #: the values that depend differentiably on an x (set by the reverse walk)
        self._diff: dict[str, int] = {}
        #: one ``ctx.op`` builder per prefix (op type), shared by the contexts
        self.builders: dict[str, OpBuilder] = {}
        #: the xs that reached y through a branch inlined away
        self._reached: set[str] = set()
        #: element types of the values known to be sequences (see ``_sequences``)
        self.sequence_types: dict[str, ValueType] = {}
        #: what the optimizer may skip (its constants recorded here, liveness by ``_assemble``)
        self.emit_record = EmitRecord()

    def _take_names(self, fields: list[Fields], free_order: Sequence[str]) -> set[str]:
        """Sets up the counter over every name in the source and names the seed; returns the
        source values to rename (an intermediate called ``dy`` or ``grad_<x>``).

        The seed is called ``dy`` unless an input of the source is (say, when
        differentiating a backward function again): then it gets a fresh name, since the
        caller feeds that input by its own name.
        """
        names = set(chain.from_iterable(map(itemgetter(2), fields)))
        names.update(chain.from_iterable(map(itemgetter(3), fields)))
        seed_renamed = DY in free_order or DY in self.xs or (self.zs is not None and DY in self.zs)
        reserved = self._reserved() - ({DY} if seed_renamed else set()) - set(self.xs)
        clash = reserved & names
        names |= {*(f"grad_{x}" for x in self.xs), *free_order}
        if not seed_renamed:
            names.add(DY)
        self.counter = GradCounter()
        self.counter.taken = names  # every name in the source (owned: no copy of a large set)
        #: the name of the output-gradient input (the function's last input)
        self.dy = self.new_name(DY) if seed_renamed else DY
        return clash

    def _reserved(self) -> set[str]:
        """The names of the result's contract, renamed where the source uses them."""
        return {DY, *(f"grad_{x}" for x in self.xs)}

    # -- helpers used by GradContext ------------------------------------------------
    def new_name(self, prefix: str) -> str:
        return NewGradName(prefix, self.counter)

    def emit(
        self, op_type: str, inputs: list[str], n_outputs: int, domain: str, attrs: dict[str, Any], prefix: str
    ) -> list[str]:
        """Appends a node; it owns ``inputs`` (callers pass a fresh list). Returns its outputs."""
        if n_outputs == 1:
            outs = [NewGradName(prefix, self.counter)]
            node_outs = outs  # only outs[0] leaves the pass: the node may own the list
        else:
            outs = [self.new_name(prefix) for _ in range(n_outputs)]
            node_outs = list(outs)
        node = new_node(op_type, inputs, node_outs, domain, _attributes(attrs) if attrs else None)
        self.backward.append(node)
        reads = inputs
        if attrs and any(isinstance(v, GraphProto) for v in attrs.values()):
            reads = inputs + subgraph_inputs(node)  # a body's outer-scope names are read too
        self._backward_io.append((reads, node_outs, domain))  # what _push records, inline: the hot path
        return outs

    def emit_one(self, op_type: str, inputs: list[str], prefix: str) -> str:
        """``emit(op_type, inputs, 1, "", {}, prefix)[0]``: a default-domain node with one
        output and no attribute, most of what rules emit; it owns ``inputs``."""
        name = NewGradName(prefix, self.counter)
        outs = [name]
        self.backward.append(new_node(op_type, inputs, outs))
        self._backward_io.append((inputs, outs, ""))
        return name

    def push_node(self, node: NodeProto) -> None:
        """Appends a ready-made backward node (what it reads in subgraphs included)."""
        _, domain, inputs, outputs, attributes = node_fields(node)
        self._push(node, _reads(node, list(inputs), attributes), list(outputs), domain)

    def captured(self, i: int) -> list[str]:
        """The outer-scope names forward node ``i``'s subgraphs read, each once, in order."""
        n_in = len(self._fields[i][2])
        return list(dict.fromkeys(n for n in self._reads[i][n_in:] if n))

    def depends(self, name: str) -> bool:
        """True when ``name`` depends differentiably on an x (during the reverse walk)."""
        return name in self._diff

    def _push(self, node: NodeProto, reads: list[str], outputs: list[str], domain: str) -> None:
        self.backward.append(node)
        self._backward_io.append((reads, outputs, domain))

    def constant(self, value: np.ndarray) -> str:
        raw = value.tobytes()
        dtype_str = value.dtype.str  # (numpy builds the string on each read: read once)
        shape = value.shape
        key = (dtype_str, shape, raw)
        name = self._const_cache.get(key)
        if name is None:
            name = self._const_cache[key] = self.new_name("const")
            outs = [name]
            # the bytes are at hand: no second copy
            tensor = raw_tensor(value, raw, dtype_str) or from_array(value)
            node = new_node("Constant", [], outs, "", [tensor_attribute("value", tensor)])
            self._push(node, [], outs, "")
            self.emit_record.constants[id(node)] = (node, key)
            self.types[name] = ValueType(int(tensor.data_type), shape)
            if dtype_str[1] in "iu" and value.size <= FOLD_MAX:
                self.constants[name] = value
        return name

    def int_constant(self, values: Sequence[int] | int) -> str:
        """``constant(np.asarray(values, dtype=np.int64))``; a list or tuple of ints (the
        axes and shapes rules ask for, often the same ones) is looked up before any array is built."""
        if (type(values) is list or type(values) is tuple) and all(type(v) is int for v in values):
            key = tuple(values)
            name = self._ints_cache.get(key)
            if name is None:
                name = self._ints_cache[key] = self.constant(np.asarray(values, dtype=np.int64))
            return name
        return self.constant(np.asarray(values, dtype=np.int64))

    def typed_constant(self, value: Any, *, like: str | None, dtype: int | None) -> str:
        if dtype is None and like is not None:
            dtype = self.types.get(like, UNKNOWN).dtype
        if dtype and dtype != TensorProto.BFLOAT16:
            kind = type(value)
            if kind is float or kind is int or kind is bool:  # a scalar (1.0, 0.5, n): looked up first
                key = (dtype, kind, cast(float, value).hex() if kind is float else value)
                name = self._scalar_cache.get(key)
                if name is None:
                    name = self._scalar_cache[key] = self.constant(
                        np.asarray(value, dtype=tensor_dtype_to_np_dtype(dtype))
                    )
                return name
            return self.constant(np.asarray(value, dtype=tensor_dtype_to_np_dtype(dtype)))
        # unknown dtype or bfloat16: a float32 constant cast to the reference's type
        c = self.constant(np.asarray(value, dtype=np.float32))
        if like is None:
            if dtype:
                return self.emit("Cast", [c], 1, "", {"to": dtype}, "const")[0]
            raise GradientError("typed_constant needs `like` or `dtype`")
        return self.emit("CastLike", [c, like], 1, "", {}, "const")[0]

    def shape_value(self, name: str) -> str:
        cached = self._shape_cache.get(name)
        if cached is None:
            t = self.types.get(name, UNKNOWN)
            if t.is_static:
                cached = self.int_constant(cast("tuple[int, ...]", t.shape))
            else:
                cached = self.emit("Shape", [name], 1, "", {}, name)[0]
                self.types[cached] = ValueType(TensorProto.INT64, (t.rank,) if t.rank is not None else (None,))
            self._shape_cache[name] = cached
        return cached

    def zeros_like(self, name: str) -> str:
        t = self.types.get(name, UNKNOWN)
        if t.dtype and t.dtype not in (TensorProto.BFLOAT16,):
            zero = np.zeros((1,), dtype=tensor_dtype_to_np_dtype(t.dtype))
            return self.emit("ConstantOfShape", [self.shape_value(name)], 1, "", {"value": from_array(zero)}, name)[0]
        z = self.emit("ConstantOfShape", [self.shape_value(name)], 1, "", {}, name)[0]
        return self.emit("CastLike", [z, name], 1, "", {}, name)[0]

    def unbroadcast(self, grad: str, frm: str, to: str, src: Shape = None) -> str:
        """Sums ``grad`` (shaped like ``frm``, or ``src`` when given) over the axes broadcasting added to ``to``."""
        if src is None:
            src = self.types.get(frm, UNKNOWN).shape
        dst = self.types.get(to, UNKNOWN).shape
        if src is not None and src == dst and None not in src:
            return grad  # the common case, decided without the per-dim loop below
        if (
            src is not None
            and dst is not None
            and len(src) == len(dst)
            and all(a == b and a is not None for a, b in zip(src, dst))
        ):
            return grad
        if src is not None and dst is not None and len(src) >= len(dst):
            lead = len(src) - len(dst)
            axes = list(range(lead))
            certain = True
            for k, d in enumerate(dst):
                s = src[lead + k]
                if d == 1 and s != 1:
                    axes.append(lead + k)
                elif not (d == s and d is not None) and not (isinstance(d, int) and d != 1):
                    certain = False  # a symbolic or unknown dim might be 1
            if certain:
                if not axes:
                    return grad
                only_leading = len(axes) == lead
                summed = self.emit(
                    "ReduceSum",
                    [grad, self.int_constant(axes)],
                    1,
                    "",
                    {"keepdims": 0 if only_leading else 1},
                    to,
                )[0]
                if lead == 0 or only_leading:
                    return summed
                return self.emit("Reshape", [summed, self.shape_value(to)], 1, "", {}, to)[0]
        # shapes known only at run time: sum over every axis where `to`, padded to the
        # gradient's rank, has size 1 (summing a size-1 axis of the gradient is harmless)
        g_shape = self.emit("Shape", [grad], 1, "", {}, grad)[0]
        t_shape = self.shape_value(to)
        one = self.int_constant([1])
        lead_n = self.emit(
            "Sub",
            [self.emit("Size", [g_shape], 1, "", {}, to)[0], self.emit("Size", [t_shape], 1, "", {}, to)[0]],
            1,
            "",
            {},
            to,
        )[0]
        ones = self.emit(
            "ConstantOfShape",
            [self.emit("Reshape", [lead_n, one], 1, "", {}, to)[0]],
            1,
            "",
            {"value": from_array(np.ones((1,), np.int64))},
            to,
        )[0]
        padded = self.emit("Concat", [ones, t_shape], 1, "", {"axis": 0}, to)[0]
        mask = self.emit("Equal", [padded, one], 1, "", {}, to)[0]
        axes_2d = self.emit("NonZero", [mask], 1, "", {}, to)[0]
        axes_v = self.emit("Reshape", [axes_2d, self.int_constant([-1])], 1, "", {}, to)[0]
        summed = self.emit("ReduceSum", [grad, axes_v], 1, "", {"keepdims": 1, "noop_with_empty_axes": 1}, to)[0]
        return self.emit("Reshape", [summed, t_shape], 1, "", {}, to)[0]

    def forward_output(self, node: NodeProto, k: int, index: int | None = None) -> str:
        """The name of optional output ``k`` of a forward node (``index``: its position in
        ``self.nodes``, when the caller knows it), which the re-emitted node then computes
        (e.g. MaxPool's Indices, LayerNormalization's Mean)."""
        if k < len(node.output) and node.output[k]:
            return node.output[k]
        if index is not None:
            i = index
        else:
            if not self._index_of:
                self._index_of = {id(n): i for i, n in enumerate(self.nodes)}
            i = self._index_of[id(node)]
        extra = self._extra_outputs.setdefault(i, {})
        if k not in extra:
            extra[k] = self.new_name(f"{node.op_type}_out{k}")
            self._producer[extra[k]] = i
        return extra[k]

    def replace_forward(self, i: int, nodes: list[NodeProto]) -> bool:
        """Emits ``nodes`` instead of forward node ``i``: they compute its outputs under the same
        names from the values it reads, and more outputs the backward nodes may read (a Loop that
        also records its tape, so it runs once). False, and nothing done, for a node the result
        does not run again (one computing an x, which is an input then, or a random one)."""
        op_type, _, _, outputs, _ = self._fields[i]
        made = {o for n in nodes for o in n.output if o}
        missing = [o for o in outputs if o and o not in made]
        if missing or i in self._extra_outputs or i in self._replaced:
            raise GradientError(f"a rule replaced forward node {i} by nodes that do not compute {missing}")
        maybe = op_types_with("random") | op_types_with("random_if_input")
        if not set(self.xs).isdisjoint(outputs) or (op_type in maybe and is_random(self.nodes[i])):
            return False
        self._replaced[i] = nodes
        for name in made:
            self._producer.setdefault(name, i)
        return True

    def _emitted_forward(self, i: int) -> list[NodeProto]:
        """What forward node ``i`` is emitted as: itself, with extra outputs, or its replacement."""
        replaced = self._replaced.get(i)
        if replaced is not None:
            return replaced
        return [self._with_extra_outputs(i)] if i in self._extra_outputs else [self.nodes[i]]

    def _with_extra_outputs(self, i: int) -> NodeProto:
        node = self.nodes[i]
        extra = self._extra_outputs.get(i)
        if not extra:
            return node
        outputs = list(node.output) + [""] * (max(extra) + 1 - len(node.output))
        for k, name in extra.items():
            outputs[k] = name
        return copy_node(node, outputs)

    def node_error(self, node: NodeProto, message: str) -> GradientError:
        name = f" {node.name!r}" if node.name else ""
        label = op_label(node.domain, node.op_type)
        return GradientError(f"node{name} ({label} -> {list(node.output)}) at opset {self.opset}: {message}")

    # -- the pass ---------------------------------------------------------------------
    def _upgrade(self, nodes: list[NodeProto], types: dict[str, ValueType], fields: list[Fields]) -> list[NodeProto]:
        """``nodes`` at ``self.opset``; ``fields`` are the source nodes' (renaming keeps
        each node's op type and domain, so they tell those of ``nodes``)."""
        if self.source_opset >= self.opset:
            return nodes

        def type_of(name: str) -> ValueType:
            if name in self._declared:
                self._read_declared(types, [name])
            return types.get(name, UNKNOWN)

        return upgrade_nodes(
            nodes,
            self.source_opset,
            self.opset,
            self.new_name,
            dtype_of=lambda n: type_of(n).dtype,
            rank_of=lambda n: type_of(n).rank,
            shape_of=lambda n: type_of(n).shape,
            kinds=[(f[0], f[1]) for f in fields],
        )

    def run(self) -> FunctionProto:
        """The phases of the module docstring, in order; returns the backward function."""
        self._validate_names()
        producer = self._index_producers()
        order = self._checked_ancestors([self.y], producer)
        self._infer(order, producer)
        if self._inline_known_branches(order):  # the new nodes indexed and typed again
            producer = self._index_producers()
            order = self._checked_ancestors([self.y], producer)
            self._infer(order, producer)
        diff = self._dependence(order)
        self._check_xs(self._reaching(order, [self.y]))
        try:
            grads = self._reverse_walk(order, diff)
        except Exception as error:
            # a rule failed (say, on a shape a node without a rule left unknown): the
            # missing rule, further from y, is the error to report, if there is one
            self._check_rules(order, diff, error)
            raise
        return self._assemble(producer, self._name_gradients(grads))

    def _inline_known_branches(self, order: list[int]) -> bool:
        """Replaces each node of ``order`` choosing between subgraphs (trait ``branches``, If) on
        a condition known now by the taken subgraph's nodes; True when one was replaced."""
        fields = self._fields
        taken: dict[int, list[NodeProto]] = {}
        for i in order:
            op_type, domain, inputs, outputs, attributes = fields[i]
            if not attributes or not inputs or not has_subgraph(attributes):
                continue
            names = traits(domain, op_type, self.opset).branches
            cond = condition_value(self.constants.get(inputs[0])) if names else None
            if names is None or cond is None:
                continue
            branch = self._node_attrs(i).get(names[0] if cond else names[1])
            if isinstance(branch, GraphProto):
                inlined = inline_graph(branch, list(outputs), self.new_name)
                taken[i] = self._upgrade(inlined, self.types, nodes_fields(inlined))
        if not taken:
            return False
        # an x read only by a branch not taken still reaches y (its gradient is zeros)
        self._reached |= self._reaching(order, self._roots())
        nodes: list[NodeProto] = []
        new_fields: list[Fields] = []
        for i, node in enumerate(self.nodes):
            if i in taken:
                nodes.extend(taken[i])
                new_fields.extend(nodes_fields(taken[i]))
            else:
                nodes.append(node)
                new_fields.append(fields[i])
        self.nodes, self._fields, self._attrs = nodes, new_fields, {}
        return True

    def _roots(self) -> list[str]:
        """The values differentiated (y; forward mode: every y of ys)."""
        return [self.y]

    def _index_producers(self) -> dict[str, int]:
        """Maps each forward value to the index of its node; fills ``self._reads``."""
        fields = self._fields
        producer: dict[str, int] = {}
        for i, f in enumerate(fields):
            for out in f[3]:
                if out:
                    if out in producer:
                        raise GradientError(f"value {out!r} is produced twice (nodes {producer[out]} and {i})")
                    producer[out] = i
        #: the names each forward node reads (inputs, then its subgraphs' outer-scope names)
        self._reads = [
            _reads(node, f[2], f[4]) if f[4] and has_subgraph(f[4]) else f[2] for node, f in zip(self.nodes, fields)
        ]
        self._producer = producer
        if self.y not in producer and self.y not in self.xs and self.y not in self.free_order:
            raise GradientError(
                f"y={self.y!r} is not produced by any node nor an input; outputs available: {sorted(producer)[:20]}"
            )
        return producer

    def _infer(self, order: list[int], producer: dict[str, int]) -> None:
        """Infers the types and shapes of the values of the nodes in ``order`` (the ancestors of y)."""
        fields = self._fields
        if self._declared:
            # inference types every output of `order` (`nodes` are in topological order),
            # reading a declared type only where it cannot tell; the other values now
            ancestors = set(order)
            self._read_declared(self.types, [n for n in self._declared if producer.get(n) not in ancestors])
        infos: list[NodeInfo] = []
        attrs_of = self._attrs  # (what _node_attrs reads and fills, inline)
        inferred: dict[str, bool] = {}  # `op_type in INFER` by op type (two Python calls each)
        for i in order:
            op_type, domain, inputs, outputs, attributes = fields[i]
            # attribute values only where inference reads them (a node without an
            # inference function may hold values get_attribute_value rejects)
            if not domain or domain == "ai.onnx":
                known = inferred.get(op_type)
                if known is None:
                    known = inferred[op_type] = op_type in INFER
                if known:
                    attrs = attrs_of.get(i)
                    if attrs is None:
                        attrs = attrs_of[i] = attribute_values(attributes) if attributes else {}
                    infos.append((op_type, domain, inputs, outputs, attrs))
                    continue
            infos.append((op_type, domain, inputs, outputs, None))
        declared = self._declared
        self.types, self.constants = infer_types(
            [self.nodes[i] for i in order],
            self.types,
            self.constants,
            self.opset,
            infos=infos,
            declared=(lambda name: value_type(vi) if (vi := declared.get(name)) is not None else None)
            if declared
            else None,
        )

    def _check_xs(self, reached: set[str]) -> None:
        """y has a floating-point type; every x reaches y (unless ``allow_unused``) and has one too.

        ``reached``: the xs that reach y (see ``_reaching``).
        """
        dt = self.types.get(self.y, UNKNOWN).dtype
        if dt and dt not in FLOAT_TYPES:
            raise GradientError(
                f"y={self.y!r} has element type {TensorProto.DataType.Name(dt)}, which carries no gradient; "
                "differentiate a floating-point output (Cast it to float in the model if it is a count)"
            )
        reached = reached | self._reached
        for x in self.xs:
            if x not in reached and not self.allow_unused:
                raise GradientError(
                    f"x={x!r} does not reach y={self.y!r}: no path of nodes leads from it to y; "
                    "check the name, or pass allow_unused=True to get zeros"
                )
            dt = self.types.get(x, UNKNOWN).dtype
            if dt and dt not in FLOAT_TYPES:
                raise GradientError(
                    f"x={x!r} has element type {TensorProto.DataType.Name(dt)}, which carries no gradient; "
                    "differentiate with respect to a floating-point value"
                )

    def _checked_ancestors(self, roots: list[str], producer: dict[str, int]) -> list[int]:
        """``sorted(self._ancestors(roots, producer))``, checked by ``_check_order``: one sweep
        over the indices when the nodes are in order (``_assembly.marked_ancestors``)."""
        mark = marked_ancestors(self._reads, producer, [producer[r] for r in roots if r in producer])
        if mark is not None:
            return needed_indices(mark)
        order = sorted(self._ancestors(roots, producer))
        self._check_order(order, producer)  # raises: a node reads a value of its own or a later node
        return order

    def _check_order(self, order: list[int], producer: dict[str, int]) -> None:
        """The nodes of ``order`` read only values produced before them: no cycle, and the
        topological order the sweeps rely on."""
        reads = self._reads
        get = producer.get
        for i in order:
            for name in reads[i]:
                j = get(name)
                if j is not None and j >= i:
                    node = self.nodes[i]
                    if j == i or i in self._ancestors([o for o in self._fields[j][3] if o], producer):
                        other = (
                            "" if j == i else f" and node {j} ({self._fields[j][1] or 'ai.onnx'}::{self._fields[j][0]})"
                        )
                        raise self.node_error(
                            node,
                            f"the graph has a cycle through this node (node {i}){other}: it reads {name!r}, "
                            "which is computed from its own output; an ONNX graph must be acyclic",
                        )
                    raise self.node_error(
                        node,
                        f"node {i} reads {name!r}, produced by the later node {j}: the nodes are not in "
                        "topological order; sort them (every value produced before it is read)",
                    )

    def _lookup(self, domain: str, op_type: str) -> GradRule | None:
        """The rule of ``domain::op_type`` at the pass's opset (cached)."""
        key = (domain, op_type)
        try:
            return self._rule_cache[key]
        except KeyError:
            rule = self._rule_cache[key] = self.registry.lookup(domain, op_type, self.opset)
            return rule

    def _no_rule_error(self, i: int, diff: dict[str, int] | None = None) -> GradientError:
        """The error for forward node ``i``, which has no rule; names the xs that reach it
        only through its subgraphs when ``diff`` tells which."""
        op_type, domain, inputs, _, attributes = self._fields[i]
        node = self.nodes[i]
        versions = self.registry.versions(domain, op_type)
        have = f" (rules exist for opset ranges {versions})" if versions else ""
        register = (
            f"Register one: onnx_light.RegisterGradientFunction({domain!r}, {op_type!r}, rule, "
            "registry=reg) and pass registry=reg"
        )
        if diff is not None and len(self._reads[i]) > len(inputs):
            direct = 0
            for name in inputs:
                direct |= diff.get(name, 0)
            inner = 0
            for name in self._reads[i][len(inputs) :]:
                inner |= diff.get(name, 0)
            only = [x for k, x in enumerate(self.xs) if (inner & ~direct) >> k & 1]
            if only:
                label = repr(node.name) if node.name else f"{i}"
                return self.node_error(
                    node,
                    f"x={only[0]!r} reaches y={self.y!r} only through the subgraph of node {label} "
                    f"({op_type}), which has no gradient rule{have}. {register}",
                )
        return self.node_error(node, f"no gradient rule for {domain or 'ai.onnx'}::{op_type}{have}. {register}")

    def _check_rules(self, order: list[int], diff: dict[str, int], error: Exception) -> None:
        """Raises the error of a node on the reverse walk's way that has no rule, if any
        (from ``error``, the failure of a rule nearer y, which may stem from it).

        Follows the walk: from y back through the nodes with a gradient, into the inputs
        their rules must differentiate (a ``nondiff`` input may get none: not followed).
        Run only once the walk failed: it costs a second walk over the graph.
        """
        live = {self.y}
        fields = self._fields
        reads = self._reads
        for i in reversed(order):
            op_type, domain, inputs, outs, _ = fields[i]
            if len(outs) == 1:
                if outs[0] not in live or outs[0] not in diff:
                    continue
            elif not any(o and o in live and o in diff for o in outs):
                continue
            rule = self._lookup(domain, op_type)
            if rule is None:
                # which xs reach the node through its subgraphs only: one bit per x, now
                raise self._no_rule_error(i, self._dependence(order, per_x=True)) from error
            if rule.no_grad:
                continue
            nondiff = rule.nondiff
            for k, name in enumerate(reads[i] if rule.seed_form else inputs):
                if name in diff and k not in nondiff:
                    live.add(name)

    def _reverse_walk(self, order: list[int], diff: dict[str, int]) -> dict[str, list[str]]:
        """Runs the rules of the nodes in ``order``, last first; returns the contributions by value.

        One loop body per node (no call but the rule's in the common case): the output
        gradients, the rule, its call and the recording of its contributions to the inputs."""
        fields = self._fields
        self.types[self.dy] = self.types.get(self.y, UNKNOWN)
        self._diff = diff
        grads: dict[str, list[str]] = {self.y: [self.dy]}
        grads_get = grads.get
        in_diff = diff.__contains__
        no_empty = "" not in diff
        rules_get = self._rule_cache.get
        attrs_of = self._attrs
        types_get = self.types.get  # (rules add types to this dict; it is not replaced)
        # a node whose outputs carry no gradient (none depends on an x differentiably, or nothing
        # flowed back to them) is passed over (`diff` holds only non-zero masks: "depends")
        for i in reversed(order):
            f = fields[i]
            op_type, domain, inputs, outs, attributes = f
            if len(outs) == 1:  # the common case, without the list machinery
                o = outs[0]
                parts = grads_get(o) if o and o in diff else None
                if not parts:
                    continue
                out_grads: list[str | None] = [parts[0] if len(parts) == 1 else self._collect(grads, o)]
            else:
                out_grads = [self._collect(grads, o) if o and o in diff else None for o in outs]
                if all(g is None for g in out_grads):
                    continue
            rule = rules_get((domain, op_type)) or self._lookup(domain, op_type)  # (cached: once an op)
            if rule is None:
                raise self._no_rule_error(i)
            if rule.no_grad:
                continue
            # (`""` is in `diff` only as an x's name: then an omitted input must read False)
            needs = list(map(in_diff, inputs)) if no_empty else [bool(n) and n in diff for n in inputs]
            node = self.nodes[i]
            try:
                if rule.seed_form:
                    _record(grads, self._apply_seed(rule, node, out_grads))
                    continue
                attrs = attrs_of.get(i)  # (_node_attrs, inline: once a node)
                if attrs is None:
                    attrs = attrs_of[i] = attribute_values(attributes) if attributes else {}
                ctx = GradContext(self, node, out_grads, needs, attrs, f, i)
                # dy is None when output 0 has no gradient (the rule reads ctx.output_grads)
                try:
                    returned = cast("ShortGradFn", rule.fn)(ctx, cast(str, out_grads[0]))
                except BuilderError as e:
                    raise self._rule_error(rule, node, e) from None
                result = [returned] if returned is None or isinstance(returned, str) else list(returned)
                n_result = len(result)
                if n_result > len(inputs):  # (captured values' gradients: recorded, dropped)
                    n_result = self._record_captured(node, i, result, grads)
                broadcast = rule.broadcast
                if broadcast:
                    frm = outs[0]
                    src = types_get(frm, UNKNOWN).shape
                    same = src is not None and None not in src  # inputs of this shape need no unbroadcast
                for k, name in enumerate(inputs):
                    if not needs[k]:
                        continue
                    g = result[k] if k < n_result else None
                    if g is None:
                        if k in rule.nondiff:
                            continue
                        raise self._rule_error(rule, node, None, k)
                    if broadcast and not (same and types_get(name, UNKNOWN).shape == src):
                        g = self.unbroadcast(g, frm, name)  # (unbroadcast's first test, answered above)
                    parts = grads_get(name)
                    if parts is None:
                        grads[name] = [g]
                    else:
                        parts.append(g)
            except OnnxLightError:
                raise
            except Exception as e:  # a rule that crashed on an invalid node (Transpose perm=[0, 3])
                raise self._rule_error(rule, node, e) from e
        return grads

    def _rule_error(self, rule: GradRule, node: NodeProto, error: Exception | None, k: int = -1) -> GradientError:
        """The error for ``node`` whose rule raised ``error`` (a BuilderError: it built a node
        the spec does not allow) or, with ``error`` None, gave no gradient for input ``k``."""
        if error is None:
            return self.node_error(
                node,
                f"the rule gives no gradient for input {k} ({node.input[k]!r}), which depends on a variable; "
                "that input is not differentiable by this rule",
            )
        fn_name = getattr(rule.fn, "__qualname__", repr(rule.fn))
        if isinstance(error, BuilderError):
            return self.node_error(node, f"its rule {fn_name} built a node the spec does not allow: {error}")
        return self.node_error(
            node,
            f"its rule {fn_name} failed: {type(error).__name__}: {error}; check the node's attributes and "
            "input shapes against the operator's spec",
        )

    def _name_gradients(self, grads: dict[str, list[str]]) -> list[str]:
        """Emits ``grad_<x> = Identity(accumulated gradient of x)`` (zeros if none); returns the names."""
        outputs = []
        read = []
        backward, io = self.backward, self._backward_io
        start = len(backward)
        get = grads.get
        for x in self.xs:
            parts = get(x)
            g = parts[0] if parts and len(parts) == 1 else self._collect(grads, x)  # (one: nothing to add)
            if g is None:
                g = self.zeros_like(x)
            named = [f"grad_{x}"]
            backward.append(new_node("Identity", [g], named))  # (what _push does, inline)
            io.append(([g], named, ""))
            outputs.append(named[0])
            read.append(g)
        # the last nodes are these Identities (no zeros between), none reading an output: tell the optimizer
        if len(self.backward) - start == len(outputs) and set(outputs).isdisjoint(read):
            self.emit_record.named = len(outputs)
        return outputs

    def _read_declared(self, types: dict[str, ValueType], names: Iterable[str]) -> None:
        """Reads into ``types`` the unread declarations of ``names`` (those that have one)."""
        declared = self._declared
        for name in names:
            vi = declared.pop(name, None)
            if vi is not None:
                if (t := value_type(vi)) is not None:
                    types[name] = t
                elif (e := sequence_elem_type(vi)) is not None:
                    self.sequence_types[name] = e
                    types.setdefault(name, e)  # inference types a sequence by its elements (SequenceAt's)

    def _node_attrs(self, i: int) -> dict[str, Any]:
        """The attributes of forward node ``i`` as Python values (read once, shared)."""
        attrs = self._attrs.get(i)
        if attrs is None:
            attrs = self._attrs[i] = attribute_values(self._fields[i][4])
        return attrs

    def _validate_names(self) -> None:
        if not self.xs:
            raise GradientError("xs is empty: name at least one value to differentiate with respect to")
        if len(set(self.xs)) != len(self.xs):
            raise GradientError(f"xs has repeated names: {self.xs}")

    def _ancestors(self, roots: Iterable[str], producer: dict[str, int], stop: set[int] | None = None) -> set[int]:
        """Indices of the nodes ``roots`` are computed from (not crossing the nodes in ``stop``)."""
        seen: set[int] = set(stop) if stop else set()
        stack = [producer[r] for r in roots if r in producer]
        reads = self._reads
        get = producer.get
        while stack:
            i = stack.pop()
            if i in seen:
                continue
            seen.add(i)
            for name in reads[i]:
                j = get(name)
                if j is not None and j not in seen:
                    stack.append(j)
        return seen - stop if stop else seen

    def _reaching(self, order: list[int], targets: Sequence[str]) -> set[str]:
        """The xs that reach one of ``targets``, whose ancestors ``order`` lists.

        Every node of ``order`` is on a path to a target, so an x reaches one exactly when a
        node of ``order`` reads it or it is a target: the reach masks of ``_dependence``
        tell the same, at a cost growing with the number of xs for every value.
        """
        read = set(targets)
        read.update(chain.from_iterable(map(self._reads.__getitem__, order)))
        return {x for x in self.xs if x in read}

    def _dependence(self, order: list[int], per_x: bool = False) -> dict[str, int]:
        """``diff``: ``diff[v]`` non-zero when v depends on an x differentiably.

        ``order`` lists the forward nodes to sweep (indices, topological order). With
        ``per_x``, bit k of the masks tells xs[k] (what an error message names); without,
        every x sets bit 0: the pass asks only whether a value depends on some x, and masks
        of one bit per x would make the sweep quadratic on a graph with many xs (each value
        holding a bit for every x upstream of it).
        A node whose inputs carry no differentiable dependence adds none: the sweep passes over it.
        """
        diff: dict[str, int] = {x: 1 << k if per_x else 1 for k, x in enumerate(self.xs)}
        #: intermediate xs (cut points): their bit survives their producer's write
        cut = {x for x in self.xs if x in self._producer}
        diff_get = diff.get
        types_get = self.types.get
        fields = self._fields
        reads = self._reads
        passes_by_op: dict[tuple[str, str], tuple[bool, bool]] = {}
        #: integer values with a straight-through gradient (see GradRule.straight_through)
        straight_values: set[str] = set()
        for i in order:
            d = 0
            for name in reads[i]:
                d |= diff_get(name, 0)
            if not d:
                continue
            op_type, domain, _, outputs, _ = fields[i]
            key = (domain, op_type)
            cached = passes_by_op.get(key)
            if cached is None:
                rule = self._lookup(domain, op_type)
                cached = passes_by_op[key] = (
                    not (rule is not None and rule.no_grad),
                    rule is not None and rule.straight_through,
                )
            passes, straight = cached
            if not passes:
                continue
            if straight_values and not straight:  # only straight-through ops read those gradients
                d = 0
                for name in reads[i]:
                    if name not in straight_values:
                        d |= diff_get(name, 0)
                if not d:
                    continue
            for out in outputs:
                if not out:
                    continue
                if cut and out in cut:
                    diff[out] |= d
                    continue
                dt = types_get(out, UNKNOWN).dtype
                if dt == 0 or dt in FLOAT_TYPES:
                    diff[out] = d
                elif straight:
                    diff[out] = d
                    straight_values.add(out)
        return diff

    def _collect(self, grads: dict[str, list[str]], name: str) -> str | None:
        """The accumulated gradient of ``name``: one Add for two contributions, Sum for more."""
        parts = grads.get(name)
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0]
        if self.is_sequence(name):
            total = self._sequence_sum(name, parts)
        else:
            op = "Add" if len(parts) == 2 else "Sum"
            total = self.emit(op, parts, 1, "", {}, name)[0]  # the Add/Sum node takes over `parts`
        grads[name] = [total]
        return total

    def sequence_type(self, name: str) -> ValueType | None:
        """The element type of sequence ``name`` when declared (None: unknown or not a sequence)."""
        if name not in self.sequence_types and name in self._declared:
            self._read_declared(self.types, [name])
        found = self.sequence_types.get(name)
        if found is None and name in self._producer and self._schema_sequence(name):
            inferred = self.types.get(name)  # inference types a sequence by its elements
            if inferred is not None and inferred.dtype:
                found = self.sequence_types[name] = inferred
        return found

    def is_sequence(self, name: str) -> bool:
        """True when ``name`` is a sequence: declared as one, or so typed by its op's schema."""
        return name in self.sequence_types or self._schema_sequence(name) or self.sequence_type(name) is not None

    def _schema_sequence(self, name: str) -> bool:
        """True when the schema of ``name``'s producer types that output as a sequence."""
        i = self._producer.get(name)
        if i is None:
            return False
        op_type, domain, _, outputs, _ = self._fields[i]
        if name not in outputs:  # an output a rule added (forward_output, replace_forward)
            return False
        return output_is_sequence(domain, op_type, self.opset, list(outputs).index(name))

    def declare_sequence(self, name: str, elem: ValueType) -> None:
        """Records that emitted value ``name`` is a sequence of ``elem`` tensors."""
        self.sequence_types[name] = elem

    def _sequence_sum(self, name: str, parts: list[str]) -> str:
        """The element-wise sum of the sequence gradients ``parts`` of sequence ``name``."""
        elem = self.sequence_type(name)
        if elem is None or not elem.dtype:
            raise GradientError(
                f"value {name!r} is a sequence that receives several gradients; summing them element-wise "
                "needs its element type: declare it (a value_info with a sequence type, e.g. from shape inference)"
            )
        body = sum_body(elem, len(parts), self.new_name)
        total = self.emit("SequenceMap", parts, 1, "", {"body": body}, name)[0]
        self.declare_sequence(total, elem)
        return total

    def _record_captured(self, node: NodeProto, i: int, result: list[str | None], grads: dict[str, list[str]]) -> int:
        """Records the gradients a short-form rule of forward node ``i`` returned past its
        inputs' (those of the captured outer-scope values, in ``captured`` order), and drops
        them from ``result``; returns its new length."""
        n_in = len(self._fields[i][2])
        captured = self.captured(i)
        extra = result[n_in:]
        if len(extra) > len(captured) and any(g is not None for g in extra[len(captured) :]):
            raise self.node_error(node, f"the rule returned {len(result)} gradients for {n_in} inputs")
        _record(grads, [(name, g) for name, g in zip(captured, extra) if g is not None and name in self._diff])
        del result[n_in:]
        return n_in

    def _apply_seed(self, rule: GradRule, node: NodeProto, out_grads: list[str | None]) -> list[tuple[str, str]]:
        assert rule.fn is not None
        accum = _SeedAccum()
        func = FunctionProto()
        ok = cast("SeedGradFn", rule.fn)(node, out_grads[0] or "", accum, self.counter, func)
        if ok is False:
            raise self.node_error(node, "the registered (five-argument) rule returned False")
        for n in func.node:
            _, domain, inputs, outputs, attributes = node_fields(n)
            self._push(n, _reads(n, inputs, attributes), outputs, domain)
        return accum.contributions

    def _value_info(self, fn: FunctionProto) -> None:
        """Writes the types of ``fn``'s inputs and of the values rules declared, and the
        element types of its sequences, into its value_info."""
        # the inputs' types travel with the function, so differentiating it again (or
        # wrapping it as a model) starts from known shapes
        types_get = self.types.get
        value_info = fn.value_info
        inputs = set(fn.input)
        # a name neither known as a sequence, nor declared (unread), nor produced by a node
        # here is no sequence (what is_sequence and sequence_type would find, without them)
        sequences = self.sequence_types
        declared = self._declared
        produced = self._producer
        infos = []
        for name in [*fn.input, *self.declared_outputs]:
            t = types_get(name)
            if t is not None and t.dtype:
                elem = (
                    self.sequence_type(name)
                    if (name in sequences or name in declared or name in produced)
                    and name in inputs
                    and self.is_sequence(name)
                    else None
                )
                # a sequence fed to the function (a forward value it does not compute) is one
                infos.append(
                    make_tensor_value_info(name, t.dtype, t.shape) if elem is None else sequence_info(name, elem)
                )
        value_info.extend(infos)
        if self.sequence_types:  # the sequences' element types, which inference does not follow
            for name in dict.fromkeys(o for n in fn.node for o in n.output if o):
                elem = self.sequence_type(name)
                if elem is not None:
                    value_info.append(sequence_info(name, elem))

    def _record_reads(self, read: dict[str, None], needed: list[int], live: bool) -> None:
        """What the assembly's read sets tell: whether every node is live (for the optimizer's
        record) and whether ``dy`` may be read (``dy_read``).

        ``read``: the names the backward nodes read; ``needed``: the forward nodes kept;
        ``live``: whether every backward node has an output read or returned.
        """
        # the forward nodes kept are ancestors of what backward nodes read: each has a reader
        self.emit_record.live = not self._replaced and live
        #: False when no node of the result reads ``dy``, not even in a subgraph (None: it may;
        #: forward mode, where ``dy`` is an ordinary name, then looks at the nodes' inputs)
        self.dy_read: bool | None = None
        if not self._replaced and DY not in read:
            reads_of = self._reads
            self.dy_read = None if any(DY in reads_of[i] for i in needed) else False

    def _kept_forward(self, producer: dict[str, int], read: dict[str, None]) -> tuple[list[int], bytearray | None]:
        """The forward nodes the result computes again (ascending) and, when the sweep could
        take its shortcut (see ``_assembly.marked_ancestors``), their marks by index."""
        # a random op is not run again: the backward function would draw other numbers than
        # the forward run did, so its outputs become inputs (fed from the forward run)
        random = self._random_nodes()
        # nor is the producer of an intermediate x (a cut point): x is an input
        stop = random | {producer[x] for x in self.xs if x in producer}
        get = producer.get
        roots = {j for n in read if (j := get(n)) is not None and j not in stop}
        mark = None if self._replaced else marked_ancestors(self._reads, producer, roots, stop)
        if mark is not None:
            return needed_indices(mark), mark
        names = [n for n in read if n in producer and producer[n] not in stop]
        return sorted(self._ancestors(names, producer, stop)), None

    def _random_nodes(self) -> set[int]:
        """The indices of the forward nodes that draw random numbers (``ops.is_random``)."""
        maybe = op_types_with("random") | op_types_with("random_if_input")
        fields = self._fields
        if maybe.isdisjoint(map(_OP_TYPE, fields)):  # the common case: no such op type (a C loop)
            return set()
        return {i for i, f in enumerate(fields) if f[0] in maybe and is_random(self.nodes[i])}

    def _free_general(self, needed: list[int], read: dict[str, None]) -> list[str]:
        """The free values in first-use order (forward nodes kept, then backward nodes); records
        the domains used (``self._domains``)."""
        defined = {self.dy} | set(self.xs)  # also every free value once seen
        free: list[str] = []
        domains = self._domains
        fields = self._fields
        reads = self._reads
        extra_outputs = self._extra_outputs
        for i in needed:
            for name in reads[i]:
                if name and name not in defined:
                    defined.add(name)
                    free.append(name)
            _, d, _, outs, _ = fields[i]
            defined.update(outs)  # "" may enter; it is never looked up
            extra = extra_outputs.get(i)
            if extra:
                defined.update(extra.values())
            if i in self._replaced:
                defined.update(o for n in self._replaced[i] for o in n.output)
            if d and d not in domains and normalise_domain(d) != DEFAULT_DOMAIN:
                domains[d] = self.opset_imports.get(d, 1)
        for names, outs, d in self._backward_io:
            for name in names:
                if name and name not in defined:
                    defined.add(name)
                    free.append(name)
            defined.update(outs)
            if d and d not in domains and normalise_domain(d) != DEFAULT_DOMAIN:
                domains[d] = self.opset_imports.get(d, 1)
        return free

    def _free_marked(self, needed: list[int], mark: bytearray, read: dict[str, None], made: set[str]) -> list[str]:
        """``_free_general`` when the kept forward nodes are in topological order (``mark``
        tells them) and ``made`` holds every backward node's output: a name is defined before
        it is read exactly when its producer is kept, or it is an x, ``dy`` or emitted."""
        fields = self._fields
        kept = list(map(fields.__getitem__, needed))
        # the names defined before any read: "", dy, the xs and the kept nodes' outputs (the
        # values whose producer is marked NEEDED: with no replaced node, a node's outputs
        # and those a rule added to it), then what the backward nodes make (C loops)
        defined = {"", self.dy, *self.xs}
        defined.update(chain.from_iterable(map(_OUTPUTS, kept)))
        for i, extra in self._extra_outputs.items():
            if mark[i] == NEEDED:
                defined.update(extra.values())
        forward = dict.fromkeys(chain.from_iterable(map(self._reads.__getitem__, needed)))
        free = list(filterfalse(defined.__contains__, forward))
        defined.update(free)
        defined.update(made)
        free += filterfalse(defined.__contains__, read)
        domains = self._domains
        used = set(map(_DOMAIN, kept))
        used.update(map(itemgetter(2), self._backward_io))
        for d in sorted(used):
            if d and d not in domains and normalise_domain(d) != DEFAULT_DOMAIN:
                domains[d] = self.opset_imports.get(d, 1)
        return free

    def _inputs_order(self, free: list[str]) -> list[str]:
        """The ``zs``: given, or the free values with the source's inputs first, in its order."""
        if self.zs is None:
            # (a stable sort: the other free values keep their first-use order, after)
            rank = {n: i for i, n in enumerate(self.free_order)}
            ranked = sorted((n for n in free if n in rank), key=rank.__getitem__)
            return ranked + [n for n in free if n not in rank]
        missing = [n for n in free if n not in self.zs]
        if missing:
            raise GradientError(
                f"the gradient needs {missing}, which are neither in xs nor in zs; add them to zs "
                "(or leave zs=None to have them chosen)"
            )
        return self.zs

    def _assemble(self, producer: dict[str, int], outputs: list[str]) -> FunctionProto:
        backward_io = self._backward_io
        # forward values the backward nodes read (in first-read order), and everything they
        # are computed from
        read = read_order(backward_io)
        needed, mark = self._kept_forward(producer, read)
        returned = set(outputs)
        singles = singles_live(backward_io, read, returned)
        self._record_reads(read, needed, singles[0] if singles else _all_read(backward_io, read, returned))
        # the free values in first-use order, and the domains used
        self._domains: dict[str, int] = {"": self.opset}
        if mark is not None and singles is not None:
            free = self._free_marked(needed, mark, read, singles[1])
        else:
            free = self._free_general(needed, read)
        domains = self._domains
        zs = self._inputs_order(free)
        if self._extra_outputs or self._replaced:
            nodes = [n for i in needed for n in self._emitted_forward(i)] + self.backward
        else:
            kept = self.nodes
            nodes = [kept[i] for i in needed] + self.backward
        fn = function_proto(
            self.name, "onnx_light.gradient", [*self.xs, *zs, self.dy], outputs, nodes, sorted(domains.items())
        )
        self.emit_record.opset = self.opset if len(domains) == 1 else None
        self._value_info(fn)
        return fn


def _record(grads: dict[str, list[str]], contributions: Iterable[tuple[str, str]]) -> None:
    """Appends each ``(value, gradient)`` of ``contributions`` to ``grads[value]``, in order."""
    for name, g in contributions:
        parts = grads.get(name)
        if parts is None:
            grads[name] = [g]
        else:
            parts.append(g)


_OP_TYPE = itemgetter(0)
_DOMAIN = itemgetter(1)
_OUTPUTS = itemgetter(3)


def _kinds(fields: list[Fields]) -> set[tuple[str, str]]:
    """The distinct ``(op_type, domain)`` of nodes by their fields (C loops)."""
    return set(zip(map(itemgetter(0), fields), map(itemgetter(1), fields)))


def _all_read(io: list[tuple[list[str], list[str], str]], read: dict[str, None], outputs: set[str]) -> bool:
    """Whether each node of ``io`` (reads, outputs, domain) has a named output in ``read`` or ``outputs``."""
    for _, outs, _ in io:
        if len(outs) == 1:
            o = outs[0]
            if not o or (o not in read and o not in outputs):
                return False
        elif not any(o and (o in read or o in outputs) for o in outs):
            return False
    return True


def _rename_reserved(nodes: list[NodeProto], clash: set[str], new_name: Any) -> tuple[list[NodeProto], dict[str, str]]:
    """Renames the values in ``clash`` (produced or read by ``nodes``), which would shadow
    ``dy`` or a ``grad_<x>`` output."""
    rename = {c: new_name(c) for c in sorted(clash)}  # sorted: the same names on every run
    out = []
    for node in nodes:
        if any(n in rename for n in list(node.input) + list(node.output)):
            copy = NodeProto()
            copy.CopyFrom(node)
            copy.input[:] = [rename.get(n, n) for n in node.input]
            copy.output[:] = [rename.get(n, n) for n in node.output]
            node = copy
        out.append(node)
    return out, rename


def _reads(node: NodeProto, inputs: list[str], attributes: list[AttributeProto]) -> list[str]:
    """The names a node reads: its ``inputs``, then its subgraphs' outer-scope names (do not mutate).

    ``inputs`` and ``attributes`` are the node's (from ``node_fields``).
    """
    if not attributes or not has_subgraph(attributes):
        return inputs
    sub = subgraph_inputs(node)
    return inputs + sub if sub else inputs


def subgraph_inputs(node: NodeProto) -> list[str]:
    """Outer-scope names read by a node's subgraph attributes."""
    names: list[str] = []
    for attr in node.attribute:
        graphs = ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)
        for g in graphs:
            local = {i.name for i in g.input} | {t.name for t in g.initializer}
            for n in g.node:
                for name in list(n.input) + subgraph_inputs(n):
                    if name and name not in local:
                        names.append(name)
                local.update(n.output)
            # a body output may be an outer value itself, returned with no node between
            names.extend(o.name for o in g.output if o.name and o.name not in local)
    return names
