"""The kernel registry: numpy functions keyed by ``(domain, op_type, since_version)``.

A kernel takes the node's inputs positionally (``None`` for an omitted optional
input) and its attributes keyword-only, with the ONNX default in the signature::

    @kernel("", "Softmax", since=13)
    def softmax(x, *, axis: int = -1):
        ...

One function serves several schema versions when ``since`` is a tuple of them
(``@kernel("", "Relu", since=(6, 13, 14))``).

Attribute values arrive as Python values: ``int``, ``float``, ``str`` (STRING,
decoded from UTF-8), ``list`` (INTS, FLOATS, STRINGS), ``np.ndarray`` (TENSOR)
and ``GraphProto`` (GRAPH). A kernel returns one array or a tuple of arrays. A
kernel that declares the keyword ``_num_outputs`` is told how many outputs the
node has (Split, Dropout, MaxPool's Indices, ...).

What the plan compiler may assume about a kernel (it returns one array, a new one, is
exactly a ufunc on floats, has an in-place or a fused-Relu variant) is declared by the
decorator's keywords and kept in :class:`KernelOptions`, never patched onto functions.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..onnx_core.ops import OpTable, normalise_domain

__all__ = ["kernel", "KernelInfo", "KernelOptions", "lookup_kernel", "registered_kernels", "KERNELS"]

Kernel = Callable[..., Any]


@dataclass(frozen=True)
class KernelOptions:
    """What the plan compiler (``runtime/_codegen.py``, ``_plan.py``) may assume about a kernel.

    Attributes:
        returns_one: it always returns one array, never a tuple.
        fresh_output: it returns a new array that nothing else references.
        inline_ufunc: a ufunc that gives the kernel's exact answer whenever it returns an
            ndarray whose dtype *is* the first input's (the plan may call it first).
        float_ufunc: on exact ndarrays of one builtin float dtype with a result of rank >= 1
            the kernel returns exactly ``float_ufunc(*args)`` (a ufunc, or ``"relu"`` /
            ``"sigmoid"`` naming those kernels' steps).
        inplace: a variant writing its answer into its (dying, fresh) single input.
        with_relu: a variant computing ``Relu(kernel(...))`` in one step (Conv).
        channel_affine: the kernel is ``x * scale + shift`` along axis 1 when its inputs after
            the first are constants: ``channel_affine(*those, **attributes)`` gives
            ``(scale, shift)`` as ``(C,)`` arrays, or None when it is not (BatchNormalization
            in inference mode: the planner folds it into the producer of ``x``).
        absorb_affine: the kernel's output channel c (axis 1) is linear in its constant second
            and third inputs (weights, bias): ``absorb_affine(w, b, scale, shift, **attributes)``
            gives ``(w', b', attributes')`` computing ``kernel(...) * scale + shift``, or None
            when it cannot (Conv, Gemm).
        with_epilogue: a variant ``(x, w, b, residual, act, a, b_act, **attributes)`` giving
            ``act(kernel(x, w, b) + residual)`` in one pass, or None when it cannot (Conv: the
            native kernel; ``act`` a code of ``src/conv.h``).
        prepare_epilogue: ``prepare_epilogue(w, b, act, a, b_act, **attributes)`` for constant
            weights and bias gives a callable ``(x, residual, out)`` computing what
            ``with_epilogue`` computes with everything that depends only on those decided once
            at plan time, returning None where the plan must call the kernels themselves; or
            None when it cannot (Conv: the native call's arguments, ``kernels/conv.py``).
        epilogue: the kernel is an activation that ``with_epilogue`` can apply:
            ``epilogue(*constant inputs after the first, **attributes)`` gives ``(act, a, b)``,
            or None (Relu, Clip, HardSwish, HardSigmoid, Sigmoid).
        float_shape: on exact ndarrays of one builtin float dtype the kernel returns one exact
            ndarray of that dtype whose shape is ``float_shape(input shapes, **attributes)``
            (a shape with None for a size not known, or None when that is not certain: a 0-d
            result, a shape that cannot be worked out), so a plan that knows its inputs' types
            knows the result's (MatMul, Gemm, Transpose; with ``fresh_output`` the plan may
            then write a later result into it). A kernel with several outputs gives a list
            of shapes (Split), one per output, or None.
        shape_values: the input positions ``float_shape`` receives by value: integer
            constants of the plan (Split's sizes); the step stays untyped when one is not.
        zero_pad: the kernel places its first input in a zero tensor when its inputs after the
            first are constants: ``zero_pad(*those, **attributes)`` gives the pads (the starts,
            then the ends, one per axis, none negative), or None when it is not (Pad).
        sums_inputs: the kernel returns the element-wise sum of its inputs (Sum): the planner
            may build a sum of zero-padded pieces that tile the result as their concatenation.
        writes_out: the kernel takes a keyword ``out``: a C-contiguous array the plan's buffer
            pool lends it (``runtime/_pool.py``), or for a step with several outputs a tuple with
            one array or None per output (MaxPool's Y and Indices). When an array has exactly its
            result's dtype and shape the kernel writes the result there and returns that array;
            otherwise it ignores it (a hint, never an error). It never reads ``out``.
        reads_only_shape: the kernel's result depends on its single input's shape alone (Shape,
            Size): the planner may run what follows from it and constants once per input shape.
    """

    returns_one: bool = False
    fresh_output: bool = False
    inline_ufunc: np.ufunc | None = None
    float_ufunc: np.ufunc | str | None = None
    inplace: Kernel | None = None
    with_relu: Kernel | None = None
    channel_affine: Kernel | None = None
    absorb_affine: Kernel | None = None
    with_epilogue: Kernel | None = None
    epilogue: Kernel | None = None
    float_shape: Kernel | None = None
    zero_pad: Kernel | None = None
    sums_inputs: bool = False
    shape_values: tuple[int, ...] = ()
    writes_out: bool = False
    prepare_epilogue: Kernel | None = None
    reads_only_shape: bool = False

    @property
    def makes_new_arrays(self) -> bool:
        """Whether the kernel's outputs never share memory with its inputs."""
        return bool(self.inline_ufunc is not None or self.float_ufunc is not None or self.fresh_output)


#: the options of a kernel that declares none
NO_OPTIONS = KernelOptions()


@dataclass(frozen=True)
class KernelInfo:
    """One registered kernel version."""

    domain: str
    op_type: str
    since: int
    fn: Kernel
    attributes: frozenset[str]
    wants_num_outputs: bool
    options: KernelOptions = NO_OPTIONS


#: every registered kernel, by ``(domain, op_type)`` and ``since``
KERNELS: OpTable[KernelInfo] = OpTable(
    "kernel", "register one with @onnx_light.runtime.kernel(domain, op_type, since=...)"
)


def kernel(
    domain: str,
    op_type: str,
    since: int | Iterable[int] = 1,
    *,
    returns_one: bool = False,
    fresh_output: bool = False,
    inline_ufunc: np.ufunc | None = None,
    float_ufunc: np.ufunc | str | None = None,
    inplace: Kernel | None = None,
    with_relu: Kernel | None = None,
    channel_affine: Kernel | None = None,
    absorb_affine: Kernel | None = None,
    with_epilogue: Kernel | None = None,
    epilogue: Kernel | None = None,
    float_shape: Kernel | None = None,
    zero_pad: Kernel | None = None,
    sums_inputs: bool = False,
    shape_values: tuple[int, ...] = (),
    writes_out: bool = False,
    prepare_epilogue: Kernel | None = None,
    reads_only_shape: bool = False,
) -> Callable[[Kernel], Kernel]:
    """Registers a numpy kernel for ``domain::op_type`` from opset ``since`` on.

    One function may serve several schema versions whose semantics it covers alike:
    ``@kernel("", "Relu", since=(6, 13, 14))`` registers it at each of them.

    Args:
        domain: ONNX domain (``""`` for the default domain).
        op_type: operator name as the spec spells it.
        since: first opset version this kernel implements, or several such versions.
        returns_one: see :class:`KernelOptions` (as are the other keywords).
        fresh_output: the kernel returns a new array.
        inline_ufunc: the ufunc the plan may call in its place.
        float_ufunc: the ufunc it is exactly on builtin float arrays.
        inplace: its in-place variant.
        with_relu: its variant fused with a following Relu.
        channel_affine: what makes it a per-channel affine map (BatchNormalization).
        absorb_affine: how a following per-channel affine map folds into its constants.
        with_epilogue: its variant with an activation and a residual fused.
        epilogue: what ``with_epilogue`` calls it when it follows such a kernel.
        float_shape: its result's shape on builtin float arrays.
        zero_pad: the pads when it places its input in zeros (Pad).
        sums_inputs: it is the element-wise sum of its inputs (Sum).
        shape_values: the inputs ``float_shape`` reads by value.
        writes_out: it takes ``out``, a buffer of the plan's pool it may write its result into.
        prepare_epilogue: its ``with_epilogue`` decided at plan time for constant weights.
        reads_only_shape: its result depends on its input's shape alone.

    Returns:
        A decorator that registers the function and returns it unchanged.
    """
    versions = (since,) if isinstance(since, int) else tuple(since)
    options = KernelOptions(
        returns_one, fresh_output, inline_ufunc, float_ufunc, inplace, with_relu, channel_affine, absorb_affine,
        with_epilogue, epilogue, float_shape, zero_pad, sums_inputs, shape_values, writes_out, prepare_epilogue,
        reads_only_shape,
    )  # fmt: skip
    if options == NO_OPTIONS:
        options = NO_OPTIONS

    def register(fn: Kernel) -> Kernel:
        params = inspect.signature(fn).parameters.values()
        attrs = _attribute_names(params, writes_out)
        wants = any(p.name == "_num_outputs" for p in params)
        key = normalise_domain(domain)
        for v in versions:
            KERNELS.register(key, op_type, KernelInfo(key, op_type, v, fn, attrs, wants, options), since=v)
        return fn

    return register


def _attribute_names(params: Iterable[inspect.Parameter], writes_out: bool) -> frozenset[str]:
    """A kernel's keyword-only parameters: the node's attributes, but ``_...`` and a pool's ``out``."""
    keyword = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
    return frozenset(n for n in keyword if not n.startswith("_") and not (writes_out and n == "out"))


def lookup_kernel(domain: str, op_type: str, opset: int) -> KernelInfo | None:
    """Returns the newest kernel whose ``since`` is not above ``opset``, or None."""
    return KERNELS.lookup(domain, op_type, opset)


def registered_kernels() -> dict[tuple[str, str], list[int]]:
    """Maps every registered ``(domain, op_type)`` to its ``since`` versions."""
    return {key: [since for since, _ in KERNELS.versions(*key)] for key in KERNELS.ops()}
