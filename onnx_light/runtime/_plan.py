"""Compiling a graph into a flat execution plan.

A plan is a list of steps ``(fn, input_slots, output_slots, kwargs, node)`` over one
list of value slots. Model-local functions are inlined at compile time (their
attribute references bound), subgraphs of If/Loop/Scan become nested plans that read
outer-scope values through captured slots, and every intermediate slot is released
after its last use.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from types import CodeType
from typing import Any

import numpy as np

from ..onnx_core import (
    AttributeProto,
    FunctionProto,
    GraphProto,
    NodeProto,
    NotImplementedOp,
    OnnxLightError,
    RuntimeFailure,
)
from ..onnx_core.inliner import FunctionInliner
from ..onnx_core.numpy_helper import to_array
from ..onnx_core.ops import normalise_domain, op_label, traits
from . import kernels as _kernels  # noqa: F401  (registers the kernels)
from ._codegen import failed_step, generate
from ._fold import fold_affine, fold_constant_step
from ._fuse import fuse_conv_epilogues
from ._fuse_pointwise import fuse_pointwise
from ._pool import Arenas
from ._registry import NO_OPTIONS, KernelInfo, KernelOptions, lookup_kernel, registered_kernels
from ._shape_chain import fuse_shape_chains
from ._tile import fuse_padded_sums
from .kernels import _dtypes

__all__ = ["Plan", "Step", "compile_graph", "run_plan", "attribute_value", "node_label", "tensor_value", "tag_dtype"]

# Attributes that old opsets defined and later dropped without changing results.
_LEGACY_ATTRIBUTES = frozenset({"consumed_inputs", "is_test"})
_TRASH = "\x00omitted"
#: the keyword arguments of every step without attributes (one shared dict; never written)
_NO_KWARGS: dict[str, Any] = {}


@dataclass(slots=True)
class Step:
    """One node of a plan, bound to its kernel."""

    fn: Callable[..., Any]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    kwargs: dict[str, Any]
    node: NodeProto
    opset: int
    #: what the plan compiler may assume about ``fn`` (none for a wrapped kernel)
    options: KernelOptions = NO_OPTIONS
    #: op types of the nodes merged into this step after ``node`` (``("Relu",)`` for Conv + Relu)
    fused: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """What a profile calls the step: its op type, ``+`` the op types fused into it."""
        return "+".join((self.node.op_type, *self.fused))


@dataclass
class Plan:
    """A compiled graph: slots, steps, and which slots to release after each step."""

    slot_of: dict[str, int]
    constants: dict[int, Any]
    input_slots: list[int]
    output_slots: list[int]
    steps: list[Step]
    free_after: list[tuple[int, ...]]
    captured: list[str] = field(default_factory=list)
    n_slots: int = 0
    #: input slot -> (dtype, shape) the caller promises (builtin floats only; None for an unknown
    #: dimension); the generated function checks the promise and relies on it (see ``_codegen``)
    input_types: dict[int, tuple[np.dtype, tuple[int | None, ...]]] = field(default_factory=dict)
    #: the same plan as one generated function (see ``_codegen``); None until generated
    fast: Callable[[list[Any], dict[str, Any] | None], list[Any]] | None = None
    #: the code objects of ``fast`` and of its untyped twin once generated (error reports)
    codes: list[CodeType] = field(default_factory=list)
    #: a subgraph's declared output types, ``(numpy dtype or None, shape or None)`` (a shape
    #: only when every dim is known): what Loop and Scan give an empty scan output
    output_types: list[tuple[np.dtype | None, tuple[int, ...] | None]] = field(default_factory=list)
    #: whether :func:`specialise_to_scope` has run (a loop body specialises once, on its first run)
    scope_specialised: bool = False
    #: the buffers ``fast`` lends its large intermediates, reused across runs (``_pool.py``)
    arenas: Arenas | None = None

    def initial_values(self) -> list[Any]:
        values: list[Any] = [None] * self.n_slots
        for slot, value in self.constants.items():
            values[slot] = value
        return values


_BIT_FLOATS = _dtypes.BIT_PATTERN_TYPES - _dtypes.SMALL_INT_TYPES
# TensorProto FLOAT, FLOAT16 and DOUBLE: the input types the generated code specialises on
_TYPED_FLOATS: dict[int, np.dtype] = {1: np.dtype(np.float32), 10: np.dtype(np.float16), 11: np.dtype(np.float64)}


def _elem_type(vi: Any) -> int:
    return int(vi.type.tensor_type.elem_type) if vi.type.HasField("tensor_type") else 0


def _input_type(vi: Any) -> tuple[int, list[int | str | None] | None]:
    """``(elem_type, shape)`` a subgraph input declares (shape None: no rank declared).

    The plan specialises on it only behind a check of every feed (a feed that breaks the
    declaration runs the untyped twin), so a body's declared types never change results.
    """
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return _elem_type(vi), None
    return _elem_type(vi), [int(d.dim_value) if d.HasField("dim_value") else None for d in tt.shape.dim]


def _declared_type(vi: Any) -> tuple[np.dtype | None, tuple[int, ...] | None]:
    """The numpy dtype and static shape a graph output declares (None where it does not)."""
    elem = _elem_type(vi)
    try:
        dtype = _dtypes.np_dtype(elem) if elem else None
    except Exception:  # a type numpy cannot hold (string, ...): the kernel's default
        dtype = None
    tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
    shape = None
    if tt is not None and tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
        shape = tuple(int(d.dim_value) for d in tt.shape.dim)
    return dtype, shape


def _is_bit_float(value: Any) -> bool:
    return isinstance(value, np.ndarray) and bool(value.dtype.metadata) and _dtypes.onnx_type_of(value) in _BIT_FLOATS


def _reads_bit_floats(node: NodeProto, kwargs: dict[str, Any], bits: set[str]) -> bool:
    if any(n in bits for n in node.input):
        return True
    return traits(node.domain, node.op_type).constant and _is_bit_float(kwargs.get("value"))


def _in_float32(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps a kernel so that bit-pattern float inputs arrive decoded to float32 and its float32
    outputs go back to the first such input's type, rounding once per op as onnxruntime does."""

    def run(*args: Any, **kwargs: Any) -> Any:
        like = None
        decoded = []
        for a in args:
            if _is_bit_float(a):
                like = a if like is None else like
                a = _dtypes.decode(a)
            decoded.append(a)
        if like is None:
            return fn(*args, **kwargs)
        out = fn(*decoded, **kwargs)
        outs = out if type(out) is tuple else (out,)
        outs = tuple(
            _dtypes.encode_like(o, like) if isinstance(o, np.ndarray) and o.dtype == np.float32 else o for o in outs
        )
        return outs if type(out) is tuple else outs[0]

    functools.update_wrapper(run, fn, assigned=(), updated=())  # sets run.__wrapped__ only
    return run


def _keep_tag(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps a data-movement kernel so that its outputs keep the bit-pattern tag of its input."""

    def run(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        like = next((a for a in args if _is_bit_float(a)), None)
        if like is None:
            return out
        outs = out if type(out) is tuple else (out,)
        outs = tuple(
            o.view(like.dtype) if isinstance(o, np.ndarray) and o.dtype == like.dtype and not o.dtype.metadata else o
            for o in outs
        )
        return outs if type(out) is tuple else outs[0]

    functools.update_wrapper(run, fn, assigned=(), updated=())  # sets run.__wrapped__ only
    return run


def tag_dtype(value: Any, elem_type: int) -> Any:
    """Views a bit-pattern array (bfloat16 as uint16, float8 as uint8, ...) with the tagged
    dtype of ``elem_type`` so that kernels such as Cast know what the bits mean."""
    if elem_type in _dtypes.BIT_PATTERN_TYPES and isinstance(value, np.ndarray) and value.dtype.kind in "ui":
        want = _dtypes.np_dtype(elem_type)
        if value.dtype.itemsize == want.itemsize and value.dtype.metadata != want.metadata:
            return value.view(want)
    return value


def tensor_value(tensor: Any) -> np.ndarray:
    """A TensorProto's array, with bit-pattern element types tagged (see :func:`tag_dtype`).

    Raises:
        OnnxLightError: the tensor's data does not match its type and dims (raw_data of the
            wrong size, an unknown data_type).
    """
    try:
        return tag_dtype(to_array(tensor, bit_patterns=True), tensor.data_type)
    except ValueError as err:
        raise OnnxLightError(f"{err}; fix or re-export the model's tensor {tensor.name!r}") from err


def attribute_value(attr: AttributeProto, compile_subgraph: Callable[[GraphProto], Any] | None = None) -> Any:
    """The Python value a kernel receives for ``attr``."""
    t = attr.type
    if t == AttributeProto.FLOAT:
        return float(attr.f)
    if t == AttributeProto.INT:
        return int(attr.i)
    if t == AttributeProto.STRING:
        return bytes(attr.s).decode("utf-8", errors="replace")
    if t == AttributeProto.TENSOR:
        return tensor_value(attr.t)
    if t == AttributeProto.GRAPH:
        return compile_subgraph(attr.g) if compile_subgraph else attr.g
    if t == AttributeProto.FLOATS:
        return [float(v) for v in attr.floats]
    if t == AttributeProto.INTS:
        return [int(v) for v in attr.ints]
    if t == AttributeProto.STRINGS:
        return [bytes(s).decode("utf-8", errors="replace") for s in attr.strings]
    if t == AttributeProto.TENSORS:
        return [tensor_value(v) for v in attr.tensors]
    if t == AttributeProto.GRAPHS:
        return [compile_subgraph(g) if compile_subgraph else g for g in attr.graphs]
    if t == AttributeProto.SPARSE_TENSOR:
        return _sparse_to_dense(attr.sparse_tensor)
    if t == AttributeProto.TYPE_PROTO:
        return attr.tp
    raise OnnxLightError(f"attribute {attr.name!r} has unsupported type {t}")


def _sparse_to_dense(sparse: Any) -> np.ndarray:
    values = tensor_value(sparse.values)
    indices = to_array(sparse.indices)
    dense = np.zeros(tuple(sparse.dims), dtype=values.dtype)
    if indices.ndim == 1:
        dense.reshape(-1)[indices] = values
    else:
        dense[tuple(indices.T)] = values
    return dense


def node_label(node: NodeProto) -> str:
    """How errors name a node: its name, ``domain::op_type`` and outputs."""
    name = f" {node.name!r}" if node.name else ""
    return f"node{name} ({op_label(node.domain, node.op_type)}, outputs {list(node.output)})"


def _subgraph_free_names(graph: GraphProto) -> list[str]:
    """Names a subgraph reads from enclosing scopes, in first-use order."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    free: dict[str, None] = {}
    for node in graph.node:
        for name in node.input:
            if name and name not in defined:
                free.setdefault(name, None)
        for attr in node.attribute:
            for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                for name in _subgraph_free_names(g):
                    if name not in defined:
                        free.setdefault(name, None)
        defined.update(node.output)
    return list(free)


def compile_graph(
    nodes: list[NodeProto],
    inputs: list[str],
    outputs: list[str],
    constants: dict[str, Any],
    opsets: dict[str, int],
    functions: Iterable[FunctionProto] = (),
    outer: set[str] | None = None,
    bit_values: set[str] | None = None,
    input_types: dict[str, tuple[int, list[int | str | None] | None]] | None = None,
    fuse: bool = True,
) -> Plan:
    """Compiles nodes into a :class:`Plan`.

    Args:
        nodes: the graph's nodes in topological order.
        inputs: names fed by the caller (in order).
        outputs: names returned (in order).
        constants: initializer values by name (an input of the same name overrides).
        opsets: opset version by domain ("" for the default domain).
        functions: model-local functions, inlined at their call sites.
        outer: names visible from enclosing scopes (for subgraphs); they become ``captured``.
        bit_values: names that may hold bit-pattern floats (bfloat16, float8, ...): inputs
            typed so and outer-scope values; nodes reading them compute in float32.
        input_types: ``(elem_type, shape)`` the feeds of ``inputs`` will have (shape None:
            any rank; a dimension that is not a positive int: any size). Float32, float16 and
            float64 inputs of known rank let the generated code skip dtype checks and reuse
            dying buffers; feeds that break the promise run an untyped twin.
        fuse: optimise the plan (the session turns it off when it traces nodes, so that every
            node is seen, and for ``optimize=False``): constants folded and aligned, inference
            BatchNormalization folded into the Conv/Gemm before it (``_fold.py``), a Conv
            with the residual Add and activation after it run as one step (``_fuse.py``), a
            Conv whose only reader is a Relu run as one fused step.

    Raises:
        NotImplementedOp: a node's op has no kernel for the opset.
        OnnxLightError: the graph reads a value nothing defines.
    """
    compiler = _Compiler(opsets, FunctionInliner(functions), outer, bit_values, constants, fuse)
    nodes = compiler.inliner.expand(nodes)
    input_slots = [compiler.slot(n) for n in inputs]
    const_slots = {compiler.slot(n): _aligned(v) for n, v in constants.items() if n not in inputs}
    compiler.known.update(inputs)
    compiler.written.update(inputs)
    steps = []
    for node in nodes:
        step = compiler.step(node)
        if not (fuse and fold_constant_step(step, const_slots)):
            steps.append(step)
    for name in outputs:
        if name not in compiler.known:
            compiler.capture(name, f"graph output {name!r} is not computed by any node or input")
    output_slots = [compiler.slot(n) for n in outputs]
    slot_of = compiler.slot_of
    for name in compiler.captured:
        compiler.slot(name)
    # release each intermediate after its last reader
    keep = set(output_slots) | set(input_slots) | set(const_slots) | {0, 1} | {slot_of[n] for n in compiler.captured}
    if fuse:
        steps, const_slots = _optimised(steps, const_slots, keep, compiler.new_slot, output_slots)
        keep |= set(const_slots)
    plan = Plan(
        slot_of,
        const_slots,
        input_slots,
        output_slots,
        steps,
        _free_after(steps, keep),
        compiler.captured,
        len(slot_of),
    )
    for name, (elem_type, shape) in (input_types or {}).items():
        dtype = _TYPED_FLOATS.get(elem_type)
        if dtype is not None and shape is not None and name in inputs and name not in constants:
            dims = tuple(d if isinstance(d, int) and d > 0 else None for d in shape)
            plan.input_types[slot_of[name]] = (dtype, dims)
    plan.fast = generate(plan)
    return plan


def specialise_to_scope(plan: Plan, scope: dict[str, Any]) -> None:
    """Regenerates a subgraph plan's function once, typed by its captured values as well.

    A loop body runs many times with the same captured values (a Scan body's weights); the
    compiler cannot know their types, and a step reading an untyped value makes every value
    after it untyped. The captured float arrays of ``scope`` join ``plan.input_types`` with
    their exact dtype and shape; the function checks them on every call like its feeds and
    runs the untyped twin when a later scope breaks the promise, so results never change.
    """
    plan.scope_specialised = True
    added = False
    for name in plan.captured:
        value = scope.get(name)
        if value.__class__ is np.ndarray and any(value.dtype is d for d in _TYPED_FLOATS.values()):
            plan.input_types[plan.slot_of[name]] = (value.dtype, value.shape)
            added = True
    if added:
        plan.fast = generate(plan)


def _optimised(
    steps: list[Step], constants: dict[int, Any], keep: set[int], new_slot: Callable[[], int], outputs: list[int]
) -> tuple[list[Step], dict[int, Any]]:
    """The plan-time rewrites after constant folding: BatchNormalization folded, epilogues and
    ReLUs fused, sums of zero-padded tiles concatenated, chains of float32 Add/Sub/Mul/Div/Sqrt
    run as one pass (``_fuse_pointwise.py``); constants nothing reads any more
    (folded into others) are not kept alive."""
    steps = fuse_shape_chains(steps, constants, keep)
    steps = fold_affine(steps, constants, keep, new_slot)
    steps = fuse_conv_epilogues(steps, constants, keep)
    steps = _fuse_relu(steps, keep)
    steps = fuse_padded_sums(steps, constants, keep)
    steps = fuse_pointwise(steps, keep)
    read = {s for step in steps for s in step.inputs} | set(outputs)
    return steps, {s: v for s, v in constants.items() if s in read}


def _aligned(value: Any) -> Any:
    """``value``, copied (read-only) when it is an array numpy sees as unaligned.

    Initializers are zero-copy views into the model file, where ``raw_data`` may start at any
    byte; numpy hands unaligned arrays to its slow generic loops instead of BLAS (a 1000 x 1024
    Gemm: 5.7 ms instead of 0.07 ms), so the plan pays one copy per such constant, once.
    """
    if isinstance(value, np.ndarray) and not value.flags.aligned:
        value = value.copy()
        value.flags.writeable = False
    return value


def _free_after(steps: list[Step], keep: set[int]) -> list[tuple[int, ...]]:
    """Per step, the slots whose last use it is (never those in ``keep``)."""
    last_use: dict[int, int] = {}
    for i, step in enumerate(steps):
        for s in step.inputs:
            last_use[s] = i
        for s in step.outputs:
            last_use.setdefault(s, i)
    free_after: list[list[int]] = [[] for _ in steps]
    for s, i in last_use.items():
        if s not in keep:
            free_after[i].append(s)
    return [tuple(f) for f in free_after]


class _Compiler:
    """The state of one :func:`compile_graph` call: slots, defined names, captures, bit-pattern values."""

    def __init__(
        self,
        opsets: dict[str, int],
        inliner: FunctionInliner,
        outer: set[str] | None,
        bit_values: set[str] | None,
        constants: dict[str, Any],
        fuse: bool,
    ) -> None:
        self.opsets = opsets
        self.inliner = inliner
        self.outer = outer
        self.fuse = fuse
        # slot 0 holds None for omitted optional inputs; slot 1 swallows omitted outputs
        self.slot_of: dict[str, int] = {"": 0, _TRASH: 1}
        self.known = set(constants)
        self.written: set[str] = set()  # graph inputs and node outputs: each name once (SSA)
        # values that may hold bit-pattern floats; steps reading one compute in float32
        self.bits = set(bit_values or ()) | {n for n, v in constants.items() if _is_bit_float(v)}
        self.captured: list[str] = []

    def slot(self, name: str) -> int:
        """The slot of ``name``, allocated on first use."""
        s = self.slot_of.get(name)
        if s is None:
            s = self.slot_of[name] = len(self.slot_of)
        return s

    def new_slot(self) -> int:
        """A fresh slot for a value the plan makes (folded weights)."""
        return self.slot(f"\x00folded{len(self.slot_of)}")

    def capture(self, name: str, error: str) -> None:
        """Reads ``name`` from the enclosing scope; raises ``error`` when no scope defines it."""
        if self.outer is None or name not in self.outer:
            raise OnnxLightError(error)
        if name not in self.captured:
            self.captured.append(name)
        self.known.add(name)

    def sub_compiler(self, scope: set[str]) -> Callable[[GraphProto], Plan]:
        """Compiles a subgraph that may read the names of ``scope``."""
        bits, opsets, inliner, fuse = self.bits, self.opsets, self.inliner, self.fuse

        def compile_sub(g: GraphProto) -> Plan:
            plan = compile_graph(
                list(g.node),
                [i.name for i in g.input],
                [o.name for o in g.output],
                {t.name: tensor_value(t) for t in g.initializer},
                opsets,
                inliner.functions.values(),
                outer=set(scope),
                bit_values=(bits & scope) | {i.name for i in g.input if _elem_type(i) in _BIT_FLOATS},
                input_types={i.name: _input_type(i) for i in g.input if _elem_type(i)},
                fuse=fuse,
            )
            plan.output_types = [_declared_type(o) for o in g.output]
            return plan

        return compile_sub

    def step(self, node: NodeProto) -> Step:
        """The step of ``node``: its kernel, slots and bound attributes."""
        domain = normalise_domain(node.domain)
        opset = self.opsets.get(domain)
        if opset is None:
            raise NotImplementedOp(
                f"{node_label(node)}: the model imports no opset for domain {domain or 'ai.onnx'!r}; "
                "add it to opset_import"
            )
        for name in node.input:
            if name and name not in self.known:
                self.capture(
                    name, f"{node_label(node)} reads {name!r}, which no input, initializer or earlier node defines"
                )
        info = _kernel_of(node, domain, opset)
        kwargs = self._bind_attributes(node, info, opset)
        # values that subgraphs read from this scope are passed after the node's inputs
        scope_names: dict[str, None] = {}
        for value in kwargs.values():
            for sub in value if isinstance(value, list) else [value]:
                if isinstance(sub, Plan):
                    scope_names.update(dict.fromkeys(sub.captured))
        for name in scope_names:
            if name not in self.known:
                self.capture(name, f"{node_label(node)}: a subgraph reads undefined value {name!r}")
        slot = self.slot
        in_slots = tuple(slot(n) if n else 0 for n in node.input) + tuple(slot(n) for n in scope_names)
        if scope_names:
            kwargs["_captured"] = tuple(scope_names)
        out_slots = tuple(slot(n) if n else 1 for n in node.output)
        fn, options = self._bit_pattern_kernel(node, info, kwargs)
        for name in node.output:
            if name in self.written:
                raise OnnxLightError(
                    f"{node_label(node)} writes {name!r}, which a graph input or an earlier node already "
                    "defines; give every value one producer (the graph must be in SSA form)"
                )
            if name:
                self.written.add(name)
        self.known.update(n for n in node.output if n)
        return Step(fn, in_slots, out_slots, kwargs, node, opset, options)

    def _bind_attributes(self, node: NodeProto, info: KernelInfo, opset: int) -> dict[str, Any]:
        """The kernel's keyword arguments: the node's attributes (subgraphs compiled) and ``_num_outputs``."""
        # what a subgraph of this node may read; built only for nodes that have subgraphs
        has_graphs = any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute)
        scope = self.known | set(self.outer or ()) if has_graphs else set()
        kwargs: dict[str, Any] = {}
        for attr in node.attribute:
            if attr.name not in info.attributes:
                if attr.name in _LEGACY_ATTRIBUTES:
                    continue
                raise NotImplementedOp(
                    f"{node_label(node)} at opset {opset}: attribute {attr.name!r} is not supported "
                    f"(the kernel takes {sorted(info.attributes)})"
                )
            kwargs[attr.name] = attribute_value(attr, self.sub_compiler(scope))
        if info.wants_num_outputs:
            kwargs["_num_outputs"] = len(node.output)
        return kwargs or _NO_KWARGS

    def _bit_pattern_kernel(
        self, node: NodeProto, info: KernelInfo, kwargs: dict[str, Any]
    ) -> tuple[Callable[..., Any], KernelOptions]:
        """The kernel, wrapped when the node may read bit-pattern floats; adds the node's
        outputs to ``bits`` (the values holding bit-pattern floats) when they will.

        The op's traits decide: a kernel that does float arithmetic (not ``bit_exact``) gets
        them decoded to float32; one that only moves elements keeps the dtype's tag; a cast's
        output holds them exactly when its target type is one. A wrapped kernel has no
        planner options (it is no longer the function they describe).
        """
        fn, options = info.fn, info.options
        bits = self.bits
        op = traits(node.domain, node.op_type)
        casts_bits = op.casts_to is not None and kwargs.get(op.casts_to) in _BIT_FLOATS
        if bits and _reads_bit_floats(node, kwargs, bits):
            if not op.bit_exact:
                fn, options = _in_float32(fn), NO_OPTIONS
            elif op.moves_elements:
                fn, options = _keep_tag(fn), NO_OPTIONS
            if op.casts_to is None or casts_bits:
                bits.update(n for n in node.output if n)
        elif casts_bits:
            bits.update(n for n in node.output if n)
        return fn, options


def _kernel_of(node: NodeProto, domain: str, opset: int) -> KernelInfo:
    """The kernel of ``node`` at ``opset``; raises NotImplementedOp saying which versions exist."""
    info = lookup_kernel(domain, node.op_type, opset)
    if info is None:
        versions = registered_kernels().get((domain, node.op_type))
        hint = (
            f"kernels exist for opset versions {versions}"
            if versions
            else "no kernel exists for any version; register one with onnx_light.runtime.kernel"
        )
        raise NotImplementedOp(f"{node_label(node)} at opset {opset}: {hint}")
    return info


def _fuse_relu(steps: list[Step], keep: set[int]) -> list[Step]:
    """Merges each ``X -> Relu`` pair where the kernel of X has a ``with_relu`` variant
    (Conv) and the Relu is X's output's only reader: the merged step writes the Relu's
    output, and the value in between never exists."""
    readers: dict[int, list[int]] = {}
    for i, step in enumerate(steps):
        for s in set(step.inputs):
            readers.setdefault(s, []).append(i)
    merged: dict[int, Step] = {}
    dropped: set[int] = set()
    for i, step in enumerate(steps):
        fused = step.options.with_relu
        if fused is None or len(step.outputs) != 1 or step.outputs[0] in keep:
            continue
        after = readers.get(step.outputs[0], [])
        if len(after) != 1:
            continue
        relu = steps[after[0]]
        # the reader's kernel says it is Relu (and not wrapped to compute bit-pattern floats)
        if relu.inputs != step.outputs or relu.options.float_ufunc != "relu":
            continue
        fused_options = replace(step.options, with_relu=None)
        labels = (*step.fused, relu.node.op_type)
        merged[i] = Step(fused, step.inputs, relu.outputs, step.kwargs, step.node, step.opset, fused_options, labels)
        dropped.add(after[0])
    if not merged:
        return steps
    return [merged.get(i, step) for i, step in enumerate(steps) if i not in dropped]


def run_plan(
    plan: Plan,
    feeds: list[Any],
    scope: dict[str, Any] | None = None,
    trace: Callable[[Step, list[Any], list[Any]], None] | None = None,
    profile: dict[str, list[float]] | None = None,
) -> list[Any]:
    """Executes ``plan`` with positional ``feeds`` (and captured ``scope`` values).

    Args:
        plan: the compiled graph.
        feeds: one value per ``plan.input_slots``.
        scope: values of the names the plan captured from enclosing graphs.
        trace: called after each step with the step, its inputs and its outputs.
        profile: when given, runs the generic loop and adds to ``profile[step.label]`` its
            ``[calls, seconds]`` (nested plans count inside their node's time).

    Raises:
        RuntimeFailure: a kernel raised; the message names the node, op, opset and input shapes.
    """
    fast = plan.fast
    if trace is None and profile is None and fast is not None:
        if len(feeds) != len(plan.input_slots):
            feeds = (list(feeds) + [None] * len(plan.input_slots))[: len(plan.input_slots)]
        try:
            return fast(feeds, scope)
        except OnnxLightError:
            raise
        except Exception as err:
            where = failed_step(plan.codes, err.__traceback__)
            if where is None:
                raise
            index, local_values = where
            step = plan.steps[index]
            names = {s: f"v{s}" for s in step.inputs}
            args = [plan.constants.get(s, local_values.get(names[s])) if s else None for s in step.inputs]
            raise _failure(step, args, err) from err
    return _run_steps(plan, feeds, scope, trace, profile)


def _shape_of(value: Any) -> Any:
    """How an error shows an input: its shape, a sequence's shapes as ``seq[...]``, or None."""
    if value is None:
        return None
    if isinstance(value, list):
        return f"seq{[_shape_of(v) for v in value]}"
    return list(getattr(value, "shape", ()))


def _failure(step: Step, args: list[Any], err: Exception) -> RuntimeFailure:
    shapes = [_shape_of(v) for v in args]
    return RuntimeFailure(
        f"{node_label(step.node)} at opset {step.opset} failed on inputs with shapes {shapes}: "
        f"{type(err).__name__}: {err}"
    )


def _run_steps(
    plan: Plan,
    feeds: list[Any],
    scope: dict[str, Any] | None,
    trace: Callable[[Step, list[Any], list[Any]], None] | None,
    profile: dict[str, list[float]] | None = None,
) -> list[Any]:
    """The generic interpreter loop; used when tracing (verbose, check_finite) or profiling."""
    values = plan.initial_values()
    for s, v in zip(plan.input_slots, feeds):
        values[s] = v
    if plan.captured:
        assert scope is not None
        for name in plan.captured:
            values[plan.slot_of[name]] = scope[name]
    step: Step | None = None
    args: list[Any] = []
    try:
        for step, free in zip(plan.steps, plan.free_after):
            args = [values[i] for i in step.inputs]
            if profile is None:
                result = step.fn(*args, **step.kwargs)
            else:
                start = time.perf_counter()
                result = step.fn(*args, **step.kwargs)
                entry = profile.setdefault(step.label, [0, 0.0])
                entry[0] += 1
                entry[1] += time.perf_counter() - start
            outs = step.outputs
            if len(outs) == 1:
                values[outs[0]] = result[0] if type(result) is tuple else result
            else:
                for s, r in zip(outs, result):
                    values[s] = r
            if trace is not None:
                trace(step, args, [values[s] for s in outs])
            for s in free:
                values[s] = None
    except OnnxLightError:
        raise
    except Exception as err:
        assert step is not None
        raise _failure(step, args, err) from err
    return [values[s] for s in plan.output_slots]
