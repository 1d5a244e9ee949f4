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

Two marks on a kernel function shorten its line further: ``returns_one`` (it never
returns a tuple, so no unpacking test) and ``inline_ufunc`` (a numpy ufunc that gives the
kernel's exact answer whenever it returns an ndarray whose dtype *is* the first input's;
the line calls the ufunc, checks that, and calls the kernel itself only otherwise)::

        v6 = u2(v5, c1); v6 = v6 if v6.__class__ is _nd and v6.dtype is v5.dtype else k2(v5, c1)

A kernel marked ``fresh_output`` (or ``inline_ufunc``) returns a new array that nothing
else references; when such a value dies at a one-input step whose kernel has an
``inplace`` variant, the line calls ``inplace(value)``, which may write the answer into
that dying buffer (never into a feed, a constant, an output or a value still read later).

Values live in local variables, kernels, constants and keyword dicts are globals of
the generated module, and each intermediate is ``del``-ed right after its last
reader, so memory behaves exactly as in the generic loop. Step ``i`` sits alone on
line ``FIRST_LINE + i``: when a kernel raises, the traceback's line number names the
step and the frame's locals still hold its inputs, so error reports cost nothing
until they happen.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from types import CodeType, TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ._plan import Plan

__all__ = ["generate", "failed_step", "FIRST_LINE"]

#: line of the generated source that holds step 0
FIRST_LINE = 4
_counter = itertools.count()


def _outputs(result: Any, n: int) -> tuple[Any, ...]:
    """A kernel's result as exactly ``n`` values (missing optional outputs are None)."""
    if type(result) is not tuple:
        result = (result,)
    if len(result) >= n:
        return result[:n]
    return result + (None,) * (n - len(result))


def generate(plan: Plan) -> Callable[[list[Any], dict[str, Any] | None], list[Any]]:
    """Compiles ``plan`` into ``fn(feeds, scope) -> outputs``."""
    namespace: dict[str, Any] = {"_outputs": _outputs, "_nd": np.ndarray}

    def ref(slot: int) -> str:
        if slot == 0:
            return "None"
        if slot in plan.constants:
            namespace[f"c{slot}"] = plan.constants[slot]
            return f"c{slot}"
        return f"v{slot}"

    def target(slot: int) -> str:
        return "_" if slot == 1 else f"v{slot}"

    lines = ["def plan(feeds, scope):"]
    ins = [target(s) for s in plan.input_slots]
    lines.append(f"    ({', '.join(ins)},) = feeds" if ins else "    pass")
    captured = [f"v{plan.slot_of[n]} = scope[{n!r}]" for n in plan.captured]
    lines.append("    " + ("; ".join(captured) if captured else "pass"))
    assert len(lines) == FIRST_LINE - 1
    fresh: set[int] = set()  # slots holding arrays only their local variable references
    for i, (step, free) in enumerate(zip(plan.steps, plan.free_after)):
        namespace[f"k{i}"] = step.fn
        args = [ref(s) for s in step.inputs]
        if step.kwargs:
            namespace[f"kw{i}"] = step.kwargs
            args.append(f"**kw{i}")
        call = f"k{i}({', '.join(args)})"
        outs = [target(s) for s in step.outputs]
        ufunc = getattr(step.fn, "inline_ufunc", None)
        inplace = getattr(step.fn, "inplace", None)
        if (
            inplace is not None
            and len(outs) == 1
            and not step.kwargs
            and len(step.inputs) == 1
            and step.inputs[0] in fresh
            and step.inputs[0] in free
        ):
            namespace[f"p{i}"] = inplace
            stmt = f"{outs[0]} = p{i}({args[0]})"
        elif len(outs) == 1 and ufunc is not None and not step.kwargs and args and "None" not in args:
            o = outs[0]
            namespace[f"u{i}"] = ufunc
            stmt = (
                f"{o} = u{i}({', '.join(args)}); "
                f"{o} = {o} if {o}.__class__ is _nd and {o}.dtype is {args[0]}.dtype else {call}"
            )
        elif len(outs) == 1 and getattr(step.fn, "returns_one", False):
            stmt = f"{outs[0]} = {call}"
        elif len(outs) == 1:
            o = outs[0]
            stmt = f"{o} = {call}; {o} = {o}[0] if {o}.__class__ is tuple else {o}"
        elif outs:
            stmt = f"{', '.join(outs)} = _outputs({call}, {len(outs)})"
        else:
            stmt = call
        if ufunc is not None or getattr(step.fn, "fresh_output", False):
            fresh.update(step.outputs)
        dead = [f"v{s}" for s in free if s > 1 and s not in plan.constants]
        if dead:
            stmt += f"; del {', '.join(dead)}"
        lines.append("    " + stmt)
    lines.append(f"    return [{', '.join(ref(s) for s in plan.output_slots)}]")
    filename = f"<onnx-light plan {next(_counter)}>"
    exec(compile("\n".join(lines), filename, "exec"), namespace)
    fn: Callable[[list[Any], dict[str, Any] | None], list[Any]] = namespace["plan"]
    return fn


def failed_step(fn: Callable[..., Any], tb: TracebackType | None) -> tuple[int, dict[str, Any]] | None:
    """(step index, the frame's locals) where the generated ``fn`` was when it raised."""
    code: CodeType = fn.__code__
    while tb is not None:
        if tb.tb_frame.f_code is code:
            index = tb.tb_lineno - FIRST_LINE
            return (index, dict(tb.tb_frame.f_locals)) if index >= 0 else None
        tb = tb.tb_next
    return None
