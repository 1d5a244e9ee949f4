"""``InferenceSession``: onnxruntime's shape, numpy kernels underneath."""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..onnx_core import (
    FunctionProto,
    GraphProto,
    InvalidFeed,
    ModelProto,
    NotImplementedOp,
    RuntimeFailure,
    TypeProto,
    ValueInfoProto,
    from_onnx,
    load,
    load_from_string,
)
from ..onnx_core.helper import OPSET_VERSION
from ..onnx_core.ops import normalise_domain
from ._blas import default_blas_threads, use_blas_threads
from ._codegen import generate
from ._malloc import keep_freed_memory_from_env
from ._native import CONV_THREADS, DEFAULT_THREADS
from ._plan import Plan, Step, compile_graph, node_label, run_plan, tag_dtype, tensor_value
from ._pool import observe, plan_arena
from .kernels import _dtypes

_ML_DTYPE_NAMES = frozenset(_dtypes._ML_DTYPES)

__all__ = ["InferenceSession", "NodeArg", "DEFAULT_OPSET"]

#: opset assumed for a bare GraphProto or a FunctionProto without opset imports
DEFAULT_OPSET = 21

_ORT_TYPE_NAMES = {
    1: "float",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    8: "string",
    9: "bool",
    10: "float16",
    11: "double",
    12: "uint32",
    13: "uint64",
    14: "complex64",
    15: "complex128",
    16: "bfloat16",
}


@dataclass(frozen=True)
class NodeArg:
    """An input or output as ``get_inputs()`` / ``get_outputs()`` describe it.

    Attributes:
        name: the value's name.
        type: onnxruntime's spelling, e.g. ``"tensor(float)"``; ``None`` when unknown.
        shape: dims as ints, symbolic names (str) or None; None when the rank is unknown.
        elem_type: the TensorProto data type, 0 when unknown.
    """

    name: str
    type: str | None
    shape: list[int | str | None] | None
    elem_type: int = 0


def _type_string(tp: TypeProto) -> str | None:
    """onnxruntime's spelling of a type: ``tensor(float)``, ``seq(tensor(int64))``, ..."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        name = _ORT_TYPE_NAMES.get(tp.tensor_type.elem_type)
        return f"tensor({name})" if name else None
    if kind == "sequence_type":
        inner = _type_string(tp.sequence_type.elem_type)
        return f"seq({inner})" if inner else None
    if kind == "optional_type":
        inner = _type_string(tp.optional_type.elem_type)
        return f"optional({inner})" if inner else None
    return None


def _arg_from_value_info(vi: ValueInfoProto) -> NodeArg:
    return _arg_from_type(vi.name, vi.type)


def _arg_from_type(name: str, tp: TypeProto) -> NodeArg:
    if not tp.HasField("tensor_type"):
        return NodeArg(name, _type_string(tp), None)
    tt = tp.tensor_type
    shape: list[int | str | None] | None = None
    if tt.HasField("shape"):
        shape = []
        for d in tt.shape.dim:
            kind = d.WhichOneof("value")
            shape.append(d.dim_value if kind == "dim_value" else d.dim_param if kind == "dim_param" else None)
    return NodeArg(name, _type_string(tp), shape, tt.elem_type)


def _holds_bit_floats(tp: TypeProto) -> bool:
    """Whether a sequence or optional type holds bit-pattern floats (bfloat16, float8, ...)."""
    kind = tp.WhichOneof("value")
    if kind == "sequence_type":
        inner = tp.sequence_type.elem_type
    elif kind == "optional_type":
        inner = tp.optional_type.elem_type
    else:
        return False
    if inner.HasField("tensor_type"):
        return inner.tensor_type.elem_type in _dtypes.BIT_PATTERN_TYPES
    return _holds_bit_floats(inner)


def _opsets(imports: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for imp in imports:
        out[normalise_domain(imp.domain)] = int(imp.version)
    return out


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pauses the cyclic garbage collector (restored after, if it was on).

    Building a plan allocates a few small objects per node, all freed by reference
    counting; meanwhile the collector's full passes, each over every object alive
    (the model included), made the build quadratic in the node count: 100,000 nodes
    took minutes instead of seconds (benchmarks/bench_session_build.py).
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _copy(value: Any) -> Any:
    """A copy of a tensor, or of a sequence's tensors; None stays None."""
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value if value is None else np.array(value, copy=True)


#: a feed type :meth:`InferenceSession._feed` checks at once: (dtype, fixed shape or None, rank
#: or -1, ((axis, fixed dim), ...))
_Plain = tuple[np.dtype, tuple[int, ...] | None, int, tuple[tuple[int, int], ...]]


class InferenceSession:
    """Runs a ModelProto, GraphProto or FunctionProto with numpy kernels.

    The graph is compiled once into a plan (kernels bound, attributes converted,
    values in slots, intermediates released after their last use); ``run`` only loops.

    Args:
        proto: a ModelProto, GraphProto, FunctionProto, serialized bytes or a path.
        providers: accepted for onnxruntime compatibility and ignored.
        verbose: 1 prints each node as it runs with its output shapes and L2 norms; 2 prints,
            after each run, the time per op type of the optimised plan (a profile table;
            ``last_profile`` keeps it as ``{label: (calls, seconds)}``).
        check_finite: raise at the first node whose output holds NaN or Inf.
        functions: model-local functions available to a bare graph or function.
        optimize: compile the optimised plan (constants folded, inference BatchNormalization
            folded into the Conv/Gemm before it, activations fused into convolutions); False
            runs the nodes as the model has them (results agree to float rounding).
        blas_threads: numpy's BLAS thread count while ``run`` runs (set by each run, left
            so after it; None: the last ``set_blas_threads(n)``, else ``ONNX_LIGHT_BLAS_THREADS``,
            else 1; 0: leave it as it is).
        intra_op_num_threads: threads of the native convolution while ``run`` runs: the
            calling thread and helpers of one persistent pool per process, parked between
            calls (None: ``sess_options.intra_op_num_threads`` when that is set, as
            onnxruntime spells it, else ``ONNX_LIGHT_THREADS``, else 1; the default stays 1 on
            small shared machines).
        buffer_pool: reuse the buffers of large intermediates across runs (``_pool.py``): the
            first run records the values' shapes, later runs write the large outputs of
            element-wise steps and of kernels that take ``out`` into buffers kept by the
            session, each lent for its value's lifetime (results are never pooled buffers).
            It saves the page faults of fresh memory every run; it keeps up to two arenas'
            worth of memory between runs. False (or ``ONNX_LIGHT_BUFFER_POOL=0``) turns it off.

    Raises:
        NotImplementedOp: a node's op has no kernel at the model's opset.
        OnnxLightError: the graph is inconsistent (a value nobody defines, ...).
    """

    def __init__(
        self,
        proto: ModelProto | GraphProto | FunctionProto | bytes | str | os.PathLike[str],
        providers: Any = None,
        *,
        verbose: int = 0,
        check_finite: bool = False,
        functions: list[FunctionProto] | None = None,
        sess_options: Any = None,
        blas_threads: int | None = None,
        optimize: bool = True,
        intra_op_num_threads: int | None = None,
        buffer_pool: bool = True,
    ) -> None:
        proto = _as_proto(proto)
        self.verbose = verbose
        self.check_finite = check_finite
        self.blas_threads = default_blas_threads() if blas_threads is None else int(blas_threads)
        if intra_op_num_threads is None:
            intra_op_num_threads = getattr(sess_options, "intra_op_num_threads", 0) or DEFAULT_THREADS
        self.intra_op_num_threads = max(1, min(int(intra_op_num_threads), 64))
        #: the next untraced run records the values' shapes for the buffer pool (then False)
        self._observe = _pool_wanted(buffer_pool)
        fns = [from_onnx(f) for f in functions or []]
        self._defaults: dict[str, Any] = {}
        opsets, graph = _opsets_and_graph(proto, fns)
        self._opsets = opsets
        if graph is not None:
            inits = {t.name: tensor_value(t) for t in graph.initializer}
            input_names = [i.name for i in graph.input]
            self._defaults = {n: inits[n] for n in input_names if n in inits}
            self._inputs = [_arg_from_value_info(i) for i in graph.input if i.name not in inits]
            self._outputs = [_arg_from_value_info(o) for o in graph.output]
            nodes = list(graph.node)
            output_names = [o.name for o in graph.output]
        else:
            assert isinstance(proto, FunctionProto)
            inits = {}
            input_names = list(proto.input)
            # a function's types are optional (value_info, IR 10); otherwise the feeds decide
            typed = {vi.name: _arg_from_value_info(vi) for vi in proto.value_info}
            self._inputs = [typed.get(n, NodeArg(n, None, None)) for n in input_names]
            self._outputs = [typed.get(n, NodeArg(n, None, None)) for n in proto.output]
            nodes = list(proto.node)
            output_names = list(proto.output)
        self._input_names = input_names
        self._output_names = output_names
        bit_values = {a.name for a in self._inputs if a.elem_type in _dtypes.BIT_PATTERN_TYPES}
        typed_inputs = graph.input if graph is not None else getattr(proto, "value_info", [])
        bit_values |= {vi.name for vi in typed_inputs if _holds_bit_floats(vi.type)}
        # the types run() enforces (see _check_feed): the plan specialises on them
        input_types = {a.name: (a.elem_type, a.shape) for a in self._inputs if a.elem_type}
        # optimised (fused, folded) steps only when no node is traced, so a trace shows every node
        with _gc_paused():
            self._plan: Plan = compile_graph(
                nodes,
                input_names,
                output_names,
                inits,
                opsets,
                fns,
                bit_values=bit_values,
                input_types=input_types,
                fuse=optimize and not (verbose == 1 or check_finite),
            )
        self._expected = {a.name: a for a in self._inputs}
        # full types of typed inputs: sequence and optional feeds are checked element by element
        self._types: dict[str, TypeProto] = {}
        if graph is not None:
            self._types = {i.name: i.type for i in graph.input}
        elif isinstance(proto, FunctionProto):
            self._types = {vi.name: vi.type for vi in proto.value_info if vi.name in input_names}
        if graph is not None:
            # inputs with an initializer default can be fed too, and are checked the same way
            self._expected.update({i.name: _arg_from_value_info(i) for i in graph.input if i.name in self._defaults})
        self._output_index = {n: i for i, n in enumerate(output_names)}
        self._plain = self._plain_tensor_types()
        #: the last profiled run's ``{step label: (calls, seconds)}`` (``verbose=2``)
        self.last_profile: dict[str, tuple[int, float]] = {}

    # -- onnxruntime's introspection -------------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        """The inputs the caller must feed (initializers excluded)."""
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        """The graph's outputs."""
        return list(self._outputs)

    def get_providers(self) -> list[str]:
        """onnxruntime compatibility: the one 'provider' this runtime has."""
        return ["NumpyExecutionProvider"]

    def _plain_tensor_types(self) -> dict[str, _Plain]:
        """Per tensor input of a builtin numpy dtype: ``(dtype, fixed shape or None, rank (-1:
        any), ((axis, fixed dim), ...))``. A feed that is an exact ndarray of that very dtype and
        such a shape passes ``run`` without the general checks (which then decide the error)."""
        plain: dict[str, _Plain] = {}
        for name, arg in self._expected.items():
            tp = self._types.get(name)
            if arg.type is None or arg.elem_type in _dtypes.BIT_PATTERN_TYPES:
                continue
            if tp is not None and tp.WhichOneof("value") != "tensor_type":
                continue
            try:
                want = _dtypes.np_dtype(arg.elem_type)
            except ValueError:
                continue
            builtin = np.dtype(want.char) if want.char not in "OSUV" else None
            if builtin is None or builtin != want or builtin.metadata:
                continue
            if arg.shape is None:
                plain[name] = (builtin, None, -1, ())
                continue
            fixed = tuple((axis, d) for axis, d in enumerate(arg.shape) if isinstance(d, int) and d > 0)
            exact = tuple(d for _, d in fixed) if len(fixed) == len(arg.shape) else None
            plain[name] = (builtin, exact, len(arg.shape), fixed)
        return plain

    # -- running -----------------------------------------------------------------
    def _feed(self, name: str, value: Any) -> Any:
        """``value`` checked as the feed of ``name``: a plain ndarray of the declared dtype and
        shape at once, anything else by :meth:`_check_feed`."""
        plain = self._plain.get(name)
        if plain is not None and value.__class__ is np.ndarray and value.dtype is plain[0]:
            _, exact, rank, fixed = plain
            if value.shape == exact or rank < 0:
                return value
            if exact is None and value.ndim == rank and all(value.shape[axis] == d for axis, d in fixed):
                return value
        return self._check_feed(name, value)

    def _check_feed(self, name: str, value: Any) -> Any:
        arg = self._expected.get(name)
        tp = self._types.get(name)
        if tp is not None and tp.WhichOneof("value") in ("sequence_type", "optional_type"):
            return self._check_container(name, value, tp)
        if (arg is None or arg.type is None) and (value is None or isinstance(value, list)):
            return value  # an untyped input fed a sequence or an empty optional
        return self._check_tensor(name, value, arg)

    def _check_container(self, name: str, value: Any, tp: TypeProto) -> Any:
        """Checks a sequence (a list of arrays) or an optional (None or its value) feed."""
        kind = tp.WhichOneof("value")
        if kind == "optional_type":
            return None if value is None else self._check_value(name, value, tp.optional_type.elem_type)
        if kind != "sequence_type":
            return value  # maps and other non-tensor types go to the kernels as given
        if not isinstance(value, (list, tuple)):
            raise InvalidFeed(
                f"input {name!r}: expected {_type_string(tp)}, a list of arrays, got {type(value).__name__}"
            )
        elem = tp.sequence_type.elem_type
        return [self._check_value(f"{name}[{i}]", v, elem) for i, v in enumerate(value)]

    def _check_value(self, name: str, value: Any, tp: TypeProto) -> Any:
        kind = tp.WhichOneof("value")
        if kind == "tensor_type":
            if value is None or isinstance(value, (list, tuple)):
                raise InvalidFeed(f"input {name!r}: expected {_type_string(tp)}, got {type(value).__name__}")
            # read-only: an output that is this element (SequenceAt) is then copied, never the caller's array
            element = np.asarray(self._check_tensor(name, value, _arg_from_type(name, tp))).view()
            element.flags.writeable = False
            return element
        return self._check_container(name, value, tp)

    def _check_tensor(self, name: str, value: Any, arg: NodeArg | None) -> Any:
        arr = value if isinstance(value, np.ndarray) else np.asarray(value)
        if arg is None or arg.elem_type == 0:
            return arr
        try:
            want = _dtypes.np_dtype(arg.elem_type)
        except ValueError:
            want = None
        if want is not None and arr.dtype != want:
            if arr.dtype.name in _ML_DTYPE_NAMES and _dtypes.onnx_type_of(arr) == arg.elem_type:
                arr = arr.view(want)  # an ml_dtypes array: same bits, tagged dtype
            else:
                raise InvalidFeed(
                    f"input {name!r}: expected {arg.type} with shape {arg.shape}, got {arr.dtype} with shape "
                    f"{list(arr.shape)}; cast it with .astype(np.{want})"
                )
        if arg.shape is not None:
            if arr.ndim != len(arg.shape):
                raise InvalidFeed(
                    f"input {name!r}: expected rank {len(arg.shape)} (shape {arg.shape}), got rank {arr.ndim} "
                    f"(shape {list(arr.shape)})"
                )
            for axis, (want_dim, got_dim) in enumerate(zip(arg.shape, arr.shape)):
                if isinstance(want_dim, int) and want_dim > 0 and want_dim != got_dim:
                    raise InvalidFeed(
                        f"input {name!r}: dimension {axis} must be {want_dim}, got {got_dim} "
                        f"(expected shape {arg.shape}, given {list(arr.shape)})"
                    )
        if arg.elem_type in _dtypes.BIT_PATTERN_TYPES:
            arr = tag_dtype(arr, arg.elem_type)
        return arr

    def run(self, output_names: list[str] | None, input_feed: dict[str, Any], run_options: Any = None) -> list[Any]:
        """Computes ``output_names`` (all outputs if None) from ``input_feed``.

        Raises:
            InvalidFeed: a missing input, an unknown name, a wrong dtype, rank or fixed dimension.
            RuntimeFailure: a kernel failed; the message names the node, op, opset and input shapes.
        """
        if not isinstance(input_feed, dict):
            raise InvalidFeed(f"feeds must be a dict of name -> array, got {type(input_feed).__name__}")
        unknown = [n for n in input_feed if n not in self._input_names]
        if unknown:
            raise InvalidFeed(f"unknown input name(s) {unknown}; the model's inputs are {self._input_names}")
        feeds = []
        for name in self._input_names:
            if name in input_feed:
                feeds.append(self._feed(name, input_feed[name]))
            elif name in self._defaults:
                feeds.append(self._defaults[name])
            else:
                missing = [n for n in self._input_names if n not in input_feed and n not in self._defaults]
                raise InvalidFeed(f"missing input(s) {missing}; the model's inputs are {self._input_names}")
        if output_names is None:
            wanted = list(range(len(self._output_names)))
        else:
            try:
                wanted = [self._output_index[n] for n in output_names]
            except KeyError as err:
                raise InvalidFeed(
                    f"unknown output name {err.args[0]!r}; the model's outputs are {self._output_names}"
                ) from None
        results = self._execute(feeds)
        return _unaliased([results[i] for i in wanted], [*feeds, *input_feed.values()])

    def _execute(self, feeds: list[Any]) -> list[Any]:
        trace = self._trace if (self.verbose == 1 or self.check_finite) else None
        profile: dict[str, list[float]] | None = {} if self.verbose == 2 else None
        if self.blas_threads:
            use_blas_threads(self.blas_threads)
        # inf and NaN are results, not errors (check_finite is the tool to catch them); set once
        # per run so that kernels need not enter numpy's error state for every call
        threads = CONV_THREADS.set(self.intra_op_num_threads)
        try:
            with np.errstate(all="ignore"):
                if self._observe and trace is None and profile is None:
                    results = self._observed_run(feeds)
                else:
                    results = run_plan(self._plan, feeds, trace=trace, profile=profile)
        finally:
            CONV_THREADS.reset(threads)
        if profile is not None:
            self.last_profile = {k: (int(n), t) for k, (n, t) in profile.items()}
            print(format_profile(self.last_profile))
        return results

    def _observed_run(self, feeds: list[Any]) -> list[Any]:
        """The first run: the generic loop, recording each value's dtype and shape; then the
        plan's function is generated again with the buffer pool those shapes call for."""
        plan = self._plan
        seen, record = observe(plan)
        results = run_plan(plan, feeds, trace=record)
        self._observe = False  # (a run that raised observes again next time)
        arenas = plan_arena(plan, seen)
        if arenas is not None:
            plan.arenas = arenas
            plan.fast = generate(plan)
        return results

    def _trace(self, step: Step, args: list[Any], outputs: list[Any]) -> None:
        if self.verbose:
            parts = []
            for name, v in zip(step.node.output, outputs):
                if isinstance(v, np.ndarray) and v.dtype.kind in "fc":
                    parts.append(f"{name}: {list(v.shape)} |{float(np.linalg.norm(v.astype(np.float64).ravel())):.6g}|")
                elif isinstance(v, np.ndarray):
                    parts.append(f"{name}: {list(v.shape)} {v.dtype}")
            print(f"[onnx-light] {node_label(step.node)}: " + ", ".join(parts))
        if self.check_finite:
            for name, v in zip(step.node.output, outputs):
                if isinstance(v, np.ndarray) and v.dtype.kind in "fc" and not np.isfinite(v).all():
                    bad_inputs = [
                        n
                        for n, a in zip(step.node.input, args)
                        if isinstance(a, np.ndarray) and a.dtype.kind in "fc" and not np.isfinite(a).all()
                    ]
                    cause = (
                        f"input(s) {bad_inputs} were already non-finite" if bad_inputs else "all its inputs were finite"
                    )
                    raise RuntimeFailure(f"{node_label(step.node)}: output {name!r} holds NaN or Inf; {cause}")


def _as_proto(proto: Any) -> Any:
    """The proto a session runs: an onnx object converted, a path or bytes loaded."""
    proto = from_onnx(proto) if hasattr(proto, "SerializeToString") else proto
    if isinstance(proto, (str, os.PathLike)):
        return load(proto)
    if isinstance(proto, (bytes, bytearray, memoryview)):
        return load_from_string(proto)
    return proto


def _pool_wanted(buffer_pool: bool) -> bool:
    """Whether a session pools buffers (``ONNX_LIGHT_BUFFER_POOL=0`` says no); applies the opt-in,
    process-wide ``ONNX_LIGHT_MALLOC_KEEP=1`` (``_malloc.py``)."""
    keep_freed_memory_from_env()
    return buffer_pool and os.environ.get("ONNX_LIGHT_BUFFER_POOL", "1") != "0"


def format_profile(profile: dict[str, tuple[int, float]]) -> str:
    """A profile (``{label: (calls, seconds)}``) as a table, the most expensive op type first."""
    total = sum(t for _, t in profile.values()) or 1.0
    lines = [
        f"[onnx-light] profile: {total * 1e3:.3f} ms in kernels",
        f"{'op type':<28} {'calls':>6} {'ms':>9} {'%':>6}",
    ]
    for label, (calls, seconds) in sorted(profile.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"{label:<28} {calls:>6} {seconds * 1e3:>9.3f} {100 * seconds / total:>5.1f}%")
    return "\n".join(lines)


def _unaliased(results: list[Any], fed: list[Any]) -> list[Any]:
    """The outputs, each copied where writing it would change something else: a feed
    (Identity returns it, Reshape a view of it), a read-only constant, or another output.

    An output that owns its memory (``base`` None: made during this run) cannot be a view of a
    feed, which existed before it; it is compared only with the other outputs that are views.
    ``np.may_share_memory`` is asked only of arrays over the same allocation (``_Roots``): one
    call per pair cost 11 ms a run on MobileNetV3's backward (210 outputs, 212 feeds).
    """
    fed_ids = {id(v) for v in fed}
    feeds: _Roots | None = None  # built at the first view among the outputs
    seen = _Roots()  # every output so far
    views = _Roots()  # the outputs in ``seen`` that do not own their memory
    out = []
    for r in results:
        if isinstance(r, np.ndarray):
            owns = r.base is None
            if not owns and feeds is None:
                feeds = _Roots([v for v in fed if isinstance(v, np.ndarray)])
            if (
                id(r) in fed_ids
                or not r.flags.writeable
                or (not owns and feeds is not None and feeds.shares(r))
                or (views if owns else seen).shares(r)
                or (owns and seen.holds(r))
            ):
                r = _copy(r)
                owns = True
            seen.add(r)
            if not owns:
                views.add(r)
        elif id(r) in fed_ids:
            r = _copy(r)
        out.append(r)
    return out


class _Roots:
    """Arrays grouped by the allocation under them: the root of their ``base`` chain when it
    owns its memory, or the ``bytes`` it reads (``np.frombuffer``). Two allocations never
    overlap; an array over other memory (a memoryview, a memory map) is compared with all."""

    def __init__(self, arrays: Sequence[np.ndarray] = ()) -> None:
        self.groups: dict[int, list[np.ndarray]] = {}
        self.other: list[np.ndarray] = []
        self.ids: set[int] = set()
        for a in arrays:
            self.add(a)

    @staticmethod
    def _allocation(a: np.ndarray) -> int | None:
        while isinstance(a.base, np.ndarray):
            a = a.base
        base = a.base
        if base is None:  # an array over a pointer it was given (no base, no data of its own): other
            return id(a) if a.flags.owndata else None
        return id(base) if type(base) is bytes else None

    def add(self, a: np.ndarray) -> None:
        key = self._allocation(a)
        (self.other if key is None else self.groups.setdefault(key, [])).append(a)
        self.ids.add(id(a))

    def holds(self, a: np.ndarray) -> bool:
        return id(a) in self.ids

    def shares(self, a: np.ndarray) -> bool:
        """``np.may_share_memory(a, b)`` for some ``b`` held."""
        key = self._allocation(a)
        if key is None:
            candidates = [b for group in self.groups.values() for b in group]
        else:
            candidates = self.groups.get(key, [])
        return any(np.may_share_memory(a, b) for b in (*candidates, *self.other))


def _opsets_and_graph(proto: Any, fns: list[FunctionProto]) -> tuple[dict[str, int], GraphProto | None]:
    """The opsets a session runs at (the proto's and its functions') and its graph (None for a
    FunctionProto); ``fns`` gains a model's local functions."""
    if isinstance(proto, ModelProto):
        opsets = _opsets(proto.opset_import)
        fns += list(proto.functions)
        graph: GraphProto | None = proto.graph
    elif isinstance(proto, GraphProto):
        opsets = {"": DEFAULT_OPSET}
        graph = proto
    elif isinstance(proto, FunctionProto):
        opsets = _opsets(proto.opset_import) or {"": DEFAULT_OPSET}
        graph = None
    else:
        kind = type(proto).__name__
        raise TypeError(f"InferenceSession takes a ModelProto, GraphProto or FunctionProto, not {kind}")
    for fn in fns:
        for imp in fn.opset_import:
            opsets.setdefault(normalise_domain(imp.domain), int(imp.version))
    opsets.setdefault("", DEFAULT_OPSET)
    if opsets[""] > OPSET_VERSION:
        raise NotImplementedOp(
            f"the model imports ai.onnx opset {opsets['']}, newer than the newest onnx-light knows "
            f"({OPSET_VERSION}): its ops may mean something else there; convert it to opset {OPSET_VERSION} or older"
        )
    return opsets, graph
