"""Buffers reused across runs by the plan's value lifetimes (the session's arena).

A training step keeps its activations alive until the backward pass reads them, so glibc
serves its large arrays from fresh pages (an mmap, or a heap that free trimmed) and every
step pays a page fault per 4 KiB (7.2 us each on the 2-core benchmark machine; the conv net's
step took ~9,800 faults). onnxruntime reuses one arena across runs. This module is ours:

1. The session's first run goes through the generic loop and records the dtype and shape
   of every value (:func:`observe`).
2. :func:`plan_arena` picks the large (>= :data:`MIN_BYTES`) outputs of steps that can
   write into a given buffer (numpy ufunc steps; kernels marked ``writes_out``) and gives
   each a buffer for its *lifetime*: from its step to the last reader of the value or of
   anything that may share its memory (a Reshape/Transpose/Identity view, a result written
   in place into it while it died, a subgraph's output), found conservatively from the
   plan (an output of a kernel not known to make new arrays may alias every input; one that
   is may alias the inputs that die at its step). A value whose memory may reach a plan
   output (or a captured scope) is never pooled, so ``run`` never hands a pooled buffer to
   the caller and the next run cannot overwrite a result. Values whose lifetimes do not
   overlap share a buffer (greedy best fit over byte sizes).
3. The plan's generated function then takes an arena (one list of views of those buffers)
   on entry, passes ``out=`` views to those steps and gives the arena back on return; an
   arena is not shared by two runs at once (each concurrent run takes its own), and a run
   that raises drops its arena. ``out`` is only a hint: a step whose operands do not give
   exactly the buffer's dtype and shape (other feed shapes) allocates as before.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ._plan import Plan, Step

__all__ = [
    "ALIAS_MIN_BYTES",
    "Arena",
    "Arenas",
    "ConcatAlias",
    "MIN_BYTES",
    "Seen",
    "observe",
    "plan_arena",
    "plan_concats",
    "poolable",
    "same_type_dtypes",
    "writes_into",
]

#: the smallest value the pool holds (below glibc's 128 KiB mmap threshold malloc reuses memory well)
MIN_BYTES = 1 << 17
#: the smallest Concat output whose producers write into it (below, the views cost what the copy saves)
ALIAS_MIN_BYTES = 1 << 14
#: arenas kept for later runs (more only while runs overlap)
_KEPT = 2
#: the builtin dtypes a pooled value may have (``in`` tests identity first): numbers and bool
_OUT_DTYPES = tuple(np.dtype(c) for c in "fdelqibhBHILQe?")
#: (buffer, dtype, shape) of one pooled value's view
_View = tuple[int, np.dtype, tuple[int, ...]]


def same_type_dtypes(ufunc: np.ufunc) -> tuple[np.dtype, ...]:
    """The builtin dtypes ``d`` for which ``ufunc`` has a loop from ``d`` operands to a ``d``
    result (so ``out=`` a buffer of ``d`` holds exactly its answer)."""
    return tuple(d for d in _OUT_DTYPES if d.char * ufunc.nin + "->" + d.char in ufunc.types)


def poolable(step: Step) -> tuple[int, ...]:
    """The outputs of ``step`` its generated line can write into lent buffers: every output of a
    ``writes_out`` kernel (``out=`` one array, or a tuple of them for several outputs), the one
    output of an ufunc step (none for one with a missing optional input: a kernel call's
    missing input is a None argument, an ufunc's would be an operand)."""
    options = step.options
    if not step.outputs:
        return ()
    if options.writes_out:
        return tuple(s for s in step.outputs if s > 1)
    if 0 in step.inputs:
        return ()
    ufunc = options.inline_ufunc or options.float_ufunc
    if len(step.outputs) != 1 or step.outputs[0] <= 1 or not isinstance(ufunc, np.ufunc) or step.kwargs:
        return ()
    return step.outputs if ufunc.nin == len(step.inputs) and ufunc.nout == 1 else ()


@dataclass
class Seen:
    """What the observed run recorded (see :func:`observe`)."""

    #: slot -> (dtype, shape) of every exact ndarray value of a builtin dtype (a step's output,
    #: or an input some step read: a feed, a constant)
    types: dict[int, tuple[np.dtype, tuple[int, ...]]]
    #: (output slot, input slot) pairs whose values shared memory
    shared: set[tuple[int, int]]


def observe(plan: Plan) -> tuple[Seen, Callable[[Step, list[Any], list[Any]], None]]:
    """A trace for ``run_plan`` that records what :func:`plan_arena` needs, and the record it fills."""
    seen = Seen({}, set())

    def trace(step: Step, args: list[Any], outputs: list[Any]) -> None:
        for s, v in zip(step.inputs, args):
            if s not in seen.types and v.__class__ is np.ndarray and not v.dtype.metadata:
                seen.types[s] = (v.dtype, v.shape)
        for s, v in zip(step.outputs, outputs):
            if v.__class__ is np.ndarray and not v.dtype.metadata:
                seen.types[s] = (v.dtype, v.shape)
            if isinstance(v, np.ndarray):
                seen.shared.update(
                    (s, t) for t, a in zip(step.inputs, args) if isinstance(a, np.ndarray) and np.may_share_memory(v, a)
                )
            elif v is not None:
                seen.shared.update((s, t) for t in step.inputs)  # a sequence, an optional...: may hold any input

    return seen, trace


class Arena:
    """One run's buffers and the views of them its pooled values take (``views[k]``).

    :meth:`lend` checks at run time that nothing references a buffer any more (no pooled
    value on it alive, no view of one: numpy's views hold a reference to the array that owns
    the memory) and otherwise lends nothing, so the plan's lifetimes are an economy, never a
    condition of correctness: a result kept by the caller, or a view that outlived what the
    plan expected, makes the step allocate a new array instead.
    """

    __slots__ = ("buffers", "views", "owner", "peers", "idle")

    def __init__(self, sizes: list[int], layout: list[_View]) -> None:
        self.buffers = [np.empty(n, np.uint8) for n in sizes]
        self.views = [
            self.buffers[b][: dtype.itemsize * math.prod(shape)].view(dtype).reshape(shape)
            for b, dtype, shape in layout
        ]
        self.owner = [b for b, _, _ in layout]
        self.peers = [[j for j, (c, _, _) in enumerate(layout) if c == b] for b, _, _ in layout]
        if not layout:  # only Concats' unpooled outputs (``ConcatAlias``): nothing to lend
            self.idle = (-1, -1)
            return
        # the reference counts of an unreferenced buffer (less its views) and view, as lend() sees them
        self.idle = (self._count(0), sys.getrefcount(self.views[0]))
        # checked once: lend() refuses a view held elsewhere and a buffer viewed elsewhere (else
        # this Python counts references otherwise than measured here, and nothing is ever lent)
        held = self.views[0]
        refused = self.lend(0) is None
        del held
        viewed = self.buffers[self.owner[0]][:1]
        refused = refused and self.lend(0) is None
        del viewed
        if not refused or self.lend(0) is None:
            self.idle = (-1, -1)

    def _count(self, k: int) -> int:
        buffer = self.buffers[self.owner[k]]
        return sys.getrefcount(buffer) - len(self.peers[k])

    def lend(self, k: int) -> np.ndarray | None:
        """View ``k`` when its buffer is free (see the class), else None."""
        buffer = self.buffers[self.owner[k]]
        if sys.getrefcount(buffer) - len(self.peers[k]) != self.idle[0]:
            return None
        views = self.views
        for j in self.peers[k]:
            if sys.getrefcount(views[j]) != self.idle[1]:
                return None
        return views[k]


@dataclass
class Arenas:
    """The layout of one plan's pooled values, and the arenas kept between runs.

    ``index`` maps a pooled slot to its position ``k`` in an arena (the generated function
    writes the value into ``_ar.lend(k)``); ``layout`` gives, per position, ``(buffer, dtype,
    shape)``; ``sizes`` the buffers' bytes.
    """

    sizes: list[int]
    layout: list[_View]
    index: dict[int, int]
    kept: list[Arena] = field(default_factory=list)
    #: the Concats whose producers write into their output's buffer (:func:`plan_concats`)
    concats: list[ConcatAlias] = field(default_factory=list)

    def take(self) -> Arena:
        """An arena no other run is using (a kept one, else new buffers)."""
        try:
            return self.kept.pop()
        except IndexError:
            return Arena(self.sizes, self.layout)

    def give(self, arena: Arena) -> None:
        """Returns an arena after a run (kept for the next runs, up to two)."""
        if len(self.kept) < _KEPT:
            self.kept.append(arena)

    @property
    def nbytes(self) -> int:
        """The bytes one arena's buffers hold."""
        return sum(self.sizes)


@dataclass(frozen=True)
class ConcatAlias:
    """A Concat (step ``step``) whose aliased inputs' producers write into its output's buffer.

    ``bounds[j]`` is input ``j``'s ``(start, stop)`` along ``axis`` of the output (``dtype``,
    ``shape``, as observed); ``aliased`` maps each aliased input's slot to its position ``j``;
    ``first`` is the step that takes the buffer (the first aliased producer's).
    """

    step: int
    first: int
    axis: int
    dtype: np.dtype
    shape: tuple[int, ...]
    bounds: tuple[tuple[int, int], ...]
    aliased: dict[int, int]

    def view(self, j: int) -> str:
        """The subscript of input ``j``'s slice of the buffer, as the generated code writes it."""
        start, stop = self.bounds[j]
        return "[" + ":, " * self.axis + f"{start}:{stop}]"

    def shape_of(self, j: int) -> tuple[int, ...]:
        """Input ``j``'s shape (its slice's)."""
        start, stop = self.bounds[j]
        return (*self.shape[: self.axis], stop - start, *self.shape[self.axis + 1 :])


def _concat_geometry(step: Step, record: Seen) -> tuple[np.dtype, tuple[int, ...], int] | None:
    """(dtype, shape, axis) of a plain Concat's observed output of at least ``ALIAS_MIN_BYTES``
    (see :class:`ConcatAlias`), else None."""
    node = step.node
    if node.op_type != "Concat" or node.domain not in ("", "ai.onnx") or not step.options.fresh_output:
        return None  # (a kernel wrapped for bit-pattern floats has no options)
    if len(step.outputs) != 1 or step.outputs[0] <= 1 or 0 in step.inputs or len(step.inputs) < 2:
        return None
    dtype, shape = record.types.get(step.outputs[0], (None, ()))
    if dtype is None or dtype not in _OUT_DTYPES or not shape or "axis" not in step.kwargs:
        return None
    axis = step.kwargs["axis"]
    if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
        return None
    if math.prod(shape) * dtype.itemsize < ALIAS_MIN_BYTES:
        return None
    return dtype, shape, axis % len(shape)


def writes_into(step: Step) -> bool:
    """Whether the generated line of ``step`` (one output) can write its result into a given array:
    the :func:`poolable` steps, and float Sigmoid (``_codegen``'s typed line, native or twin)."""
    if len(step.outputs) != 1 or step.outputs[0] <= 1:
        return False
    if poolable(step) == step.outputs:
        return True
    return step.options.float_ufunc == "sigmoid" and len(step.inputs) == 1 and step.inputs[0] != 0


def plan_concats(plan: Plan, record: Seen) -> list[ConcatAlias]:
    """The Concats of ``plan`` whose output may live in a lent buffer (each Concat's inputs observed
    with its dtype and rank), and of their inputs those whose producers may write straight into
    their slices: with contiguous slices (every dimension before the axis is 1), inputs read by
    nothing but the Concat, once, and released there (not a plan output, a kept or a captured
    value), made by a step that can write into a given array (:func:`writes_into`). A Concat
    without such inputs (``aliased`` empty) only copies into its buffer (the arena's, when it lends one)."""
    released = {s: i for i, free in enumerate(plan.free_after) for s in free}
    producer = {s: i for i, step in enumerate(plan.steps) for s in step.outputs}
    reads: dict[int, int] = {}
    for step in plan.steps:
        for s in step.inputs:
            reads[s] = reads.get(s, 0) + 1
    found = []
    for i, step in enumerate(plan.steps):
        geometry = _concat_geometry(step, record)
        if geometry is None:
            continue
        dtype, shape, axis = geometry
        bounds, start = [], 0
        for s in step.inputs:
            t_dtype, t_shape = record.types.get(s, (None, ()))
            if t_dtype != dtype or len(t_shape) != len(shape):
                break
            bounds.append((start, start + t_shape[axis]))
            start += t_shape[axis]
        if len(bounds) != len(step.inputs) or start != shape[axis]:
            continue
        aliased = {}
        for j, s in enumerate(step.inputs):
            p = producer.get(s)
            if math.prod(shape[:axis]) != 1 or p is None or reads[s] != 1 or released.get(s) != i:
                continue
            if writes_into(plan.steps[p]):
                aliased[s] = j
        first = min((producer[s] for s in aliased), default=i)
        found.append(ConcatAlias(i, first, axis, dtype, shape, tuple(bounds), aliased))
    return found


def plan_arena(plan: Plan, record: Seen, min_bytes: int = MIN_BYTES) -> Arenas | None:
    """The buffers for ``plan``'s large poolable values (lifetimes as the module says) and its
    aliased Concats' outputs (from their first aliased producer on), or None when nothing qualifies."""
    concats = plan_concats(plan, record)
    aliased = {s for c in concats for s in c.aliased}
    joins = {c.step: c for c in concats}
    pooled_joins: set[int] = set()
    released = {s: i for i, free in enumerate(plan.free_after) for s in free}
    shares = _may_share(plan.steps, plan.free_after, record.shared)
    lives: list[tuple[int, int, int, _View]] = []  # (first step, last step, bytes, (-, dtype, shape))
    # values only their variable references, as ``_codegen`` tracks them: outputs of kernels that
    # make new arrays, and pooled outputs of ``writes_out`` kernels (checked to be the arena's
    # view at run time), until a kernel that may return a view of them reads them
    fresh: set[int] = set()
    for i, (step, free) in enumerate(zip(plan.steps, plan.free_after)):
        pooled = []
        for out in poolable(step):
            if out in aliased:
                continue  # written into its Concat's buffer
            dtype, shape = record.types.get(out, (None, ()))
            if dtype is None or dtype not in _OUT_DTYPES or math.prod(shape) * dtype.itemsize < min_bytes:
                continue
            if _in_place(step) and any(
                s in fresh and s in free and record.types.get(s) == (dtype, shape) for s in step.inputs
            ):
                continue  # the line writes the result into that dying input (no new buffer)
            end = _last_use(out, shares, released)
            if end is not None:
                builtin = next(d for d in _OUT_DTYPES if d == dtype)  # numpy's own descriptor (``is`` tests)
                lives.append((i, end, out, (math.prod(shape) * dtype.itemsize, builtin, shape)))
                pooled.append(out)
        join = joins.get(i)
        if join is not None and math.prod(join.shape) * join.dtype.itemsize >= min_bytes:
            end = _last_use(step.outputs[0], shares, released)
            if end is not None:  # the Concat's buffer lives from its first aliased producer on
                nbytes = math.prod(join.shape) * join.dtype.itemsize
                builtin = next(d for d in _OUT_DTYPES if d == join.dtype)
                lives.append((join.first, end, step.outputs[0], (nbytes, builtin, join.shape)))
                pooled_joins.add(i)
        if not step.options.makes_new_arrays:
            fresh.difference_update(step.inputs)
        fresh.update(step.outputs if step.options.makes_new_arrays else pooled if step.options.writes_out else ())
    concats = [c for c in concats if c.aliased or c.step in pooled_joins]  # (else the kernel's copy is as good)
    if not lives and not concats:
        return None
    arenas = _assign(sorted(lives, key=lambda life: life[0]))
    arenas.concats = concats
    return arenas


def _assign(lives: list[tuple[int, int, int, _View]]) -> Arenas:
    """Buffers for values alive from step ``first`` to step ``end``: one value per buffer at a
    time, best fit among the idle buffers (the largest idle one grown when none fits)."""
    sizes: list[int] = []
    busy: list[int] = []  # per buffer, the last step that reads it
    layout: list[_View] = []
    index: dict[int, int] = {}
    for first, end, slot, (nbytes, dtype, shape) in lives:
        idle = [b for b in range(len(sizes)) if busy[b] < first]
        fits = [b for b in idle if sizes[b] >= nbytes]
        if fits:
            b = min(fits, key=lambda k: sizes[k])
        elif idle:
            b = max(idle, key=lambda k: sizes[k])
            sizes[b] = nbytes
        else:
            b = len(sizes)
            sizes.append(nbytes)
            busy.append(end)
        busy[b] = end
        index[slot] = len(layout)
        layout.append((b, dtype, shape))
    return Arenas(sizes, layout, index)


def _may_share(
    steps: list[Step], free_after: list[tuple[int, ...]], shared: set[tuple[int, int]]
) -> dict[int, list[int]]:
    """slot -> the later values that may share its memory (one step away): an output of a kernel
    not known to make new arrays that shared memory with an input in the observed run (the
    generic loop), and an output the generated line may write in place into an input that dies
    at its step (an ufunc step, a kernel's in-place variant)."""
    shares: dict[int, list[int]] = {}
    for step, free in zip(steps, free_after):
        fresh = step.options.makes_new_arrays
        in_place = _in_place(step)
        for p in set(step.inputs):
            if p <= 1:
                continue
            for s in step.outputs:
                if s > 1 and ((in_place and p in free) or (not fresh and (s, p) in shared)):
                    shares.setdefault(p, []).append(s)
    return shares


def _in_place(step: Step) -> bool:
    """Whether the generated line of ``step`` may write its result into a dying input."""
    options = step.options
    return options.inplace is not None or options.inline_ufunc is not None or options.float_ufunc is not None


def _last_use(slot: int, shares: dict[int, list[int]], released: dict[int, int]) -> int | None:
    """The last step at which ``slot`` or any value that may share its memory is alive; None
    when one of them is never released (a plan output, a captured or kept value)."""
    end = -1
    todo, done = [slot], {slot}
    while todo:
        s = todo.pop()
        last = released.get(s)
        if last is None:
            return None
        end = max(end, last)
        for t in shares.get(s, ()):
            if t not in done:
                done.add(t)
                todo.append(t)
    return end
