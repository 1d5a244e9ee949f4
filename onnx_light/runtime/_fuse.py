"""Epilogue fusion: a convolution and the element-wise steps after it as one step.

A step whose kernel has a ``with_epilogue`` variant (Conv) is merged with what follows it when
each value in between has no other reader and is no graph output:

* ``Add(c, r)`` with another value ``r`` (a residual connection), then optionally
* one activation whose kernel declares ``epilogue`` (Relu, Clip, HardSwish, HardSigmoid,
  Sigmoid), or
* ``Mul(c, Sigmoid(c))`` (SiLU, as torch exports it).

The merged step calls the variant (the native kernel: the residual and the activation are
applied as the output is stored) and, when that returns None (numpy-only builds, other
dtypes, geometries the native kernel leaves to numpy), the original kernels one after the
other, so results never depend on whether the fast path ran beyond float rounding. A lone
``Conv -> Relu`` is left to ``_fuse_relu``. The planner knows no op here: kernels declare
what may be fused (``KernelOptions``).

Before that, each squeeze-excite block (``GlobalAveragePool -> 1 x 1 Conv -> activation -> 1 x 1
Conv -> activation -> Mul`` by the pooled input, constant float32 weights, every value in between
read once) becomes one step: the native ``squeeze_excite`` (``src/squeeze_excite.cpp``), or the six
kernels in turn where that cannot run. Its small kernels cost more in calls and cold caches than
in arithmetic (MobileNetV3: 0.94 -> 0.40 ms for its nine blocks, ``benchmarks/RESULTS.md`` h-dw).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # _plan imports this module
    from ._plan import Step

__all__ = ["fuse_conv_epilogues", "fuse_squeeze_excite"]

_SILU = 5  # ACT_SILU of src/conv.h (runtime/_native.py)

#: one fused step after the producer: (kernel, keyword arguments, arguments), an argument being
#: "y" (the value so far), "c" (the producer's output) or the index of an extra input
_Link = tuple[Callable[..., Any], dict[str, Any], tuple[Any, ...]]


def _readers(steps: list[Step]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for i, step in enumerate(steps):
        for s in dict.fromkeys(step.inputs):
            out.setdefault(s, []).append(i)
    return out


def _only_reader(slot: int, readers: dict[int, list[int]], keep: set[int]) -> int | None:
    r = readers.get(slot, [])
    return r[0] if len(r) == 1 and slot not in keep else None


def _activation(step: Step, x: int, constants: dict[int, Any]) -> tuple[int, float, float] | None:
    """The epilogue ``(act, a, b)`` of ``step`` applied to ``x``, or None."""
    spec = step.options.epilogue
    if spec is None or len(step.outputs) != 1 or not step.inputs or step.inputs[0] != x:
        return None
    extra = step.inputs[1:]
    if any(s != 0 and s not in constants for s in extra):
        return None
    result: tuple[int, float, float] | None = spec(*[constants.get(s) for s in extra], **step.kwargs)
    return result


def _silu(steps: list[Step], c: int, readers: dict[int, list[int]], keep: set[int]) -> tuple[int, int] | None:
    """``(sigmoid index, mul index)`` when c's readers are exactly Sigmoid(c) and Mul(c, that)."""
    rs = readers.get(c, [])
    if len(rs) != 2 or c in keep:
        return None
    sig, mul = (rs[0], rs[1]) if steps[rs[0]].options.float_ufunc == "sigmoid" else (rs[1], rs[0])
    s, m = steps[sig], steps[mul]
    if s.options.float_ufunc != "sigmoid" or s.inputs != (c,) or len(s.outputs) != 1:
        return None
    if m.options.float_ufunc is not np.multiply or sorted(m.inputs) != sorted((c, s.outputs[0])):
        return None
    if _only_reader(s.outputs[0], readers, keep) != mul:
        return None
    return sig, mul


class _Chain:
    """What follows one producer: the steps fused (in order), the native epilogue, the residual."""

    def __init__(self, y: int) -> None:
        self.links: list[_Link] = []
        self.labels: list[str] = []
        self.used: list[int] = []
        self.act: tuple[int, float, float] = (0, 0.0, 0.0)
        self.residual = 0
        self.y = y  # the last fused step's output

    def take(self, j: int, step: Step, args: tuple[Any, ...]) -> None:
        self.links.append((step.fn, step.kwargs, args))
        self.labels.append(step.node.op_type)
        self.used.append(j)
        self.y = step.outputs[0]


def _chain_of(
    steps: list[Step],
    c: int,
    readers: dict[int, list[int]],
    keep: set[int],
    constants: dict[int, Any],
    lone_relu: bool = False,
) -> _Chain:
    """The steps after the producer of ``c`` that fuse into it (module docstring); a lone Relu
    too when ``lone_relu`` (the producer runs prepared: ``_fuse_relu`` would undo that)."""
    chain = _Chain(c)
    silu = _silu(steps, c, readers, keep)
    if silu is not None:
        chain.take(silu[0], steps[silu[0]], ("c",))
        chain.take(silu[1], steps[silu[1]], ("c", "y"))
        chain.act = (_SILU, 0.0, 0.0)
        return chain
    j = _only_reader(c, readers, keep)
    if j is not None and steps[j].options.float_ufunc is np.add and len(steps[j].inputs) == 2:
        other = [s for s in steps[j].inputs if s != c]
        if len(other) == 1 and other[0] != 0:
            chain.residual = other[0]
            chain.take(j, steps[j], ("y", 0))
            j = _only_reader(chain.y, readers, keep)
    if j is not None:
        spec = _activation(steps[j], chain.y, constants)
        if spec is not None and (chain.residual or lone_relu or spec[0] != 1):  # a lone Relu: _fuse_relu's
            first = 1 if chain.residual else 0
            chain.take(j, steps[j], ("y", *range(first, first + len(steps[j].inputs) - 1)))
            chain.act = spec
    return chain


#: ops that only move elements (their first input's): an element-wise activation after them gives
#: the same values applied before them
_MOVERS = frozenset({"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze"})


def hoist_activations(steps: list[Step], keep: set[int]) -> list[Step]:
    """The plan with each one-input activation (a kernel declaring ``epilogue``: Sigmoid, Relu,
    HardSwish, HardSigmoid) that reads a chain of element movers (``_MOVERS``) starting at a
    ``with_epilogue`` producer's output moved to right after the producer, so that it fuses into
    it: ``Conv -> Reshape -> Transpose -> Reshape -> Sigmoid`` (yolo's detection heads) becomes
    ``Conv -> Sigmoid -> Reshape -> Transpose -> Reshape``, each value in between read once and no
    graph output. The activation writes the first mover's input slot, each mover the next one's, the
    last the activation's old output: the same slots, one step later each."""
    producer = {s: i for i, step in enumerate(steps) for s in step.outputs}
    readers = _readers(steps)
    steps = list(steps)
    for a, act in enumerate(list(steps)):
        if act.options.epilogue is None or len(act.inputs) != 1 or len(act.outputs) != 1:
            continue
        chain: list[int] = []  # the movers, last first
        x = act.inputs[0]
        while (
            x in producer
            and _only_reader(x, readers, keep) is not None
            and steps[producer[x]].node.op_type in _MOVERS
            and len(steps[producer[x]].outputs) == 1
        ):
            chain.append(producer[x])
            x = steps[producer[x]].inputs[0]
        if not chain or x not in producer or _only_reader(x, readers, keep) is None:
            continue
        source = steps[producer[x]]
        if source.options.with_epilogue is None or len(source.outputs) != 1:
            continue
        chain.reverse()  # first mover first; slots: x -> m1 -> ... -> mk -> act's output
        slots = [x, *(steps[i].outputs[0] for i in chain), act.outputs[0]]
        moved = replace(act, inputs=(slots[0],), outputs=(slots[1],))
        at = [*chain, a]  # the steps' places, each taken by the one before it
        new = [moved] + [
            replace(steps[i], inputs=(slots[k + 1], *steps[i].inputs[1:]), outputs=(slots[k + 2],))
            for k, i in enumerate(chain)
        ]
        for place, step in zip(at, new):
            steps[place] = step
        producer = {s: i for i, step in enumerate(steps) for s in step.outputs}
        readers = _readers(steps)
    return steps


def fuse_conv_epilogues(steps: list[Step], constants: dict[int, Any], keep: set[int]) -> list[Step]:
    """The plan with each producer + residual Add + activation chain merged (module docstring),
    squeeze-excite blocks first merged into one step each (fuse_squeeze_excite) and activations
    after element movers moved next to their producer (hoist_activations)."""
    steps = fuse_squeeze_excite(steps, constants, keep)
    steps = hoist_activations(steps, keep)
    readers = _readers(steps)
    merged: dict[int, Step] = {}
    dropped: set[int] = set()
    for i, step in enumerate(steps):
        if step.options.with_epilogue is None or len(step.outputs) != 1 or i in dropped:
            continue
        plain = _prepared(step, constants, (0, 0.0, 0.0))
        chain = _chain_of(steps, step.outputs[0], readers, keep, constants, plain is not None)
        if not chain.used or any(j in dropped for j in chain.used):
            # nothing to fuse, or a step another producer's chain took already
            if plain is not None:
                merged[i] = _prepared_step(step, plain)
            continue
        # the merged step's inputs: the producer's, the residual, the activation's constants
        extras = ([chain.residual] if chain.residual else []) + [
            s for j in chain.used if steps[j].options.epilogue is not None for s in steps[j].inputs[1:]
        ]
        merged[max(chain.used)] = _merged_step(step, chain, extras, _prepared(step, constants, chain.act))
        dropped.update(chain.used)
        dropped.add(i)
    if not merged:
        return steps
    return [merged[i] if i in merged else s for i, s in enumerate(steps) if i in merged or i not in dropped]


def _prepared(step: Step, constants: dict[int, Any], act: tuple[int, float, float]) -> Callable[..., Any] | None:
    """The kernel's ``prepare_epilogue`` for ``step``'s constant weights and bias, or None."""
    prepare = step.options.prepare_epilogue
    if prepare is None or len(step.inputs) < 2 or any(s != 0 and s not in constants for s in step.inputs[1:3]):
        return None
    bias = constants.get(step.inputs[2]) if len(step.inputs) > 2 and step.inputs[2] else None
    result: Callable[..., Any] | None = prepare(constants[step.inputs[1]], bias, *act, **step.kwargs)
    return result


def _prepared_step(step: Step, run: Callable[..., Any]) -> Step:
    """``step`` (nothing fused after it) calling ``run`` first, its kernel when that gives None."""
    from ._plan import Step

    kernel, kwargs, n_in = step.fn, step.kwargs, len(step.inputs)

    def prepared(x: Any, *args: Any, out: Any = None) -> Any:
        y = run(x, None, out)
        if y is not None:
            return y
        return kernel(x, *args, **kwargs) if out is None else kernel(x, *args, **kwargs, out=out)

    assert n_in >= 2
    options = replace(step.options, with_relu=None, with_epilogue=None, absorb_affine=None, prepare_epilogue=None)
    return Step(prepared, step.inputs, step.outputs, {}, step.node, step.opset, options, step.fused)


def _merged_step(step: Step, chain: _Chain, extras: list[int], run: Callable[..., Any] | None = None) -> Step:
    """The step running ``step`` then ``chain`` (natively when ``with_epilogue`` can; by ``run``,
    the kernel's ``prepare_epilogue`` for this step, first when given)."""
    from ._plan import Step

    conv, variant, kwargs = step.fn, step.options.with_epilogue, step.kwargs
    assert variant is not None
    n_in = len(step.inputs)
    code, a, b = chain.act
    has_residual, links = bool(chain.residual), chain.links

    def fused(*args: Any, out: Any = None) -> Any:  # out: the pool's buffer (writes_out), for the variant
        own, more = args[:n_in], args[n_in:]
        if run is not None:
            y = run(own[0], more[0] if has_residual else None, out)
            if y is not None:
                return y
        x, w = own[0], own[1]
        bias = own[2] if n_in > 2 else None
        lent = {} if out is None else {"out": out}
        y = variant(x, w, bias, more[0] if has_residual else None, code, a, b, **kwargs, **lent)
        if y is not None:
            return y
        c = conv(*own, **kwargs)
        value = c
        for fn, kw, spec in links:
            value = fn(*[value if s == "y" else c if s == "c" else more[s] for s in spec], **kw)
        return value

    options = replace(step.options, with_relu=None, with_epilogue=None, absorb_affine=None, prepare_epilogue=None)
    fused_labels = (*step.fused, *chain.labels)
    return Step(fused, (*step.inputs, *extras), (chain.y,), {}, step.node, step.opset, options, fused_labels)


# ----------------------------------------------------------------------------
# squeeze-excite: GlobalAveragePool -> 1x1 Conv -> act -> 1x1 Conv -> act -> Mul as one step
# ----------------------------------------------------------------------------
def _pointwise_weights(step: Step, x: int, constants: dict[int, Any], cin: int | None) -> Any:
    """``(W (M x C), bias or None)`` of a plain 1 x 1 Conv of ``x`` with constant float32 weights
    (no group, stride, dilation or pad; ``cin`` input channels when given), or None."""
    if step.node.op_type != "Conv" or step.node.domain not in ("", "ai.onnx") or step.inputs[:1] != (x,):
        return None
    kw = step.kwargs
    if kw.get("group", 1) != 1 or any(v != 1 for v in [*(kw.get("strides") or []), *(kw.get("dilations") or [])]):
        return None
    if any(kw.get("pads") or []) or len(step.outputs) != 1 or step.inputs[1] not in constants:
        return None
    w = constants[step.inputs[1]]
    b = constants.get(step.inputs[2]) if len(step.inputs) > 2 and step.inputs[2] else None
    if len(step.inputs) > 2 and step.inputs[2] and b is None:
        return None  # a bias computed at run time
    if not isinstance(w, np.ndarray) or w.dtype != np.float32 or w.ndim != 4 or w.shape[2:] != (1, 1):
        return None
    if (cin is not None and w.shape[1] != cin) or (b is not None and (b.dtype != np.float32 or b.shape != w.shape[:1])):
        return None
    return np.ascontiguousarray(w.reshape(w.shape[:2])), None if b is None else np.ascontiguousarray(b)


def _squeeze_excite_chain(
    steps: list[Step], i: int, readers: dict[int, list[int]], keep: set[int], constants: dict[int, Any]
) -> Any:
    """``(the six step indices, (W1, b1), act1, (W2, b2), act2)`` of the squeeze-excite block whose
    GlobalAveragePool is step ``i``, or None (the module docstring's pattern)."""
    gap = steps[i]
    if gap.node.op_type != "GlobalAveragePool" or gap.node.domain not in ("", "ai.onnx") or len(gap.inputs) != 1:
        return None
    x, chain, parts = gap.inputs[0], [i], []
    value, cin = gap.outputs[0], None
    for _ in range(2):
        j = _only_reader(value, readers, keep)
        conv = None if j is None else _pointwise_weights(steps[j], value, constants, cin)
        if j is None or conv is None:
            return None
        k = _only_reader(steps[j].outputs[0], readers, keep)
        act = None if k is None else _activation(steps[k], steps[j].outputs[0], constants)
        if k is None or act is None:
            return None
        chain += [j, k]
        parts += [conv, act]
        value, cin = steps[k].outputs[0], conv[0].shape[0]
    m = _only_reader(value, readers, keep)
    if m is None or steps[m].options.float_ufunc is not np.multiply or sorted(steps[m].inputs) != sorted((x, value)):
        return None
    if x == value or parts[2][0].shape[0] != parts[0][0].shape[1]:
        return None
    return (*chain, m), *parts


def fuse_squeeze_excite(steps: list[Step], constants: dict[int, Any], keep: set[int]) -> list[Step]:
    """The plan with each squeeze-excite block (GlobalAveragePool, a 1 x 1 Conv and an activation
    twice, Mul by the input) as one step: the native ``squeeze_excite`` (``src/squeeze_excite.cpp``)
    on float32 inputs, else the six kernels one after the other (their twin)."""
    readers = _readers(steps)
    merged: dict[int, Step] = {}
    dropped: set[int] = set()
    for i in range(len(steps)):
        found = None if i in dropped else _squeeze_excite_chain(steps, i, readers, keep, constants)
        if found is None or any(j in dropped for j in found[0]):
            continue
        merged[found[0][-1]] = _squeeze_excite_step([steps[j] for j in found[0]], constants, *found[1:])
        dropped.update(found[0])
    if not merged:
        return steps
    return [merged[i] if i in merged else s for i, s in enumerate(steps) if i in merged or i not in dropped]


def _squeeze_excite_step(
    chain: list[Step], constants: dict[int, Any], conv1: Any, act1: Any, conv2: Any, act2: Any
) -> Step:
    """One step running ``chain`` (GlobalAveragePool ... Mul) natively, or its kernels in turn."""
    from ._native import CONV2D, NATIVE
    from ._plan import Step
    from ._registry import KernelOptions

    gap, mul = chain[0], chain[-1]
    constants = {s: constants[s] for step in chain for s in step.inputs if s in constants}  # what the twin reads
    x_slot, channels = gap.inputs[0], conv1[0].shape[1]
    ext = NATIVE if CONV2D and NATIVE is not None and hasattr(NATIVE, "squeeze_excite") else None
    f32 = np.dtype(np.float32)

    def squeeze_excite(x: Any, out: Any = None) -> Any:
        if (
            ext is not None
            and x.__class__ is np.ndarray
            and x.dtype is f32
            and x.ndim == 4
            and x.shape[1] == channels
            and x.shape[2] * x.shape[3]
        ):
            return ext.squeeze_excite(np.ascontiguousarray(x), *conv1, *act1, *conv2, *act2, out=out)
        values = {x_slot: x}
        for step in chain:
            args = [values[s] if s in values else constants.get(s) for s in step.inputs]
            y = step.fn(*args, **step.kwargs)
            values[step.outputs[0]] = y[0] if type(y) is tuple else y
        return values[mul.outputs[0]]

    options = KernelOptions(returns_one=True, writes_out=True)
    labels = tuple(s.node.op_type for s in chain[1:])
    return Step(squeeze_excite, (x_slot,), mul.outputs, {}, gap.node, gap.opset, options, labels)
