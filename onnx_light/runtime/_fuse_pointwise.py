"""Pointwise fusion: a chain of float32 Add/Sub/Mul/Div/Sqrt steps as one native pass.

An optimizer's update is such a chain per parameter (AdamW: 14 element-wise steps reading the
parameter, its gradient and its two states), and numpy runs each step as a full pass over
the parameter with a new temporary. Here each maximal group of at least ``_MIN_STEPS`` such
steps whose intermediate values nobody else reads becomes one step that runs the group as a program
(``pointwise_f32``, ``src/elementwise.cpp``) block by block: each input read once, each
output written once, the intermediates in cache-sized blocks.

A step joins the group of its output's readers when all of them are in one group (a graph
output among the values is a result of the group); the merged step stands where the group's
last step stood, so every value it reads is computed before it and every value it gives is
read only after it. The program is exact: one IEEE float32 operation per step, as the
step's ufunc computes it, so results are bitwise those of the steps one by one.

The fast path runs when every input is a C-contiguous float32 ndarray, all of one shape
(rank >= 1) but for single values of no higher rank, and every operation reads at least one
full array (checked at run time, per pattern of full and single inputs); otherwise the
merged step calls the original kernels one after the other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ._native import POINTWISE_OPS, pointwise_f32

if TYPE_CHECKING:  # _plan imports this module
    from ._plan import Step

__all__ = ["fuse_pointwise"]

_F32 = np.dtype(np.float32)
_ND = np.ndarray
#: the fewest steps a group merges: an optimizer's update (AdamW 14, SGD with momentum and weight
#: decay 7). Shorter chains in a forward or backward graph (a bias and a residual Add, the
#: LayerNormalization gradient's broadcasts over rows) stay steps: the generated code already
#: writes them into dying buffers and the buffer pool lends them memory, which a merged step
#: that falls back to the kernels would lose
_MIN_STEPS = 6


def _op_code(step: Step) -> int | None:
    """The program's code for ``step``'s operation, or None when the step cannot join a group."""
    ufunc = step.options.float_ufunc
    if not isinstance(ufunc, np.ufunc) or ufunc not in POINTWISE_OPS:
        return None
    if len(step.outputs) != 1 or step.outputs[0] <= 1 or step.kwargs or len(step.inputs) != ufunc.nin:
        return None
    if any(s == 0 for s in step.inputs):
        return None
    return POINTWISE_OPS[ufunc]


def _groups(steps: list[Step]) -> dict[int, list[int]]:
    """The groups of at least ``_MIN_STEPS`` fusable steps, by their last step's index (members ascending)."""
    readers: dict[int, set[int]] = {}
    for i, step in enumerate(steps):
        for s in step.inputs:
            readers.setdefault(s, set()).add(i)
    group_of: dict[int, int] = {}
    for i in range(len(steps) - 1, -1, -1):
        if _op_code(steps[i]) is None:
            continue
        after = {group_of.get(r, -1) for r in readers.get(steps[i].outputs[0], ())}
        # joins the one group all its readers are in (a kept value: a result of that group)
        group_of[i] = after.pop() if len(after) == 1 and -1 not in after else i
    groups: dict[int, list[int]] = {}
    for i in sorted(group_of):
        groups.setdefault(group_of[i], []).append(i)
    return {root: members for root, members in groups.items() if len(members) >= _MIN_STEPS}


class PointwiseProgram:
    """The merged step's kernel: ``(*inputs) -> tuple of outputs`` (see the module)."""

    def __init__(self, members: list[Step], inputs: list[int], outputs: list[int]) -> None:
        self.members = members
        self.n_inputs = len(inputs)
        reg = {s: r for r, s in enumerate(inputs)}
        reg.update((s, self.n_inputs + r) for r, s in enumerate(outputs))
        rows: list[tuple[int, int, int, int]] = []
        for step in members:
            out = step.outputs[0]
            reg.setdefault(out, len(reg))
            a = reg[step.inputs[0]]
            b = reg[step.inputs[-1]]
            rows.append((POINTWISE_OPS[step.options.float_ufunc], reg[out], a, b))  # type: ignore[index]
        self.code = np.array(rows, np.int32).reshape(-1, 4)
        self.temps = len(reg) - len(inputs) - len(outputs)
        self.n_outputs = len(outputs)
        #: the slots the fallback reads and gives, in register order
        self.slots = inputs, outputs
        #: per member, the operand positions holding an intermediate that dies there (the
        #: fallback may write the member's answer into it)
        self.dying = _dying_intermediates(members, set(inputs) | set(outputs))
        #: pattern of single-value inputs (a bit each) -> whether every operation reads a full array
        self._valid: dict[int, bool] = {}

    def _operands_full(self, single: int) -> bool:
        """Whether, with the inputs of bit pattern ``single`` single values, every operation
        reads at least one full array (so every value of the program is full)."""
        full = [not (single >> r) & 1 for r in range(self.n_inputs)] + [False] * (self.n_outputs + self.temps)
        for _, dst, a, b in self.code.tolist():
            if not (full[a] or full[b]):
                return False
            full[dst] = True
        return True

    def __call__(self, *xs: Any) -> tuple[Any, ...]:
        shape: tuple[int, ...] = ()
        size = 0
        for x in xs:
            # (a constant loaded from a model may hold an equal float32 dtype that is not numpy's own)
            if x.__class__ is not _ND or not (x.dtype is _F32 or x.dtype == _F32) or not x.flags.c_contiguous:
                return self._slow(xs)
            if x.size > size:
                shape, size = x.shape, x.size
        if size < 2:
            return self._slow(xs)  # single values only: numpy's broadcast decides the shape
        single = 0
        for r, x in enumerate(xs):
            if x.shape != shape:
                if x.size != 1 or x.ndim > len(shape):
                    return self._slow(xs)
                single |= 1 << r
        valid = self._valid.get(single)
        if valid is None:
            valid = self._valid[single] = self._operands_full(single)
        if not valid:
            return self._slow(xs)
        outs = [np.empty(shape, _F32) for _ in range(self.n_outputs)]
        pointwise_f32(list(xs), outs, self.code, self.temps)
        return tuple(outs)

    def _slow(self, xs: tuple[Any, ...]) -> tuple[Any, ...]:
        """The original kernels, one after the other; a member whose operands are ndarrays of
        one float dtype writes its answer into a dying intermediate of the answer's shape
        (as the generated code would, ``_codegen.py``: the kernel is then its ufunc)."""
        inputs, outputs = self.slots
        values = dict(zip(inputs, xs))
        for step, dying in zip(self.members, self.dying):
            args = [values[s] for s in step.inputs]
            values[step.outputs[0]] = _into_dying(step, args, dying) if dying else step.fn(*args)
        return tuple(values[s] for s in outputs)


def _dying_intermediates(members: list[Step], external: set[int]) -> list[tuple[int, ...]]:
    """Per member, the positions of its operands that are intermediates of the group read for
    the last time there (never an input or output of the merged step)."""
    last: dict[int, int] = {}
    for j, step in enumerate(members):
        for s in step.inputs:
            last[s] = j
    return [
        tuple(k for k, s in enumerate(step.inputs) if s not in external and last[s] == j)
        for j, step in enumerate(members)
    ]


def _into_dying(step: Step, args: list[Any], dying: tuple[int, ...]) -> Any:
    """``step``'s answer, in the first dying operand that has exactly its dtype and shape."""
    ufunc = step.options.float_ufunc
    assert isinstance(ufunc, np.ufunc)
    dtype = args[0].dtype if args[0].__class__ is _ND else None
    if dtype is None or dtype.kind != "f" or any(a.__class__ is not _ND or a.dtype is not dtype for a in args):
        return step.fn(*args)
    for k in dying:
        buf = args[k]
        if buf.ndim and all(a.ndim <= buf.ndim and _fits(a.shape, buf.shape) for a in args):
            return ufunc(*args, out=buf)
    return step.fn(*args)


def _fits(shape: tuple[int, ...], into: tuple[int, ...]) -> bool:
    """Whether ``shape`` broadcasts to exactly ``into``."""
    return all(d == 1 or d == e for d, e in zip(shape[::-1], into[::-1]))


def _merged(steps: list[Step], members: list[int], keep: set[int], readers: dict[int, set[int]]) -> Step:
    """The step running ``members`` (indices into ``steps``, ascending) as one program."""
    from ._plan import Step

    group = [steps[i] for i in members]
    made = {s.outputs[0] for s in group}
    inputs = list(dict.fromkeys(s for step in group for s in step.inputs if s not in made))
    inside = set(members)
    root = group[-1].outputs[0]  # read after the merged step, or by nobody
    outputs = [o for o in made if o == root or o in keep or not readers.get(o, set()) <= inside]
    outputs.sort(key=lambda o: [step.outputs[0] for step in group].index(o))
    run: Callable[..., Any] = PointwiseProgram(group, inputs, outputs)
    last = group[-1]
    labels = tuple(step.node.op_type for step in group[:-1])
    return Step(run, tuple(inputs), tuple(outputs), {}, last.node, last.opset, fused=labels)


def fuse_pointwise(steps: list[Step], keep: set[int]) -> list[Step]:
    """``steps`` with each group of fusable element-wise steps (see the module) merged."""
    groups = _groups(steps)
    if not groups:
        return steps
    readers: dict[int, set[int]] = {}
    for i, step in enumerate(steps):
        for s in step.inputs:
            readers.setdefault(s, set()).add(i)
    dropped = {i for members in groups.values() for i in members}
    out = []
    for i, step in enumerate(steps):
        if i in groups:
            out.append(_merged(steps, groups[i], keep, readers))
        elif i not in dropped:
            out.append(step)
    return out
