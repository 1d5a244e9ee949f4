"""Turning a plan into one straight-line Python function.

The generic loop of ``run_plan`` costs a few microseconds per node (building the
argument list, unpacking keyword arguments, indexing the value list, freeing
slots). For graphs of small tensors that is most of the time, so every plan is
also compiled into the function a person would write by hand::

    def plan(feeds, scope):
        v2, v3 = feeds
        v4 = k0(v2, c1); v4 = v4[0] if v4.__class__ is tuple else v4; del v2
        v5 = k1(v4, **kw1); ...
        return [v5]

Two options of a kernel (declared by ``@kernel``, see ``KernelOptions``) shorten its line
further: ``returns_one`` (it never returns a tuple, so no unpacking test) and ``inline_ufunc``
(a numpy ufunc that gives the kernel's exact answer whenever it returns an ndarray whose dtype
*is* the first input's; the line calls the ufunc, checks that, and calls the kernel itself only
otherwise)::

        v6 = u2(v5, c1); v6 = v6 if v6.__class__ is _nd and v6.dtype is v5.dtype else k2(v5, c1)

A kernel marked ``fresh_output`` (or ``inline_ufunc``) returns a new array that nothing
else references; when such a value dies at a one-input step whose kernel has an
``inplace`` variant, the line calls ``inplace(value)``, which may write the answer into
that dying buffer (never into a feed, a constant, an output or a value still read later).

When the caller promises the feeds' dtypes and ranks (``plan.input_types``: the session's
declared float32/float16/float64 inputs), the function checks the promise once on entry
(else it runs an untyped twin, generated on first need) and then knows, line by line,
which values are exact ndarrays of one builtin float dtype and what their shapes are as
far as declared. A step over such values whose kernel is marked ``float_ufunc`` (Add, Sub,
Mul, Div, Tanh, Neg, Abs, ... : the kernel is then exactly that ufunc) becomes the bare
ufunc call with no check, Relu a ``maximum`` against a 0-d zero and Sigmoid its four ufuncs;
and when an input is a fresh array that dies at this step and has the result's shape, the
result is written into it (``out=``) instead of a new array::

        v5 = u1(v4, c3, v4); del v4
        _neg(v9, v9); _exp(v9, v9); _add(v9, _of, v9); v10 = _div(_of, v9, v9); del v9

A value stops being fresh as soon as a kernel not known to return new arrays (Reshape,
Identity, ...) reads it, since its output may be a view of it.

With a buffer pool (``_pool.py``), a Concat whose producers write into its output
(``ConcatAlias``) takes that buffer on its first aliased producer's line and gives each
aliased input's producer ``out=`` its slice; the Concat's line then checks that those inputs
*are* the slices, copies the others into theirs, and runs the kernel only when not::

        _cb7 = _cbuf(_ar.lend(3), _cs7, _cd7); _cv5 = _cb7[:, 0:64]; _cv6 = _cb7[:, 64:128]; v5 = k2(v4, c1, out=_cv5)
        v9 = _cb7 if v5 is _cv5 and v6 is _cv6 and _put(_cb7, 1, ((v8, 128, 192),)) else k7(v5, v6, v8, **kw7); \\
            del _cb7, _cv5, _cv6

Values live in local variables, kernels, constants and keyword dicts are globals of
the generated module, and each intermediate is ``del``-ed right after its last
reader, so memory behaves exactly as in the generic loop. Step ``i`` sits alone on
line ``FIRST_LINE + i``: when a kernel raises, the traceback's line number names the
step and the frame's locals still hold its inputs, so error reports cost nothing
until they happen.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from types import CodeType, TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from ._native import _ELEMENTWISE_MIN as NATIVE_ELEMENTWISE_MIN
from ._native import sigmoid_f32
from ._pool import same_type_dtypes
from .kernels.elementwise import _RELU_ROW

if TYPE_CHECKING:
    from ._plan import Plan, Step
    from ._pool import ConcatAlias

__all__ = ["generate", "failed_step", "FIRST_LINE"]

#: line of the generated source that holds step 0
FIRST_LINE = 4
_counter = itertools.count()

#: the dtypes whose arrays the typed lines handle (by identity: numpy's builtin descriptors)
_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
#: (dtype, shape) of a value proven to be an exact ndarray; None for a dimension not known
_Type = tuple[np.dtype, tuple[int | None, ...]]
_F32 = np.dtype(np.float32)
_SIGMOID_UFUNCS = {"_neg": np.negative, "_exp": np.exp, "_add": np.add, "_div": np.divide}


def _outputs(result: Any, n: int) -> tuple[Any, ...]:
    """A kernel's result as exactly ``n`` values (missing optional outputs are None)."""
    if type(result) is not tuple:
        result = (result,)
    if len(result) >= n:
        return result[:n]
    return result + (None,) * (n - len(result))


def _sigmoid_into(x: np.ndarray, y: np.ndarray, kernel: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """A float32 Sigmoid of ``x`` written into ``y`` (an aliased Concat's slice) by the kernel's own
    pass (``sigmoid_f32``) when ``x`` is C-contiguous with ``y``'s shape, else ``kernel(x)``."""
    if x.__class__ is np.ndarray and x.dtype is _F32 and x.shape == y.shape and x.ndim and x.flags.c_contiguous:
        if not np.may_share_memory(x, y):
            return sigmoid_f32(x, y)
    return kernel(x)


def _cbuf(lent: np.ndarray | None, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An aliased Concat's output buffer: the pool's view when it lent one, else a new array."""
    return np.empty(shape, dtype) if lent is None else lent


def _put(buf: np.ndarray, axis: int, parts: tuple[tuple[Any, int, int], ...]) -> bool:
    """Copies each ``(x, start, stop)`` of an aliased Concat's unaliased inputs into its slice of
    ``buf`` along ``axis`` when every ``x`` is an exact ndarray of ``buf``'s dtype and of exactly
    its slice's shape (then True); copies nothing and gives False when one is not."""
    shape = buf.shape
    for x, start, stop in parts:
        if x.__class__ is not np.ndarray or x.dtype != buf.dtype or x.ndim != len(shape):
            return False
        if x.shape[axis] != stop - start or x.shape[:axis] != shape[:axis] or x.shape[axis + 1 :] != shape[axis + 1 :]:
            return False
    lead = (slice(None),) * axis
    for x, start, stop in parts:
        np.copyto(buf[(*lead, slice(start, stop))], x, casting="no")
    return True


def generate(plan: Plan, typed: bool = True) -> Callable[[list[Any], dict[str, Any] | None], list[Any]]:
    """Compiles ``plan`` into ``fn(feeds, scope) -> outputs``.

    With ``typed`` and ``plan.input_types``, the function first checks that the feeds are
    what the types promise and runs an untyped twin (generated on first need) when not.
    The code objects of the function (and of its twin, once generated) are kept in
    ``plan.codes``, where :func:`failed_step` looks for them.
    """
    codes: list[CodeType] = []
    fn = _generate(plan, typed, codes)
    plan.codes = codes
    return fn


def _generate(
    plan: Plan, typed: bool, codes: list[CodeType]
) -> Callable[[list[Any], dict[str, Any] | None], list[Any]]:
    """:func:`generate`, appending the code objects it makes to ``codes``."""
    em = _Emitter(plan)
    types, guard = em.promised_types() if typed and plan.input_types else ({}, [])
    lines = ["def plan(feeds, scope):"]
    ins = [em.target(s) for s in plan.input_slots]
    captured = [f"v{plan.slot_of[n]} = scope[{n!r}]" for n in plan.captured]
    unpack = [f"({', '.join(ins)},) = feeds"] if ins else []
    if guard:
        # a subgraph's typed feeds and its captured values: both read on the first line
        lines.append("    " + ("; ".join(unpack + captured) or "pass"))
        lines.append(f"    if not ({' and '.join(f'({g})' for g in guard)}): return _untyped(feeds, scope)")
    else:
        lines.append("    " + ("; ".join(unpack) or "pass"))
        lines.append("    " + ("; ".join(captured) if captured else "pass"))
    assert len(lines) == FIRST_LINE - 1
    # slots holding arrays that only their local variable references (none of the kernels that
    # read them so far may have returned a view or the array itself)
    fresh: set[int] = set()
    for i, (step, free) in enumerate(zip(plan.steps, plan.free_after)):
        lines.append("    " + em.step_line(i, step, free, types, fresh))
    give = ""
    if em.pooled and plan.steps:
        # the arena: taken on step 0's line (a run that raises drops it), given back on return
        lines[FIRST_LINE - 1] = "    _ar = _take(); " + lines[FIRST_LINE - 1][4:]
        give = "_give(_ar); "
    lines.append(f"    {give}return [{', '.join(em.ref(s) for s in plan.output_slots)}]")
    namespace = em.namespace
    filename = f"<onnx-light plan {next(_counter)}>"
    exec(compile("\n".join(lines), filename, "exec"), namespace)
    fn: Callable[[list[Any], dict[str, Any] | None], list[Any]] = namespace["plan"]
    codes.append(fn.__code__)
    if guard:

        def untyped(feeds: list[Any], scope: dict[str, Any] | None) -> list[Any]:
            twin = _generate(plan, False, codes)
            namespace["_untyped"] = twin
            return twin(feeds, scope)

        namespace["_untyped"] = untyped
    return fn


class _Emitter:
    """The lines of one generated function and the globals (``namespace``) they refer to."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.namespace: dict[str, Any] = {"_outputs": _outputs, "_nd": np.ndarray, "_max": np.maximum, "_fits": _fits}
        self.namespace.update(_SIGMOID_UFUNCS)
        arenas = plan.arenas
        #: pooled slot -> its position in the arena ``_ar`` (``_pool.py``)
        self.pooled: dict[int, int] = arenas.index if arenas is not None else {}
        #: pooled outputs of ``writes_out`` kernels that only their variable references when they are
        #: the arena's view (checked at run time: ``v is _ar.views[k]``), as ``fresh`` for the others
        self.lent: dict[int, int] = {}
        if arenas is not None:
            self.namespace.update(_take=arenas.take, _give=arenas.give, _lent=_lent)
        #: aliased Concats (``_pool.ConcatAlias``) by the step that takes their buffer, and by their own step
        self.takes: dict[int, list[ConcatAlias]] = {}
        self.joins: dict[int, ConcatAlias] = {}
        #: an aliased producer's output slot -> the variable holding its slice of the Concat's buffer
        self.slices: dict[int, str] = {}
        for c in arenas.concats if arenas is not None else ():
            self.takes.setdefault(c.first, []).append(c)
            self.joins[c.step] = c
            self.slices.update((s, f"_cv{s}") for s in c.aliased)
        if self.joins:
            self.namespace.update(_cbuf=_cbuf, _put=_put)

    def take_buffers(self, i: int) -> str:
        """The statements that take, on step ``i``'s line, the buffers of the Concats whose first
        aliased producer it is, and their aliased inputs' slices (empty when none)."""
        parts = []
        for c in self.takes.get(i, ()):
            out = self.plan.steps[c.step].outputs[0]
            self.namespace[f"_cs{c.step}"], self.namespace[f"_cd{c.step}"] = c.shape, c.dtype
            lent = f"_ar.lend({self.pooled[out]})" if out in self.pooled else "None"
            parts.append(f"_cb{c.step} = _cbuf({lent}, _cs{c.step}, _cd{c.step})")
            parts += [f"_cv{s} = _cb{c.step}{c.view(j)}" for s, j in c.aliased.items()]
        return "; ".join(parts + [""]) if parts else ""

    def join_stmt(self, i: int, c: ConcatAlias, args: list[str], out: str) -> str:
        """The line of aliased Concat ``i``: its buffer when every aliased input is its slice and
        the other inputs fit theirs (copied in), else the kernel's concatenation."""
        step = self.plan.steps[i]
        checks = [f"{args[j]} is _cv{s}" for s, j in c.aliased.items()]
        rest = [(args[j], *c.bounds[j]) for j in range(len(step.inputs)) if j not in c.aliased.values()]
        if rest:
            checks.append(f"_put(_cb{i}, {c.axis}, ({''.join(f'({a}, {b}, {e}), ' for a, b, e in rest)}))")
        call = f"k{i}({', '.join(args)})"  # (``args`` ends with the attributes' ``**kw{i}``)
        names = ", ".join([f"_cb{i}", *(f"_cv{s}" for s in c.aliased)])
        return f"{out} = _cb{i} if {' and '.join(checks)} else {call}; del {names}"

    def ref(self, slot: int) -> str:
        """How the code reads ``slot``: None, a constant global or a local variable."""
        if slot == 0:
            return "None"
        if slot in self.plan.constants:
            self.namespace[f"c{slot}"] = self.plan.constants[slot]
            return f"c{slot}"
        return f"v{slot}"

    @staticmethod
    def target(slot: int) -> str:
        """How the code writes ``slot`` (slot 1 swallows omitted outputs)."""
        return "_" if slot == 1 else f"v{slot}"

    def dtype_name(self, dtype: np.dtype) -> str:
        """The global naming ``dtype`` (with ``_z``/``_o`` 0-d zero and one of it)."""
        name = f"_d{dtype.char}"
        self.namespace[name] = dtype
        self.namespace[f"_z{dtype.char}"] = np.zeros((), dtype)
        self.namespace[f"_o{dtype.char}"] = np.ones((), dtype)
        return name

    def promised_types(self) -> tuple[dict[int, _Type], list[str]]:
        """The types of the typed feeds and float constants, and the checks of the feeds' promise.

        slot -> (dtype, shape) for values proven to be exact ndarrays of a builtin float dtype
        (one of _FLOATS, by identity) with that shape (None: a dimension not known here).
        """
        types: dict[int, _Type] = {}
        guard: list[str] = []
        for slot, (dtype, shape) in self.plan.input_types.items():
            v = f"v{slot}"
            checks = [f"{v}.__class__ is _nd", f"{v}.dtype is {self.dtype_name(dtype)}"]
            if all(d is not None for d in shape):
                checks.append(f"{v}.shape == {tuple(shape)!r}")
            else:
                checks.append(f"{v}.ndim == {len(shape)}")
                checks += [f"{v}.shape[{j}] == {d}" for j, d in enumerate(shape) if d is not None]
            guard.append(" and ".join(checks))
            types[slot] = (dtype, shape)
        for slot, value in self.plan.constants.items():
            # an initializer's dtype may be an equal copy of the builtin one ('<f4'): ufuncs answer
            # in the builtin one all the same
            if value.__class__ is np.ndarray and value.dtype.isnative and not value.dtype.metadata:
                builtin = next((d for d in _FLOATS if value.dtype == d), None)
                if builtin is not None:
                    types[slot] = (builtin, value.shape)
        return types, guard

    def step_line(self, i: int, step: Step, free: tuple[int, ...], types: dict[int, _Type], fresh: set[int]) -> str:
        """The line of step ``i``; updates ``types`` and ``fresh`` with what it produces."""
        namespace = self.namespace
        namespace[f"k{i}"] = step.fn
        args = [self.ref(s) for s in step.inputs]
        if step.kwargs:
            namespace[f"kw{i}"] = step.kwargs
            args.append(f"**kw{i}")
        outs = [self.target(s) for s in step.outputs]
        options = step.options
        ufunc = options.inline_ufunc
        # the arena views lent to this step's outputs (``_pool.py``), or None; an aliased Concat
        # input's slice of the Concat's buffer (then the result goes nowhere else)
        slices = self.slices
        intos = [slices.get(s) or (f"_ar.lend({self.pooled[s]})" if s in self.pooled else None) for s in step.outputs]
        into = intos[0] if intos else None
        aliased = bool(step.outputs) and step.outputs[0] in slices
        # a dying input that is the arena's view may take the result in place
        lent = {s: self.lent[s] for s in step.inputs if s in self.lent and s in free}
        join = self.joins.get(i)
        typed_stmt = (
            _typed_step(step, i, args, outs, free, types, fresh, namespace, self.dtype_name, into, aliased)
            if types and join is None
            else None
        )
        if join is not None:
            stmt = self.join_stmt(i, join, args, outs[0])
        elif typed_stmt is None:
            stmt = self._untyped_stmt(i, step, args, outs, free, fresh, intos, lent, aliased)
        else:
            stmt = typed_stmt
        if typed_stmt is None and types and options.float_shape is not None:
            _record_float_shape(step, types, self.plan.constants)
        if not options.makes_new_arrays:
            fresh.difference_update(step.inputs)  # its outputs may be (views of) its inputs
            for s in step.inputs:
                self.lent.pop(s, None)
        elif typed_stmt is not None or ufunc is not None or options.fresh_output:
            fresh.update(step.outputs)
        if options.writes_out:
            self.lent.update((s, self.pooled[s]) for s in step.outputs if s in self.pooled)
        if aliased:
            fresh.difference_update(step.outputs)  # a view of the Concat's buffer
        if join is not None and step.outputs[0] in self.pooled:
            fresh.discard(step.outputs[0])  # the arena's view, or the kernel's new array
            self.lent[step.outputs[0]] = self.pooled[step.outputs[0]]
        stmt = self.take_buffers(i) + stmt
        dead = [f"v{s}" for s in free if s > 1 and s not in self.plan.constants]
        if dead:
            stmt += f"; del {', '.join(dead)}"
        return stmt

    def _untyped_stmt(
        self,
        i: int,
        step: Step,
        args: list[str],
        outs: list[str],
        free: tuple[int, ...],
        fresh: set[int],
        intos: list[str | None] | None = None,
        lent: dict[int, int] | None = None,
        aliased: bool = False,
    ) -> str:
        """The statement of a step that the typed lines do not cover: in place, inline ufunc or a
        call (given the pool's buffers ``intos``, one per output, when the kernel takes ``out``;
        ``lent``: dying inputs that may take the result when they are the arena's view ``k``;
        ``aliased``: the output goes into its Concat's buffer, never in place)."""
        options = step.options
        intos = intos or []
        lent = lent or {}
        into = intos[0] if intos else None
        lend = []
        if options.writes_out and any(intos):
            lend = [f"out={into}"] if len(intos) == 1 else [f"out=({', '.join(t or 'None' for t in intos)},)"]
        call = f"k{i}({', '.join(args + lend)})"
        if aliased and options.float_ufunc == "sigmoid" and into is not None and len(args) == 1:
            self.namespace["_sigmoid_into"] = _sigmoid_into  # into an aliased Concat's slice
            return f"{outs[0]} = _sigmoid_into({args[0]}, {into}, k{i})"
        ufunc = options.inline_ufunc
        inplace = options.inplace
        if (
            inplace is not None
            and not aliased
            and len(outs) == 1
            and not step.kwargs
            and len(step.inputs) == 1
            and step.inputs[0] in free
        ):
            self.namespace[f"p{i}"] = inplace
            if step.inputs[0] in fresh:
                return f"{outs[0]} = p{i}({args[0]})"
            if step.inputs[0] in lent:
                return f"{outs[0]} = p{i}({args[0]}) if {args[0]} is _ar.views[{lent[step.inputs[0]]}] else {call}"
        if len(outs) == 1 and ufunc is not None and not step.kwargs and args and "None" not in args:
            o = outs[0]
            self.namespace[f"u{i}"] = ufunc
            first = f"u{i}({', '.join(args)})"
            dying = None if aliased else _dying_operand(step, args, free, fresh | lent.keys(), ufunc)
            if dying is not None:
                # checked at run time: both exact ndarrays of one dtype and the other operand
                # broadcasting to the dying one, so the answer has the dying buffer's shape and dtype
                a, b = args
                buf, other = (a, b) if dying == 0 else (b, a)
                self.namespace[f"s{i}"] = _same_type_dtypes(ufunc)
                check = (
                    f"{a}.__class__ is _nd and {b}.__class__ is _nd and {a}.dtype is {b}.dtype and "
                    f"{a}.dtype in s{i} and ({other}.shape == {buf}.shape or _fits({other}.shape, {buf}.shape))"
                )
                if step.inputs[dying] not in fresh:  # a pooled value: only while it is the arena's view
                    check = f"{buf} is _ar.views[{lent[step.inputs[dying]]}] and {check}"
                first = f"u{i}({a}, {b}, out={buf}) if {check} else {first}"
            elif into is not None:
                self.namespace[f"s{i}"] = same_type_dtypes(ufunc)
                first = f"_lent(u{i}, {into}, s{i}, {', '.join(args)})"
            return f"{o} = {first}; {o} = {o} if {o}.__class__ is _nd and {o}.dtype is {args[0]}.dtype else {call}"
        if len(outs) == 1 and options.returns_one:
            return f"{outs[0]} = {call}"
        if len(outs) == 1:
            o = outs[0]
            return f"{o} = {call}; {o} = {o}[0] if {o}.__class__ is tuple else {o}"
        if outs:
            return f"{', '.join(outs)} = _outputs({call}, {len(outs)})"
        return call


#: the builtin dtypes an in-place binary ufunc may run on, most common first (``in`` tests identity first)
_IN_PLACE_DTYPES = tuple(np.dtype(c) for c in "fdelqibhBHILQ")


def _same_type_dtypes(ufunc: np.ufunc) -> tuple[np.dtype, ...]:
    """The builtin dtypes ``d`` for which ``ufunc`` has a ``(d, d) -> d`` loop (so ``out=`` an
    operand of ``d`` is exactly its answer)."""
    return tuple(d for d in _IN_PLACE_DTYPES if f"{d.char}{d.char}->{d.char}" in ufunc.types)


def _lent(ufunc: np.ufunc, buf: np.ndarray | None, dtypes: tuple[np.dtype, ...], *xs: Any) -> Any:
    """``ufunc(*xs)``, written into the pool's buffer ``buf`` when that is exactly its answer's
    dtype and shape (``ufunc`` has a ``(d, ..., d) -> d`` loop for each ``d`` of ``dtypes``)."""
    if buf is None:
        return ufunc(*xs)
    dtype, shape = buf.dtype, buf.shape
    exact = False
    for x in xs:
        if x.__class__ is not np.ndarray or x.dtype is not dtype:
            return ufunc(*xs)
        if x.shape == shape:
            exact = True
        elif not _fits(x.shape, shape):
            return ufunc(*xs)
    return ufunc(*xs, out=buf) if exact and dtype in dtypes else ufunc(*xs)


def _fits(shape: tuple[int, ...], into: tuple[int, ...]) -> bool:
    """Whether ``shape`` broadcasts to ``into`` (a bias against the product it is added to)."""
    n = len(shape)
    if n > len(into):
        return False
    return all(d == 1 or d == e for d, e in zip(shape, into[len(into) - n :]))


def _dying_operand(step: Step, args: list[str], free: tuple[int, ...], fresh: set[int], ufunc: np.ufunc) -> int | None:
    """Which operand of a binary inline-ufunc step is a fresh array dying here (its buffer may
    take the answer), or None."""
    if ufunc.nin != 2 or len(step.inputs) != 2 or step.inputs[0] == step.inputs[1]:
        return None
    for k, s in enumerate(step.inputs):
        if s in fresh and s in free and s not in (0, 1) and args[k].startswith("v"):
            return k
    return None


def _broadcast(shapes: list[tuple[int | None, ...]]) -> tuple[int | None, ...] | None:
    """The broadcast shape as far as known here; None when the shapes cannot broadcast."""
    rank = max(len(s) for s in shapes)
    out: list[int | None] = []
    for j in range(rank):
        dims = {s[len(s) - rank + j] for s in shapes if len(s) - rank + j >= 0} - {1}
        if not dims:
            out.append(1)
        elif len(dims) == 1:
            out.append(dims.pop())  # one size, or one unknown size, against ones
        else:
            known = dims - {None}
            if len(known) > 1:
                return None
            # an unknown size against a known one is that one (or an error); two unknowns: unknown
            out.append(known.pop() if known else None)
    return tuple(out)


def _fits_into(shape: tuple[int | None, ...], others: list[tuple[int | None, ...]]) -> bool:
    """Whether each of ``others`` broadcasts to exactly ``shape`` (so ``out=`` an array of ``shape``
    gives the op's result)."""
    for other in others:
        if len(other) > len(shape):
            return False
        for d, e in zip(reversed(shape), reversed(other)):
            if e != 1 and (e is None or e != d):
                return False
    return True


def _native_sized(shape: tuple[int | None, ...]) -> bool:
    """Whether a float32 result of ``shape`` may be large enough for the native element-wise
    loops (``_native.py``'s threshold; a dimension not known: it may)."""
    dims = [d for d in shape if d is not None]
    return len(dims) < len(shape) or math.prod(dims) >= NATIVE_ELEMENTWISE_MIN


def _dying_buffer(
    step: Step, args: list[str], free: tuple[int, ...], types: dict[int, _Type], fresh: set[int]
) -> str | None:
    """The operand of a typed step that is a fresh array dying here with the result's shape (the
    result may go into it), or None."""
    for s, a in zip(step.inputs, args):
        if s in fresh and s in free and _fits_into(types[s][1], [types[t][1] for t in step.inputs if t != s]):
            return a
    return None


def _typed_step(
    step: Step,
    i: int,
    args: list[str],
    outs: list[str],
    free: tuple[int, ...],
    types: dict[int, _Type],
    fresh: set[int],
    namespace: dict[str, Any],
    dtype_name: Callable[[np.dtype], str],
    into: str | None = None,
    aliased: bool = False,
) -> str | None:
    """The line of a step whose inputs are all proven float arrays of one dtype and whose kernel
    is then exactly ``float_ufunc`` (a ufunc, or ``"relu"``/``"sigmoid"``); records its output's
    type. None when the step does not qualify. ``into``: the pool's buffer (``aliased``: its
    Concat's slice, which no dying input displaces) when the operands give its dtype and shape."""
    kind = step.options.float_ufunc
    if kind is None or len(outs) != 1 or step.kwargs or not step.inputs:
        return None
    if any(s not in types for s in step.inputs):
        return None
    dtype = types[step.inputs[0]][0]
    if any(types[s][0] is not dtype for s in step.inputs):
        return None
    shapes = [types[s][1] for s in step.inputs]
    shape = _broadcast(shapes)
    if shape is None or not shape:  # 0-d results are numpy scalars: the kernel wraps them
        return None
    nin = kind.nin if isinstance(kind, np.ufunc) else 1
    if len(step.inputs) != nin:
        return None
    o = outs[0]
    buffer = None if aliased else _dying_buffer(step, args, free, types, fresh)
    d = dtype_name(dtype)[2:]
    if isinstance(kind, np.ufunc):
        namespace[f"u{i}"] = kind
        if buffer is None and into is not None:
            namespace[f"s{i}"] = same_type_dtypes(kind)
            stmt = f"{o} = _lent(u{i}, {into}, s{i}, {', '.join(args)})"
        elif buffer is None:
            stmt = f"{o} = u{i}({', '.join(args)})"
        elif kind in (np.maximum, np.minimum):  # their positional out is deprecated
            stmt = f"{o} = u{i}({', '.join(args)}, out={buffer})"
        else:
            stmt = f"{o} = u{i}({', '.join(args)}, {buffer})"
    elif kind == "relu":
        x = args[0]
        dims = [n for n in shape if n is not None]
        size = math.prod(dims) if len(dims) == len(shape) else None
        if size is not None and not (size >= _RELU_ROW and size % _RELU_ROW == 0):
            # the kernel's own small-array path: max against a 0-d zero of the dtype
            stmt = f"{o} = _max({x}, _z{d}, out={x})" if buffer else f"{o} = _max({x}, _z{d})"
        elif buffer is not None:
            namespace[f"p{i}"] = step.options.inplace
            stmt = f"{o} = p{i}({x})"
        else:
            stmt = f"{o} = k{i}({x})"
    elif kind == "sigmoid" and dtype is _F32 and aliased and into is not None:
        namespace["_sigmoid_into"] = _sigmoid_into  # into an aliased Concat's slice
        stmt = f"{o} = _sigmoid_into({args[0]}, {into}, k{i})"
    elif kind == "sigmoid" and dtype is _F32 and _native_sized(shape):
        # float32 beyond the native threshold: the kernel's one native pass (in place when it may)
        x = args[0]
        if buffer is not None and step.options.inplace is not None:
            namespace[f"p{i}"] = step.options.inplace
            stmt = f"{o} = p{i}({x})"
        else:
            stmt = f"{o} = k{i}({x})"
    elif kind == "sigmoid":
        # the kernel's steps: exp(-x), + 1, 1 / that, the last two in place
        x = args[0]
        t = buffer if buffer is not None else o
        first = f"_neg({x}, {x})" if buffer is not None else f"{o} = _neg({x})"
        stmt = f"{first}; _exp({t}, {t}); _add({t}, _o{d}, {t}); {o} = _div(_o{d}, {t}, {t})"
    else:
        return None
    types[step.outputs[0]] = (dtype, shape)
    return stmt


def _record_float_shape(step: Step, types: dict[int, _Type], constants: dict[int, Any]) -> None:
    """Records the types of the results of a step whose kernel declares ``float_shape``, when
    its present inputs are all proven arrays of one builtin float dtype, but for those it
    reads by value (``shape_values``), which must be integer constants."""
    by_value = step.options.shape_values
    floats = [s for k, s in enumerate(step.inputs) if s != 0 and k not in by_value]
    if not floats or any(s not in types for s in floats):
        return
    dtype = types[floats[0]][0]
    if any(types[s][0] is not dtype for s in floats):
        return
    shapes: list[Any] = [types[s][1] if s in types else None for s in step.inputs]
    for k in by_value:
        if k < len(step.inputs) and step.inputs[k] != 0:
            value = constants.get(step.inputs[k])
            if value.__class__ is not np.ndarray or value.dtype.kind not in "iu":
                return
            shapes[k] = value
    assert step.options.float_shape is not None
    try:
        shape = step.options.float_shape(*shapes, **step.kwargs)
    except Exception:  # an invalid node (perm=1.5): its kernel reports it when it runs
        return
    if len(step.outputs) == 1:
        if shape:  # a 0-d result may be a numpy scalar
            types[step.outputs[0]] = (dtype, tuple(shape))
        return
    for out, one in zip(step.outputs, shape or ()):
        if one and out > 1:
            types[out] = (dtype, tuple(one))


def failed_step(codes: list[CodeType], tb: TracebackType | None) -> tuple[int, dict[str, Any]] | None:
    """(step index, the frame's locals) where the generated function whose code objects are
    ``codes`` (``plan.codes``: it and its untyped twin) was when it raised."""
    found = None
    while tb is not None:
        if any(tb.tb_frame.f_code is code for code in codes):
            index = tb.tb_lineno - FIRST_LINE
            found = (index, dict(tb.tb_frame.f_locals)) if index >= 0 else None
        tb = tb.tb_next
    return found
