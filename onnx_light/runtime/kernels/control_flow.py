"""If, Loop and Scan: kernels whose attributes are compiled subgraph plans.

Values a subgraph reads from enclosing scopes arrive after the node's own inputs,
named by ``_captured`` (the compiler adds them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._registry import kernel
from . import recurrent_sweep


def _run(plan: Any, feeds: list[Any], scope: dict[str, Any]) -> list[Any]:
    from .._plan import run_plan  # the plan module imports the kernels; import late

    return run_plan(plan, feeds, scope)


def _empty(body: Any, k: int) -> np.ndarray:
    """Scan output ``k`` of a body that never ran: zero iterations of the element type and
    element shape the body declares for output ``k`` (float32, rank 1 when it declares none)."""
    types = getattr(body, "output_types", None) or []
    dtype, shape = types[k] if k < len(types) else (None, None)
    return np.zeros((0, *(shape or ())), dtype=dtype or np.float32)


def _builtin_dtype(value: Any) -> Any:
    """``value`` as a view of numpy's builtin float dtype when its dtype is an equal copy.

    Arrays made from tensor bytes may carry an equal but distinct ``dtype`` object; a body
    plan typed by its declared inputs checks the dtype by identity and would run its untyped
    (slower) twin at every step.
    """
    if value.__class__ is np.ndarray and value.dtype.kind == "f" and value.dtype.isnative:
        builtin = np.dtype(value.dtype.char)
        if value.dtype is not builtin and value.dtype == builtin and not value.dtype.metadata:
            return value.view(builtin)
    return value


def _split_scope(args: tuple[Any, ...], names: tuple[str, ...]) -> tuple[list[Any], dict[str, Any]]:
    """The node's own inputs, and the captured outer values by name."""
    if not names:
        return list(args), {}
    own = len(args) - len(names)
    return list(args[:own]), dict(zip(names, args[own:]))


@kernel("", "If", since=1)
def if_(*args: Any, then_branch: Any, else_branch: Any, _captured: tuple[str, ...] = ()) -> tuple[Any, ...]:
    """Runs ``then_branch`` when the scalar condition is true, else ``else_branch``."""
    own, scope = _split_scope(args, _captured)
    cond = np.asarray(own[0])
    if cond.size != 1:
        raise ValueError(f"If condition must hold one element, got shape {cond.shape}")
    branch = then_branch if bool(cond.reshape(-1)[0]) else else_branch
    return tuple(_run(branch, [], scope))


@kernel("", "Loop", since=1)
def loop(*args: Any, body: Any, _captured: tuple[str, ...] = ()) -> tuple[Any, ...]:
    """``for i in range(M) while cond``: carries state, stacks scan outputs along axis 0."""
    own, scope = _split_scope(args, _captured)
    trip, cond, carried = own[0], own[1], list(own[2:])
    max_trip = None if trip is None else int(np.asarray(trip).reshape(-1)[0])
    keep_going = True if cond is None else bool(np.asarray(cond).reshape(-1)[0])
    n_carried = len(carried)
    scans: list[list[Any]] | None = None
    i = 0
    while keep_going and (max_trip is None or i < max_trip):
        outs = _run(body, [np.array(i, dtype=np.int64), np.array(keep_going), *carried], scope)
        keep_going = bool(np.asarray(outs[0]).reshape(-1)[0])
        carried = outs[1 : 1 + n_carried]
        per_iter = outs[1 + n_carried :]
        if scans is None:
            scans = [[] for _ in per_iter]
        for acc, v in zip(scans, per_iter):
            acc.append(v)
        i += 1
    n_scan = len(body.output_slots) - 1 - n_carried
    if scans is None:
        # zero iterations: empty scan outputs of the declared element type and shape
        stacked = [_empty(body, 1 + n_carried + k) for k in range(n_scan)]
    else:
        stacked = [_stacked(k, acc) for k, acc in enumerate(scans)]
    return (*carried, *stacked)


def _stacked(k: int, acc: list[Any]) -> np.ndarray:
    """Loop scan output ``k``'s per-iteration values stacked along a new axis 0."""
    try:
        return np.stack(acc)
    except ValueError:  # numpy would only say "all input arrays must have the same shape"
        changed = next((t for t, v in enumerate(acc) if np.shape(v) != np.shape(acc[0])), None)
        if changed is None:
            raise
        raise ValueError(
            f"Loop scan output {k} has shape {list(np.shape(acc[changed]))} at iteration {changed},"
            f" {list(np.shape(acc[0]))} before: a scan output keeps one shape (a gradient or tangent"
            " graph tapes each iteration's carried values as scan outputs, so their shapes must not change)"
        ) from None


@kernel("", "Scan", since=9)
def scan(
    *args: Any,
    body: Any,
    num_scan_inputs: int,
    scan_input_axes: list[int] | None = None,
    scan_input_directions: list[int] | None = None,
    scan_output_axes: list[int] | None = None,
    scan_output_directions: list[int] | None = None,
    _captured: tuple[str, ...] = (),
) -> tuple[Any, ...]:
    """Iterates ``body`` over slices of the scan inputs, carrying state.

    The two Scans of the direct LSTM backward (its cell state and its reverse sweep, recognised
    node by node by ``recurrent_sweep``) run in one call each; every other body step by step.
    """
    own, scope = _split_scope(args, _captured)
    n_state = len(own) - num_scan_inputs
    state, xs = [_builtin_dtype(v) for v in own[:n_state]], [_builtin_dtype(x) for x in own[n_state:]]
    layout = (scan_input_axes, scan_input_directions, scan_output_axes, scan_output_directions)
    swept = recurrent_sweep.run(body, state, xs, scope, layout)  # the direct LSTM backward's body
    if swept is not None:
        return swept
    in_axes = scan_input_axes or [0] * num_scan_inputs
    in_dirs = scan_input_directions or [0] * num_scan_inputs
    xs = [np.moveaxis(x, a % x.ndim, 0) for x, a in zip(xs, in_axes)]
    xs = [x[::-1] if d else x for x, d in zip(xs, in_dirs)]
    steps = xs[0].shape[0] if xs else 0
    n_out = len(body.output_slots) - n_state
    from .._plan import run_plan, specialise_to_scope  # the plan module imports the kernels; import late

    if scope and not body.scope_specialised:
        specialise_to_scope(body, scope)

    # the body's plan is compiled once (with the node); per step only the feeds list is built and
    # each scan output slice is written into its stacked buffer (allocated at the first step) where
    # it belongs: at its axis and in its direction, so the results are contiguous (no reversed or
    # moved view that the next node would have to copy)
    out_axes = scan_output_axes or [0] * n_out
    out_dirs = scan_output_directions or [0] * n_out
    stacks: list[Any] = [None] * n_out
    slots: list[Any] = [None] * n_out  # each stack seen with its scan axis first
    for t in range(steps):
        outs = run_plan(body, [*state, *[x[t] for x in xs]], scope)
        state = outs[:n_state]
        for k in range(n_out):
            v = np.asarray(outs[n_state + k])
            if t == 0:
                axis = out_axes[k] % (v.ndim + 1)
                shape = (*v.shape[:axis], steps, *v.shape[axis:])
                stacks[k] = np.empty(shape, dtype=v.dtype)
                slots[k] = np.moveaxis(stacks[k], axis, 0)
            elif v.shape != slots[k].shape[1:]:
                before = list(slots[k].shape[1:])
                raise ValueError(f"Scan output {k} has shape {list(v.shape)} at step {t}, {before} before")
            slots[k][steps - 1 - t if out_dirs[k] else t] = v
    if not steps:
        for k in range(n_out):
            empty = _empty(body, n_state + k)
            stacks[k] = np.moveaxis(empty, 0, out_axes[k] % empty.ndim) if empty.ndim else empty
    return (*state, *stacks)


@kernel("", "Scan", since=8)
def scan_8(
    *args: Any,
    body: Any,
    num_scan_inputs: int,
    directions: list[int] | None = None,
    _captured: tuple[str, ...] = (),
) -> tuple[Any, ...]:
    """Scan-8: like Scan-9 per batch entry; axis 0 is the batch, axis 1 is scanned."""
    own, scope = _split_scope(args, _captured)
    seq_lens, rest = own[0], own[1:]
    n_state = len(rest) - num_scan_inputs
    batch = int(np.asarray(rest[0]).shape[0])
    if seq_lens is not None:
        lens = np.asarray(seq_lens).reshape(-1)
        full = np.asarray(rest[n_state]).shape[1] if num_scan_inputs else 0
        if not (lens == full).all():
            raise NotImplementedError(f"Scan-8 with ragged sequence_lens {lens.tolist()} (all must be {full})")
    names = tuple(scope)
    per_batch = [
        scan(
            *[np.asarray(v)[b] for v in rest],
            *scope.values(),
            body=body,
            num_scan_inputs=num_scan_inputs,
            scan_input_directions=directions,
            _captured=names,
        )
        for b in range(batch)
    ]
    return tuple(np.stack([outs[k] for outs in per_batch]) for k in range(len(per_batch[0])))
