"""Forward mode: TangentOfFunction and TangentOfNodes (Jacobian-vector products).

The pass sweeps the forward nodes in order, asking each node's forward rule (the
``jvp`` of its registry entry, beside the reverse rule) for the tangents of its
outputs from the tangents of its inputs. Rules see ONE direction: with ``seeds=k``
the core runs the tangent sweep once per direction (slices of the trailing seed axis
of every ``fwd_`` input) on the shared primal values, and stacks the results on a
trailing axis; with ``seeds="dynamic"`` the sweep is the body of a Loop over the
seed axis. So no rule has to know about seeds.

The inputs of a broadcasting op (``broadcast=True`` rules) whose shape differs from
the output's have their tangent expanded to the output's shape before the rule runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

from .._errors import GradientError
from .._interop import from_foreign
from .._proto import FunctionProto, GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto
from ..helper import make_graph, make_node, make_tensor_value_info
from ..ops import op_label
from ..optimizer._plan import EmitRecord
from ._api import (
    _default_registry,
    _finish,
    _function_source,
    _gc_paused,
    _graph_source,
    _run,
    _source,
    _source_node_ids,
)
from ._context import FLOAT_TYPES, GradContext
from ._fastpath import value_type
from ._names import DY, EMITTED_OPSET
from ._pass import _GradientPass, subgraph_inputs
from ._registry import GradRegistry, JvpFn
from ._types import UNKNOWN, ValueType

__all__ = ["TangentOfFunction", "TangentOfNodes", "TangentContext", "diff_prefix"]

#: what ``seeds`` may be
Seeds = int | str | None


def diff_prefix(names: Iterable[str], prefix: str = "fwd") -> str:
    """CasADi's rule: ``prefix_`` unless a name already carries ``prefix_`` or ``prefixN_``,
    then ``prefix{highest N + 1}_`` (``fwd_`` counting as N = 1)."""
    highest = 0
    for n in names:
        end = n.find("_")
        if end < len(prefix) or not n.startswith(prefix):
            continue
        index = n[len(prefix) : end]
        if index == "":
            highest = max(highest, 1)
        elif index.isdigit():
            highest = max(highest, int(index))
    return f"{prefix}_" if highest == 0 else f"{prefix}{highest + 1}_"


class TangentContext(GradContext):
    """What a forward rule sees: a :class:`GradContext` plus the input tangents.

    Attributes:
        tangents: the tangent of each input, None where it is zero.
    """

    __slots__ = ("tangents", "_captured", "captured_read")

    def __init__(
        self,
        grad_pass: _GradientPass,
        node: NodeProto,
        tangents: list[str | None],
        index: int,
        captured: dict[str, str] | None = None,
    ) -> None:
        attrs = grad_pass._attrs.get(index) or grad_pass._node_attrs(index)
        # (the tangents stand for the needs, unread: needs_grad below reads the tangents)
        needs = cast("list[bool]", tangents)
        super().__init__(grad_pass, node, [], needs, attrs, grad_pass._fields[index], index)
        self.tangents = tangents
        self._captured = captured or {}
        #: True once the rule asked for the captured tangents (a rule that does not would drop them)
        self.captured_read = False

    @property
    def captured_tangents(self) -> dict[str, str]:
        """The tangents of the outer-scope values the node's subgraphs read (If, Loop, Scan), by name;
        values without a tangent are absent. A rule for an op with subgraphs must read this."""
        self.captured_read = True
        return dict(self._captured)

    def needs_grad(self, i: int) -> bool:
        """True when input ``i`` has a tangent."""
        return i < len(self.tangents) and self.tangents[i] is not None

    def tangent(self, i: int) -> str | None:
        """The tangent of input ``i`` (None: zero)."""
        return self.tangents[i] if i < len(self.tangents) else None

    def tangent_or_zeros(self, i: int) -> str:
        """The tangent of input ``i``, zeros shaped like the input where it has none."""
        t = self.tangent(i)
        return t if t is not None else self.zeros_like(self.inputs[i])

    def emit_like(self, inputs: Sequence[str], **attrs: Any) -> str | list[str]:
        """The node's own op with other inputs (its attributes, updated by ``attrs``);
        one name per output (a single name for one output)."""
        merged = {**self.attrs, **attrs}
        n = max(1, len(self.outputs))
        builder = getattr(self.op, self.node.op_type)
        return cast("str | list[str]", builder(*inputs, _outputs=n, _domain=self.node.domain, **merged))

    def add(self, *terms: str | None) -> str | None:
        """The sum of the terms that are not None (None when all are)."""
        present = [t for t in terms if t is not None]
        if not present:
            return None
        out = present[0]
        for t in present[1:]:
            out = self.op.Add(out, t)
        return out


class _TangentPass(_GradientPass):
    """One run of forward mode; reuses the reverse pass's helpers and assembly."""

    def __init__(self, nodes: list[NodeProto], xs: Sequence[str], ys: Sequence[str], seeds: Seeds, **kw: Any) -> None:
        if isinstance(ys, str):
            ys = [ys]
        if not ys:
            raise GradientError("ys is empty: name at least one output whose tangent to compute")
        if len(set(ys)) != len(ys):  # one fwd_<y> output each: a function's outputs are distinct
            raise GradientError(f"ys has repeated names: {list(ys)}")
        super().__init__(nodes, xs, ys[0], **kw)
        self.ys = list(ys)
        if seeds is not None and seeds != "dynamic" and not (isinstance(seeds, int) and seeds >= 1):
            raise GradientError(f"seeds={seeds!r}: give None, a positive int or 'dynamic'")
        self.seeds = seeds
        prefix = diff_prefix([*self.xs, *self.ys, *self.free_order])
        both = [y for y in self.ys if y in self.xs]
        if both:  # fwd_<y> would name an output and the seed input fwd_<x> alike
            raise GradientError(
                f"ys {both} are also in xs: the tangent of such a y is its seed {prefix}{both[0]}, and the "
                "result cannot have an input and an output of one name; drop them from ys (or pass an Identity of them)"
            )
        self.fwd_in = [prefix + x for x in self.xs]
        self.fwd_out = [prefix + y for y in self.ys]
        # (the names defined inside subgraphs are taken already: the reverse pass's __init__
        # takes them, and the nodes upgrading or expanding adds name theirs with new_name)
        clash = set(self.fwd_in + self.fwd_out) & self.counter.taken
        if clash:
            raise GradientError(f"the tangent names {sorted(clash)} are already used by the source; rename those")
        self.counter.taken.update(self.fwd_in + self.fwd_out)
        #: whether a shape is static (no unknown or symbolic dim), by shape: a graph's few
        #: shapes repeat on every node
        self._static: dict[tuple[Any, ...] | None, bool] = {}

    def _reserved(self) -> set[str]:
        return set()  # the fwd_ names are checked against the source's in __init__

    def run(self) -> FunctionProto:
        self._validate_names()
        producer = self._prepare()
        order = self._checked_ancestors(self.ys, producer)
        self._infer(order, producer)
        if self._inline_known_branches(order):  # as the reverse pass: the new nodes indexed and typed again
            producer = self._prepare()
            order = self._checked_ancestors(self.ys, producer)
            self._infer(order, producer)
        diff = self._dependence(order)
        self._check_xs(self._reaching(order, self.ys))
        for x, fx in zip(self.xs, self.fwd_in):
            t = self.types.get(x, UNKNOWN)
            self.types[fx] = _seeded(t, self.seeds)
        if self.seeds is None:
            outs = self._sweep(order, diff, dict(zip(self.xs, self.fwd_in)))
        elif self.seeds == "dynamic":
            outs = self._dynamic(order, diff)
        else:
            outs = self._unrolled(order, diff, int(self.seeds))
        named = []
        for o, name in zip(outs, self.fwd_out):
            self._push(make_node("Identity", [o], [name]), [o], [name], "")
            named.append(name)
        return self._finish(producer, named)

    # -- phases -------------------------------------------------------------------------
    def _prepare(self) -> dict[str, int]:
        """The reverse pass's producer index (it checks ys[0]), and every other y checked alike."""
        producer = self._index_producers()
        for y in self.ys[1:]:
            if y not in producer and y not in self.xs and y not in self.free_order:
                raise GradientError(
                    f"y={y!r} is not produced by any node nor an input; outputs available: {sorted(producer)[:20]}"
                )
        return producer

    def _roots(self) -> list[str]:
        return self.ys

    def _check_xs(self, reached: set[str]) -> None:
        reached = reached | self._reached  # the xs only a branch not taken read (inlined): tangent zeros
        for x in self.xs:
            if x not in reached and not self.allow_unused:
                raise GradientError(
                    f"x={x!r} reaches none of ys={self.ys}: no path of nodes leads from it to them; "
                    "check the name, or pass allow_unused=True"
                )
            dt = self.types.get(x, UNKNOWN).dtype
            if dt and dt not in FLOAT_TYPES:
                raise GradientError(f"x={x!r} has element type {TensorProto.DataType.Name(dt)}, which has no tangent")

    def _sweep(self, order: list[int], diff: dict[str, int], tang: dict[str, str]) -> list[str]:
        """Emits the tangent nodes for one direction; returns the tangent of each y."""
        fields = self._fields
        reads = self._reads
        apply = self._apply_jvp
        get = tang.get
        # (`diff` holds only non-zero masks: `in diff` is "depends on an x differentiably")
        for i in order:
            f = fields[i]
            outputs = f[3]
            if len(outputs) == 1:  # the common case, without the generator
                if outputs[0] not in diff:
                    continue
            elif not any(o and o in diff for o in outputs):
                continue
            inputs = f[2]
            ts = [get(n) if n and n in diff else None for n in inputs]
            read = reads[i]
            # (a node without subgraphs reads its input list itself: nothing captured)
            captured = {} if read is inputs else {n: tang[n] for n in read[len(inputs) :] if n in tang}
            if not captured and ts.count(None) == len(ts):
                continue
            for o, t in zip(outputs, apply(i, ts, captured)):
                if o and t is not None:
                    tang[o] = t
        return [tang[y] if y in tang else self._zero_tangent(y) for y in self.ys]

    def _zero_tangent(self, y: str) -> str:
        return self.zeros_like(y)

    def _apply_jvp(self, i: int, ts: list[str | None], captured: dict[str, str]) -> list[str | None]:
        op_type, domain, inputs, outputs, _ = self._fields[i]
        rule = self._lookup(domain, op_type)
        if rule is not None and rule.no_grad:
            return []
        if rule is None or rule.jvp is None:
            what = "no gradient rule" if rule is None else "a reverse rule but no forward (jvp) rule"
            raise self.node_error(
                self.nodes[i],
                f"{op_label(domain, op_type)} has {what}. Attach one: "
                f"registry.set_jvp({domain!r}, {op_type!r}, fn) with fn(ctx, tangents) -> output tangents",
            )
        if rule.broadcast:
            ts = self._expanded(ts, inputs, outputs[0])
        ctx = TangentContext(self, self.nodes[i], ts, i, captured)
        jvp: JvpFn = rule.jvp
        result = jvp(ctx, ts)
        if captured and not ctx.captured_read:
            # a subgraph reads a value that has a tangent, and the rule did not look at it
            raise self.node_error(
                self.nodes[i],
                f"its subgraph reads {sorted(captured)[:3]}, which carry tangents, and the forward rule of "
                f"{op_label(domain, op_type)} does not handle captured values: differentiate it in reverse "
                "mode, or register a jvp that reads ctx.captured_tangents",
            )
        if result is None or isinstance(result, str):
            return [result]
        # tangents of optional outputs the node does not produce (nothing reads them) are dropped
        return list(result)[: len(outputs)]

    def _expanded(self, ts: list[str | None], inputs: list[str], out: str) -> list[str | None]:
        """``ts`` with each tangent of an input shaped unlike ``out`` expanded to its shape (see ``_expand``)."""
        types_get = self.types.get
        dst = types_get(out, UNKNOWN).shape
        # an input of exactly the output's static shape keeps its tangent (decided once per shape)
        static = self._static.get(dst)
        if static is None:
            static = dst is not None and None not in dst and not any(isinstance(d, str) for d in dst)
            self._static[dst] = static
        return [
            t if t is None or (static and types_get(n, UNKNOWN).shape == dst) else self._expand(t, n, out)
            for t, n in zip(ts, inputs)
        ]

    def _expand(self, t: str, name: str, out: str) -> str:
        src = self.types.get(name, UNKNOWN).shape
        dst = self.types.get(out, UNKNOWN).shape
        if src is not None and src == dst and None not in src and not any(isinstance(d, str) for d in src):
            return t
        return self.emit("Expand", [t, self.shape_value(out)], 1, "", {}, name)[0]

    # -- seeds ----------------------------------------------------------------------------
    def _unrolled(self, order: list[int], diff: dict[str, int], k: int) -> list[str]:
        per_y: list[list[str]] = [[] for _ in self.ys]
        for s in range(k):
            index = self.int_constant([s])
            tang = {}
            for x, fx in zip(self.xs, self.fwd_in):
                sl = self.emit("Gather", [fx, index], 1, "", {"axis": -1}, fx)[0]
                tang[x] = self.emit("Squeeze", [sl, self.int_constant([-1])], 1, "", {}, fx)[0]
            for j, t in enumerate(self._sweep(order, diff, tang)):
                per_y[j].append(self.emit("Unsqueeze", [t, self.int_constant([-1])], 1, "", {}, self.ys[j])[0])
        return [
            p[0] if k == 1 else self.emit("Concat", list(p), 1, "", {"axis": -1}, y)[0] for p, y in zip(per_y, self.ys)
        ]

    def _dynamic(self, order: list[int], diff: dict[str, int]) -> list[str]:
        """A Loop over the seed axis whose body is the tangent sweep of one direction."""
        start = len(self.backward)
        it, cond = self.new_name("seed"), self.new_name("cond")
        self.types[it] = ValueType(TensorProto.INT64, ())
        tang = {}
        for x, fx in zip(self.xs, self.fwd_in):
            sl = self.emit("Gather", [fx, it], 1, "", {"axis": -1}, fx)[0]
            tang[x] = sl
        ys = self._sweep(order, diff, tang)
        body_nodes = self.backward[start:]
        body_io = self._backward_io[start:]
        del self.backward[start:]
        del self._backward_io[start:]
        # constants and shapes emitted by the sweep now live in the body: emit them again outside
        for cache in (self._const_cache, self._ints_cache, self._scalar_cache, self._shape_cache):
            cache.clear()
        cond_out = self.new_name("cond_out")
        scans = [self.new_name("scan") for _ in ys]
        body_nodes.append(make_node("Identity", [cond], [cond_out]))
        body_nodes += [make_node("Identity", [t], [s]) for t, s in zip(ys, scans)]
        body = make_graph(
            body_nodes,
            "tangent_body",
            [make_tensor_value_info(it, TensorProto.INT64, []), make_tensor_value_info(cond, TensorProto.BOOL, [])],
            [make_tensor_value_info(cond_out, TensorProto.BOOL, [])]
            + [make_tensor_value_info(s, self.types.get(y, UNKNOWN).dtype, None) for s, y in zip(scans, self.ys)],
        )
        defined = {it, cond}
        outer: list[str] = []
        for reads, outs, _ in body_io:
            for n in reads:
                if n and n not in defined and n not in outer:
                    outer.append(n)
            defined.update(outs)
        count = self.emit("Shape", [self.fwd_in[0]], 1, "", {"start": -1}, "seeds")[0]
        trip = self.emit("Squeeze", [count], 1, "", {}, "seeds")[0]
        stacked = [self.new_name("stacked") for _ in ys]
        loop = make_node("Loop", [trip, ""], stacked, body=body)
        self._push(loop, [trip, *outer], stacked, "")
        results = []
        for s, y in zip(stacked, self.ys):
            r = self.types.get(y, UNKNOWN).rank
            if r is not None:
                perm = [*range(1, r + 1), 0]
                results.append(self.emit("Transpose", [s], 1, "", {"perm": perm}, y)[0])
                continue
            # rank unknown: (seeds, *Y) -> (seeds, numel) -> (numel, seeds) -> (*Y, seeds)
            flat = self.emit("Reshape", [s, self.int_constant([0, -1])], 1, "", {}, y)[0]
            moved = self.emit("Transpose", [flat], 1, "", {"perm": [1, 0]}, y)[0]
            target = self.emit("Concat", [self.shape_value(y), self.int_constant([-1])], 1, "", {"axis": 0}, y)[0]
            results.append(self.emit("Reshape", [moved, target], 1, "", {}, y)[0])
        return results

    # -- result ---------------------------------------------------------------------------
    def _finish(self, producer: dict[str, int], outputs: list[str]) -> FunctionProto:
        zs = self.zs
        self.zs = None
        # the reverse assembly types its own input list (xs, zs, dy); the value_info is
        # written below for the tangent's inputs instead, so it sees no types (not built twice)
        types, self.types = self.types, {}
        try:
            fn = self._assemble(producer, outputs)
        finally:
            self.types = types
        fwd = set(self.fwd_in)
        free = [n for n in list(fn.input)[len(self.xs) : -1] if n not in fwd]
        # the reverse assembly takes "dy" as its own input; here it is an ordinary free value
        if (
            DY not in self.xs
            and DY not in free
            and self.dy_read is not False
            and any(DY in n.input for n in fn.node)
            and all(DY not in n.output for n in fn.node)
        ):
            free.append(DY)
        if zs is not None:
            missing = [n for n in free if n not in zs]
            if missing:
                raise GradientError(f"the tangent needs {missing}, which are neither in xs nor in zs; add them to zs")
            free = list(zs)
        fn.input[:] = [*self.xs, *free, *self.fwd_in]
        fn.domain = "onnx_light.forward"
        types_get = types.get
        for name in [*fn.input, *self.declared_outputs]:  # declared: values inference cannot follow
            t = types_get(name)
            if t is not None and t.dtype:
                fn.value_info.append(make_tensor_value_info(name, t.dtype, t.shape))
        return fn


def _seeded(t: ValueType, seeds: Seeds) -> ValueType:
    if seeds is None or t.shape is None:
        return t if seeds is None else ValueType(t.dtype, None)
    return ValueType(t.dtype, (*t.shape, "nfwd" if seeds == "dynamic" else int(seeds)))


def TangentOfNodes(  # noqa: N802  (the contract's name)
    nodes: Iterable[NodeProto],
    xs: Sequence[str],
    ys: Sequence[str],
    zs: Sequence[str] | None = None,
    registry: GradRegistry | None = None,
    *,
    seeds: Seeds = None,
    allow_unused: bool = False,
    opset: int = EMITTED_OPSET,
    value_info: Iterable[ValueInfoProto] = (),
    name: str = "tangent",
    optimize: bool = True,
) -> FunctionProto:
    """Forward mode over a list of nodes; see :func:`TangentOfFunction`."""

    forward = list(nodes)
    infos = list(value_info)

    def run() -> tuple[FunctionProto, EmitRecord]:
        types = {vi.name: t for vi in infos if (t := value_type(vi)) is not None}
        produced = {o for n in forward for o in n.output}
        free: list[str] = []
        for n in forward:
            for i in list(n.input) + subgraph_inputs(n):
                if i and i not in produced and i not in free:
                    free.append(i)
        return _run(_TangentPass(
            forward, xs, ys, seeds, zs=zs, registry=_default_registry(registry), allow_unused=allow_unused,
            types=types, constants={}, free_order=free, opset_imports={"": opset}, name=name,
            declared={vi.name: vi for vi in infos if vi.name not in types},  # sequences
        ))  # fmt: skip

    return _gc_paused(True, lambda: _finish(run(), {id(n) for n in forward}, optimize))


def _names(given: Sequence[str] | str | None, default: list[str]) -> list[str]:
    """``given`` as a list (one name alone is a list of one, not of its characters), or ``default``."""
    if given is None:
        return default
    return [given] if isinstance(given, str) else list(given)


def TangentOfFunction(  # noqa: N802  (the contract's name)
    fn: FunctionProto | GraphProto | ModelProto,
    xs: Sequence[str] | None = None,
    ys: Sequence[str] | None = None,
    zs: Sequence[str] | None = None,
    registry: GradRegistry | None = None,
    *,
    seeds: Seeds = None,
    allow_unused: bool = False,
    optimize: bool = True,
) -> FunctionProto:
    """Forward mode (Jacobian-vector products) of a FunctionProto, GraphProto or ModelProto.

    Args:
        fn: what to differentiate.
        xs: the inputs with a tangent (default: every input of a function, every graph
            input of a graph or model).
        ys: the outputs whose tangent is computed (default: every output).
        zs: the other inputs of the result, in order (default: chosen as by
            GradientOfFunction).
        registry: the rules.
        seeds: None (one direction), k (a trailing axis of size k on every tangent) or
            "dynamic" (that axis symbolic).
        allow_unused: an x reaching no y is accepted.
        optimize: run ``onnx_light.optimize`` on the result, keeping the final ``Identity``
            that names each ``fwd_<y>``; ``False`` returns the pass's nodes as emitted.

    Returns:
        A FunctionProto with inputs ``[*xs, *zs, *("fwd_" + x)]`` and outputs
        ``["fwd_" + y]``, fwd_y = J fwd_x (``fwd2_`` when a name already has ``fwd_``).
    """

    def run() -> tuple[FunctionProto, EmitRecord]:
        rules = _default_registry(registry)
        source = from_foreign(fn)  # an onnx package object: converted through its bytes
        imports, functions, graph, name = _source(source)
        foreign.update(_source_node_ids(source))
        if graph is not None:
            nodes, types, constants, declared, free_order = _graph_source(graph)
            inputs, outputs = [i.name for i in graph.input], [o.name for o in graph.output]
        else:
            assert isinstance(source, FunctionProto)
            nodes, types, constants, declared, free_order = _function_source(source)
            inputs, outputs = list(source.input), list(source.output)
        if functions:
            from .._inline import FunctionInliner

            nodes = FunctionInliner(functions).expand(nodes)
        imports.setdefault("", EMITTED_OPSET)
        return _run(_TangentPass(
            nodes, _names(xs, inputs), _names(ys, outputs), seeds,
            zs=zs, registry=rules, allow_unused=allow_unused, types=types, constants=constants,
            free_order=free_order, opset_imports=imports, name=name.replace("_grad", "_fwd"), declared=declared,
        ))  # fmt: skip

    foreign: set[int] = set()
    return _gc_paused(True, lambda: _finish(run(), foreign, optimize))
