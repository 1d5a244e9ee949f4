"""Weight-gradient sums out of a reverse Scan: per-step accumulators become one product after it.

The reverse Scan of a recurrent node carries the weight gradients as states, one update per
step: ``acc' = acc + MatMul(Transpose(a_t), b_t)`` (R's gradient: ``a`` the step's state or
``r * h``, ``b`` its gate gradients) and ``acc' = acc + ReduceSum(b_t, axes, keepdims=1)``
(the R bias). Each costs a small GEMM, a Transpose, a reduction and an Add per step. Here
``a_t`` and ``b_t`` leave the body as scan outputs instead (a scan input of the body is read
from its outer stack, no copy) and the sums run once after the loop::

    sum_t a_t^T b_t = A^T B        with A, B the steps stacked along the rows: [L.., T*rows, K|N]
    sum_t sum_rows b_t = ReduceSum(stack of b_t, axes=[0, axes + 1])

That trades the accumulator's O(|W|) memory for the stacks' O(T*rows*(K+N)); a product is
moved only when a step's operands are no larger than the accumulator (``rows * (K + N) <=
LIMIT * K * N``, every size known statically), so the stacks stay within ``LIMIT * T * |W|``
and the class of the stacks the reverse sweep keeps anyway (the tape of states, the gradient
of X of every step). A bias sum moves only with a product that stacks its ``b`` already.
Unknown sizes (a symbolic batch) keep the accumulator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...onnx_core import GraphProto, NodeProto, ValueInfoProto, helper, numpy_helper

__all__ = ["stack_weight_gradients"]

_GRAPH, _GRAPHS = 5, 10
#: a product moves when a step's operands are at most this many times the accumulator
LIMIT = 1.0
#: ops whose output rank is the largest of their inputs' (elementwise, broadcasting)
_BROADCAST = frozenset({"Add", "Sub", "Mul", "Div", "Sum", "Max", "Min", "Pow", "Where", "Mean"})
#: ops whose (first) output has the rank of their first input
_SAME_RANK = frozenset(
    {
        "Neg", "Sigmoid", "Tanh", "Relu", "Exp", "Log", "Abs", "Identity", "Softsign", "Softplus", "Elu",
        "LeakyRelu", "HardSigmoid", "ThresholdedRelu", "Clip", "Sqrt", "Reciprocal", "Split", "Transpose",
        "Concat", "Cast", "Erf", "Sign",
    }
)  # fmt: skip


def _subgraphs(node: NodeProto) -> list[GraphProto]:
    out: list[GraphProto] = []
    for attr in node.attribute:
        out += [attr.g] if attr.type == _GRAPH else list(attr.graphs) if attr.type == _GRAPHS else []
    return out


def _dims(info: ValueInfoProto) -> list[Any] | None:
    """The declared dims (int, or a str for a symbolic/unknown one), or None without a shape."""
    t = info.type.tensor_type
    if not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim]


def _attr(node: NodeProto, name: str, default: Any) -> Any:
    for a in node.attribute:
        if a.name == name:
            return list(a.ints) if a.type == 7 else a.i if a.type == 2 else a
    return default


def _constants(nodes: Sequence[NodeProto]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for node in nodes:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            value = _attr(node, "value", None)
            if value is not None and value.type == 4:
                out[node.output[0]] = numpy_helper.to_array(value.t)
    return out


def _gemm_is_at_b(node: NodeProto) -> bool:
    """Gemm computing A^T B: transA=1, transB=0, alpha=1 (without C, beta plays no part)."""
    alpha = _attr(node, "alpha", None)
    return _attr(node, "transA", 0) == 1 and _attr(node, "transB", 0) == 0 and (alpha is None or alpha.f == 1.0)


def _min_ranks(body: GraphProto) -> dict[str, int]:
    """A lower bound of each body value's rank (from the declared inputs; 0 where unknown)."""
    ranks = {i.name: len(d) for i in body.input if (d := _dims(i)) is not None}
    for node in body.node:
        got = [ranks.get(i, 0) for i in node.input if i]
        if node.op_type in _BROADCAST or node.op_type in _SAME_RANK:
            r = max(got, default=0) if node.op_type in _BROADCAST or node.op_type == "Concat" else got[0]
        elif node.op_type in ("MatMul", "Gemm") and len(got) == 2:
            r = max(got) if min(got) >= 2 else max(got) - 1
        elif node.op_type == "ReduceSum" and _attr(node, "keepdims", 1) and got:
            r = got[0]
        else:
            r = 0
        for o in node.output:
            ranks[o] = max(r, 0)
    return ranks


@dataclass
class _Sum:
    """One accumulator state ``j`` moved out: ``kind`` "matmul" (a, b) or "reduce" (b, axes)."""

    j: int
    kind: str
    a: str
    b: str
    axes: list[int]
    k: int = 0  # the accumulator's last two dims (a product)
    n: int = 0
    gone: list[int] = field(default_factory=list)  # ids of the body nodes it removes


class _Scan:
    """The facts about one Scan node's body the rewrite needs."""

    def __init__(self, node: NodeProto, consts: dict[str, np.ndarray]) -> None:
        self.node = node
        self.body: GraphProto = next(a.g for a in node.attribute if a.name == "body")
        self.m = int(_attr(node, "num_scan_inputs", 0))
        self.n = len(node.input) - self.m
        self.consts = {**consts, **_constants(self.body.node)}
        self.producer = {o: nd for nd in self.body.node for o in nd.output if o}
        self.reads: dict[str, int] = {}
        for nd in self.body.node:
            for i in nd.input:
                self.reads[i] = self.reads.get(i, 0) + 1
            for g in _subgraphs(nd):
                for sub in g.node:
                    for i in sub.input:
                        self.reads[i] = self.reads.get(i, 0) + 1
        for o in self.body.output:
            self.reads[o.name] = self.reads.get(o.name, 0) + 1
        self.ranks = _min_ranks(self.body)
        self.in_axes = _attr(node, "scan_input_axes", [0] * self.m) or [0] * self.m
        self.in_dirs = _attr(node, "scan_input_directions", [0] * self.m) or [0] * self.m
        # the rows of a step: dim -2 of every scan input, when they agree and are static
        rows = {(_dims(i) or [None, None])[-2] if len(_dims(i) or []) >= 2 else None for i in self.body.input[self.n :]}
        self.rows = rows.pop() if len(rows) == 1 and isinstance(next(iter(rows), None), int) else None
        self.scan_inputs = {i.name: k for k, i in enumerate(self.body.input[self.n :])}

    def accumulator(self, j: int) -> tuple[str, NodeProto] | None:
        """(the per-step term, the Add) when state ``j`` is ``acc' = acc + term`` and nothing else reads acc."""
        acc_in, acc_out = self.body.input[j].name, self.body.output[j].name
        add = self.producer.get(acc_out)
        if add is None or add.op_type != "Add" or self.reads.get(acc_in) != 1 or self.reads.get(acc_out) != 1:
            return None
        if list(add.input).count(acc_in) != 1:
            return None
        return add.input[1] if add.input[0] == acc_in else add.input[0], add

    def product(self, j: int) -> _Sum | None:
        found = self.accumulator(j)
        dims = _dims(self.body.input[j])
        if found is None or dims is None or len(dims) < 2:
            return None
        term, add = found
        mm = self.producer.get(term)
        if mm is None or self.reads.get(term) != 1:
            return None
        r = len(dims)
        if mm.op_type == "Gemm" and r == 2 and len(mm.input) == 2 and _gemm_is_at_b(mm):
            a, b = mm.input[0], mm.input[1]
        elif mm.op_type == "MatMul":
            tr = self.producer.get(mm.input[0])
            swap = [*range(r - 2), r - 1, r - 2]
            if tr is None or tr.op_type != "Transpose" or _attr(tr, "perm", None) != swap:
                return None
            a, b = tr.input[0], mm.input[1]
        else:
            return None
        if self.ranks.get(b, 0) < r or not self._varies(a) or not self._varies(b):
            return None
        k, n = dims[-2], dims[-1]
        if not (isinstance(k, int) and isinstance(n, int) and self.rows is not None):
            return None
        if self.rows * (k + n) > LIMIT * k * n:
            return None
        gone = [id(add), id(mm)]  # the Transpose goes with its last reader (``_live``)
        return _Sum(j, "matmul", a, b, [], k, n, gone=gone)

    def bias(self, j: int, stacked: set[str]) -> _Sum | None:
        found = self.accumulator(j)
        if found is None:
            return None
        term, add = found
        red = self.producer.get(term)
        if red is None or red.op_type != "ReduceSum" or self.reads.get(term) != 1 or len(red.input) < 2:
            return None
        axes = self.consts.get(red.input[1])
        if axes is None or not _attr(red, "keepdims", 1) or red.input[0] not in stacked:
            return None
        axes_list = [int(x) for x in np.asarray(axes).reshape(-1)]
        return _Sum(j, "reduce", "", red.input[0], axes_list, gone=[id(add), id(red)])

    def _varies(self, name: str) -> bool:
        """A value of the step (a body node's output or a scan input), not a state or outer value."""
        return name in self.producer or name in self.scan_inputs


def stack_weight_gradients(nodes: Sequence[NodeProto], opset: int) -> list[NodeProto]:
    """``nodes`` with the weight-gradient accumulators of each Scan summed after it (module doc).

    Args:
        nodes: a recurrent node's backward (its Scan bodies are rewritten in place).
        opset: the default-domain opset (13 or later: ReduceSum and Squeeze read axes as inputs).

    Returns:
        The nodes, each rewritten Scan followed by its sums.
    """
    if opset < 13:
        return list(nodes)
    consts = _constants(nodes)
    taken = {o for n in nodes for o in n.output} | {i for n in nodes for i in n.input}
    out: list[NodeProto] = []
    for node in nodes:
        if node.op_type != "Scan" or node.domain not in ("", "ai.onnx") or not any(_subgraphs(node)):
            out.append(node)
            continue
        scan = _Scan(node, consts)
        sums = [s for j in range(scan.n) if (s := scan.product(j)) is not None]
        stacked = {s.b for s in sums}
        sums += [s for j in range(scan.n) if (s := scan.bias(j, stacked)) is not None]
        # one rank for all: a stack's steps axis (0, or just before the rows) is read with it
        ranks = {len(_dims(scan.body.input[s.j]) or []) for s in sums}
        if not sums or len(ranks) != 1:
            out.append(node)
            continue
        out += _rewrite(scan, sums, taken)
    return out


def _outer_stacks(scan: _Scan, axes: set[int]) -> dict[str, tuple[str, int, int]]:
    """Body values whose steps are stacked outside already along one of ``axes``:
    {name: (outer name, direction, axis)}."""
    node, n, m = scan.node, scan.n, scan.m
    out: dict[str, tuple[str, int, int]] = {}
    k_out = len(scan.body.output) - n
    out_axes = _attr(node, "scan_output_axes", None) or [0] * k_out
    out_dirs = _attr(node, "scan_output_directions", None) or [0] * k_out
    for k, info in enumerate(scan.body.output[n:]):
        if out_axes[k] in axes and node.output[n + k] and info.name not in scan.scan_inputs:
            out.setdefault(info.name, (node.output[n + k], out_dirs[k], out_axes[k]))
    for k in range(m):
        if scan.in_axes[k] in axes:
            out.setdefault(scan.body.input[n + k].name, (node.input[n + k], scan.in_dirs[k], scan.in_axes[k]))
    return out


def _live(nodes: list[NodeProto], results: list[str]) -> list[NodeProto]:
    """``nodes`` without those whose outputs nothing reads any more (the body's ops are pure)."""
    kept = list(nodes)
    while True:
        read = set(results)
        for nd in kept:
            read.update(nd.input)
            for g in _subgraphs(nd):
                read.update(i for sub in g.node for i in sub.input)
        live = [nd for nd in kept if any(o in read for o in nd.output if o)]
        if len(live) == len(kept):
            return kept
        kept = live


def _fresh(base: str, taken: set[str]) -> str:
    k, name = 0, base
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def _rewrite(scan: _Scan, sums: list[_Sum], taken: set[str]) -> list[NodeProto]:
    """The Scan without the moved accumulators, then the nodes of their sums."""
    node, body = scan.node, scan.body
    moved = {s.j for s in sums}
    gone = {g for s in sums for g in s.gone}
    # the stacks: a scan input or scan output of axis 0 already has one outside; the rest become scan outputs
    need = list(dict.fromkeys(v for s in sums for v in ([s.a, s.b] if s.a else [s.b])))
    lead = len(_dims(body.input[sums[0].j]) or []) - 2
    have = _outer_stacks(scan, {0, lead})
    dirs = {have[v][1] for v in need if v in have}
    direction = dirs.pop() if len(dirs) == 1 else 0
    # the stacks: (outer name, time axis); what has none outside becomes a scan output of axis 0
    outer = {v: (have[v][0], have[v][2]) for v in need if v in have and have[v][1] == direction}
    new_outputs = [v for v in need if v not in outer]
    keep = [i for i in range(scan.n) if i not in moved]
    elem = body.output[sums[0].j].type.tensor_type.elem_type
    kept_nodes = _live([nd for nd in body.node if id(nd) not in gone], [o.name for o in body.output] + need)
    extra: list[NodeProto] = []
    declared = []
    for v in new_outputs:
        name = v
        if v in scan.scan_inputs or any(o.name == v for o in body.output):
            name = _fresh(f"{v}_step", taken)
            extra.append(helper.make_node("Identity", [v], [name]))
        declared.append(helper.make_tensor_value_info(name, elem, None))
    inputs = [body.input[i] for i in keep] + list(body.input[scan.n :])
    outputs = [body.output[i] for i in keep] + list(body.output[scan.n :]) + declared
    new_body = helper.make_graph(kept_nodes + extra, body.name, inputs, outputs, value_info=list(body.value_info))
    n_scan_out = len(body.output) - scan.n
    stacks = [_fresh(f"{v}_stack", taken) for v in new_outputs]
    outer.update((v, (name, 0)) for v, name in zip(new_outputs, stacks))
    attrs: dict[str, Any] = {a.name: a for a in node.attribute}
    out_axes = (_attr(node, "scan_output_axes", None) or [0] * n_scan_out) + [0] * len(stacks)
    out_dirs = (_attr(node, "scan_output_directions", None) or [0] * n_scan_out) + [direction] * len(stacks)
    new_attrs = {k: v for k, v in attrs.items() if k not in ("body", "scan_output_axes", "scan_output_directions")}
    scan_node = helper.make_node(
        "Scan",
        [node.input[i] for i in keep] + list(node.input[scan.n :]),
        [node.output[i] for i in keep] + list(node.output[scan.n :]) + stacks,
        name=node.name,
        body=new_body,
        scan_output_axes=out_axes,
        scan_output_directions=out_dirs,
    )
    scan_node.attribute.extend(a for a in new_attrs.values())
    after: list[NodeProto] = []
    for s in sums:
        total = _sum_nodes(s, outer, len(_dims(body.input[s.j]) or []), taken, after)
        after.append(helper.make_node("Add", [node.input[s.j], total], [node.output[s.j]]))
    return [scan_node, *after]


def _sum_nodes(s: _Sum, stack: dict[str, tuple[str, int]], rank: int, taken: set[str], out: list[NodeProto]) -> str:
    """Appends to ``out`` the nodes of one moved sum over the stacks (outer name, time axis);
    returns its name."""

    def op(op_type: str, *inputs: str, **attrs: Any) -> str:
        name = _fresh(f"{stack[s.b][0]}_{op_type}", taken)
        out.append(helper.make_node(op_type, list(inputs), [name], **attrs))
        return name

    def ints(*values: int) -> str:
        return op("Constant", value=numpy_helper.from_array(np.array(values, np.int64)))

    if s.kind == "reduce":
        b, t = stack[s.b]
        # b has the accumulator's rank (it is a product's operand): per-step axis x is x + (x >= t) stacked
        axes = [t, *(x % rank + (x % rank >= t) for x in s.axes)]
        return op("Squeeze", op("ReduceSum", b, ints(*axes), keepdims=1), ints(t))
    lead = rank - 2
    # a step [L.., rows, K] stacked is [T, L.., rows, K]: to [L.., T, rows, K] (the rows of a step
    # stay contiguous), then [L.., T*rows, K]; the sum is A^T B (a Transpose MatMul reads fused)
    perm = [*range(1, lead + 1), 0, lead + 1, lead + 2]

    def flat(v: tuple[str, int], width: int) -> str:
        moved = op("Transpose", v[0], perm=perm) if lead and v[1] == 0 else v[0]
        return op("Reshape", moved, ints(*([0] * lead), -1, width))

    a2, b2 = flat(stack[s.a], s.k), flat(stack[s.b], s.n)
    return op("MatMul", op("Transpose", a2, perm=[*range(lead), lead + 1, lead]), b2)
