"""RNN, GRU and LSTM lowered to standard ops: one MatMul projection and one Scan per direction.

The cell equations are the spec's (gates iofc for LSTM, zrh for GRU); activations
become their ONNX ops (Affine and ScaledTanh as Mul/Add), ``clip`` a Clip on every
activation's input (not LSTM's h, which acts on the cell state), ``sequence_lens`` a
per-step mask (a padded step keeps the state and outputs zeros) and, for the reverse
direction, a reordering of each entry's valid steps (GatherElements, its own inverse).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...onnx_core import GraphProto, NodeProto, helper
from ...onnx_core.gradient import GradContext

__all__ = ["lower_recurrent", "tape_from_outputs"]

#: activation name (lower case) -> (ONNX op or None, number of parameters, default alpha, beta)
_ACTS: dict[str, tuple[str | None, int, float, float]] = {
    "relu": ("Relu", 0, 0.0, 0.0),
    "tanh": ("Tanh", 0, 0.0, 0.0),
    "sigmoid": ("Sigmoid", 0, 0.0, 0.0),
    "affine": (None, 2, 0.0, 0.0),
    "leakyrelu": ("LeakyRelu", 1, 0.01, 0.0),
    "thresholdedrelu": ("ThresholdedRelu", 1, 1.0, 0.0),
    "scaledtanh": (None, 2, 0.0, 0.0),
    "hardsigmoid": ("HardSigmoid", 2, 0.2, 0.5),
    "elu": ("Elu", 1, 1.0, 0.0),
    "softsign": ("Softsign", 0, 0.0, 0.0),
    "softplus": ("Softplus", 0, 0.0, 0.0),
}
_DEFAULTS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


class _Nodes:
    """A node list whose values get fresh names of the outer pass."""

    def __init__(self, ctx: GradContext, dtype: int) -> None:
        self.ctx, self.dtype = ctx, dtype
        self.nodes: list[NodeProto] = []
        #: the types of values inference cannot follow (Scan's outputs)
        self.infos: list[Any] = []
        #: the batch dimension (int, or a symbol every value of that size shares) and the steps
        self.batch: int | str = ctx.fresh_name("rnn_batch")
        self.steps: int | str | None = None
        #: per Scan of one state and no mask: (its inputs, direction index or None for both, reversed,
        #: its initial state), how ``tape_from_outputs`` rebuilds its results from the node's outputs
        self.tapes: list[tuple[tuple[str, ...], int | None, bool, str]] = []

    def op(self, op_type: str, *inputs: str, **attrs: Any) -> str:
        name = self.ctx.fresh_name(f"rnn_{op_type}")
        self.nodes.append(helper.make_node(op_type, list(inputs), [name], **attrs))
        return name

    def const(self, value: Any, dtype: int | None = None) -> str:
        dt = dtype or self.dtype
        arr = np.asarray(value, helper.tensor_dtype_to_np_dtype(dt))
        return self.op("Constant", value=helper.make_tensor("c", dt, arr.shape, arr.tobytes(), raw=True))

    def ints(self, *values: int) -> str:
        return self.const(list(values), 7)


def _activations(ctx: GradContext, n_dirs: int) -> list[tuple[str, float, float]]:
    names = ctx.attr("activations") or list(_DEFAULTS[ctx.node.op_type]) * n_dirs
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
    alphas, betas = list(ctx.attr("activation_alpha") or ()), list(ctx.attr("activation_beta") or ())
    out = []
    for name in names:
        key = name.lower()
        if key not in _ACTS:
            raise ctx.error(f"activation {name!r} is not one of {sorted(_ACTS)}")
        _, n_params, a, b = _ACTS[key]
        if n_params >= 1 and alphas:
            a = float(alphas.pop(0))
        if n_params == 2 and betas:
            b = float(betas.pop(0))
        out.append((key, a, b))
    return out


def _act(g: _Nodes, act: tuple[str, float, float], x: str, clip: float | None) -> str:
    key, a, b = act
    if clip is not None:
        x = g.op("Clip", x, g.const(-clip), g.const(clip))
    op, n_params, _, _ = _ACTS[key]
    if key == "affine":
        return g.op("Add", g.op("Mul", x, g.const(a)), g.const(b))
    if key == "scaledtanh":
        return g.op("Mul", g.op("Tanh", g.op("Mul", x, g.const(b))), g.const(a))
    assert op is not None
    params = {"alpha": a} if n_params >= 1 else {}
    if n_params == 2:
        params["beta"] = b
    return g.op(op, x, **params)


def _cols(g: _Nodes, v: str, start: int, stop: int, axis: int = -1) -> str:
    return g.op("Slice", v, g.ints(start), g.ints(stop), g.ints(axis))


def _split(g: _Nodes, v: str, sizes: list[int]) -> list[str]:
    """``v`` cut along its last axis into pieces of ``sizes``: one Split (its gradient is one
    Concat; Slices would cost a Pad each and a Sum, per step in the reverse body)."""
    outs = [g.ctx.fresh_name("rnn_Split") for _ in sizes]
    g.nodes.append(helper.make_node("Split", [v, g.ints(*sizes)], outs, axis=-1))
    return outs


def _cell(
    g: _Nodes, kind: str, hid: int, acts: list[tuple[str, float, float]], cap: dict[str, str], ctx: GradContext
) -> tuple[list[str], list[str], str]:
    """The body's nodes: (state inputs, state outputs, scan input xt); returns names.

    ``cap`` holds the captured per-direction weights, already cut outside the body: ``Rt``
    (RNN, LSTM) or ``Rt_zr``, ``Rt_h`` and ``Rb_zr``, ``Rb_h`` (GRU), and ``P_i``, ``P_o``,
    ``P_f`` (LSTM peepholes).
    """
    clip = ctx.attr("clip")
    h = g.ctx.fresh_name("h")
    xt = g.ctx.fresh_name("xt")
    if kind == "RNN":
        return [h], [_act(g, acts[0], g.op("Add", xt, g.op("MatMul", h, cap["Rt"])), clip)], xt
    if kind == "GRU":
        x_zr, x_h = _split(g, xt, [2 * hid, hid])
        rec_zr = g.op("MatMul", h, cap["Rt_zr"])
        if "Rb_zr" in cap:
            rec_zr = g.op("Add", rec_zr, cap["Rb_zr"])
        # f acts element-wise: once on z and r together
        z, r = _split(g, _act(g, acts[0], g.op("Add", x_zr, rec_zr), clip), [hid, hid])
        if ctx.attr("linear_before_reset", 0):
            hr = g.op("MatMul", h, cap["Rt_h"])
            if "Rb_h" in cap:
                hr = g.op("Add", hr, cap["Rb_h"])
            inner = g.op("Mul", r, hr)
        else:
            inner = g.op("MatMul", g.op("Mul", r, h), cap["Rt_h"])
            if "Rb_h" in cap:
                inner = g.op("Add", inner, cap["Rb_h"])
        cand = _act(g, acts[1], g.op("Add", x_h, inner), clip)
        # (1 - z) * cand + z * h = cand + z * (h - cand)
        return [h], [g.op("Add", cand, g.op("Mul", z, g.op("Sub", h, cand)))], xt
    c = g.ctx.fresh_name("c")
    gates = g.op("Add", xt, g.op("MatMul", h, cap["Rt"]))
    if "P_i" not in cap and not ctx.attr("input_forget", 0):
        # f acts element-wise: once on i, o and f together (one activation gradient per step, not three)
        pre_iof, pre_c = _split(g, gates, [3 * hid, hid])
        i, o, f = _split(g, _act(g, acts[0], pre_iof, clip), [hid] * 3)
        c_new = g.op("Add", g.op("Mul", f, c), g.op("Mul", i, _act(g, acts[1], pre_c, clip)))
        return [h, c], [g.op("Mul", o, _act(g, acts[2], c_new, None)), c_new], xt
    pre_i, pre_o, pre_f, pre_c = _split(g, gates, [hid] * 4)
    if "P_i" in cap:
        pre_i = g.op("Add", pre_i, g.op("Mul", cap["P_i"], c))
        pre_f = g.op("Add", pre_f, g.op("Mul", cap["P_f"], c))
    i = _act(g, acts[0], pre_i, clip)
    f = g.op("Sub", g.const(1.0), i) if ctx.attr("input_forget", 0) else _act(g, acts[0], pre_f, clip)
    cand = _act(g, acts[1], pre_c, clip)
    c_new = g.op("Add", g.op("Mul", f, c), g.op("Mul", i, cand))
    if "P_o" in cap:
        pre_o = g.op("Add", pre_o, g.op("Mul", cap["P_o"], c_new))
    o = _act(g, acts[0], pre_o, clip)
    h_new = g.op("Mul", o, _act(g, acts[2], c_new, None))
    return [h, c], [h_new, c_new], xt


def lower_recurrent(
    ctx: GradContext, tapes: list[Any] | None = None
) -> tuple[list[NodeProto], list[str], list[str], list[Any]]:
    """Nodes computing the node's outputs from its inputs.

    Args:
        ctx: the recurrent node's context.
        tapes: when given, receives the recipes of ``tape_from_outputs`` (Scans of one state
            without a mask, ``layout`` 0).

    Returns:
        The nodes, the names of Y, Y_h, Y_c ("" for Y_c of RNN and GRU), the node's eight
        inputs ("" where absent) and the types of the values inference cannot follow.
    """
    kind = ctx.node.op_type
    x, w = ctx.input(0), ctx.input(1)
    dtype = ctx.dtype(x) or ctx.dtype(w) or 1
    g = _Nodes(ctx, dtype)
    layout = int(ctx.attr("layout", 0))
    direction = ctx.attr("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else str(direction)
    reverse = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[direction]
    w_shape = ctx.shape(w)
    hid = int(ctx.attr("hidden_size") or (w_shape[1] // _GATES[kind] if w_shape and w_shape[1] else 0))
    if not hid:
        raise ctx.error("needs hidden_size (the attribute, or a static shape of W)")
    acts = _activations(ctx, len(reverse))
    n_acts = len(_DEFAULTS[kind])
    x_shape = ctx.shape(x)
    if x_shape is not None and len(x_shape) == 3:
        # a symbol shared by every body value of batch size: the pass then sees equal shapes
        # (no run-time unbroadcasting in the reverse body, ~60% of its nodes)
        steps, batch = (x_shape[1], x_shape[0]) if layout else (x_shape[0], x_shape[1])
        g.batch = batch if batch is not None else ctx.fresh_name("rnn_batch")
        g.steps = steps
    xs = g.op("Transpose", x, perm=[1, 0, 2]) if layout else x
    h0_all = ctx.input(5)
    c0_all = ctx.input(6) if kind == "LSTM" else ""
    if layout:
        h0_all = g.op("Transpose", h0_all, perm=[1, 0, 2]) if h0_all else ""
        c0_all = g.op("Transpose", c0_all, perm=[1, 0, 2]) if c0_all else ""
    mask, order = _masks(g, xs, ctx.input(4), any(reverse))
    if len(reverse) == 2 and acts[:n_acts] == acts[n_acts:]:
        y_all, states = _both_directions(g, ctx, kind, hid, acts[:n_acts], xs, h0_all, c0_all, mask, order)
        return _finish(g, ctx, layout, y_all, states[0], states[1] if kind == "LSTM" else "", tapes)
    ys, hs, cs = [], [], []
    for d, rev in enumerate(reverse):
        y, hc = _direction(
            g, ctx, kind, hid, d, rev, acts[d * n_acts : (d + 1) * n_acts], xs, h0_all, c0_all, mask, order
        )
        ys.append(g.op("Unsqueeze", y, g.ints(1)))
        hs.append(g.op("Unsqueeze", hc[0], g.ints(0)))
        if kind == "LSTM":
            cs.append(g.op("Unsqueeze", hc[1], g.ints(0)))
    y_all = g.op("Concat", *ys, axis=1)
    h_all = g.op("Concat", *hs, axis=0)
    c_all = g.op("Concat", *cs, axis=0) if cs else ""
    return _finish(g, ctx, layout, y_all, h_all, c_all, tapes)


def _finish(
    g: _Nodes, ctx: GradContext, layout: int, y_all: str, h_all: str, c_all: str, tapes: list[Any] | None
) -> tuple[list[NodeProto], list[str], list[str], list[Any]]:
    """What ``lower_recurrent`` returns, from Y [T, D, B, H] and the states [D, B, H]."""
    if tapes is not None and not layout and not ctx.input(4):
        tapes += g.tapes
    if layout:
        y_all = g.op("Transpose", y_all, perm=[2, 0, 1, 3])
        h_all = g.op("Transpose", h_all, perm=[1, 0, 2])
        c_all = g.op("Transpose", c_all, perm=[1, 0, 2]) if c_all else ""
    return g.nodes, [y_all, h_all, c_all], [ctx.input(i) for i in range(8)], g.infos


def _masks(g: _Nodes, xs: str, lens: str, reverse: bool) -> tuple[str, str]:
    """The float mask [T, B, 1] of valid steps and the reversal index [T, B, 1] ("" without lens)."""
    if not lens:
        return "", ""
    shape = g.op("Shape", xs)
    steps = g.op("Squeeze", _cols(g, shape, 0, 1, 0), g.ints(0))
    t = g.op("Unsqueeze", g.op("Range", g.const(0, 7), steps, g.const(1, 7)), g.ints(1))
    lens64 = g.op("Unsqueeze", g.op("Cast", lens, to=7), g.ints(0))
    active = g.op("Less", t, lens64)
    mask = g.op("Unsqueeze", g.op("Cast", active, to=g.dtype), g.ints(2))
    order = ""
    if reverse:
        back = g.op("Sub", g.op("Sub", lens64, g.const(1, 7)), t)
        order = g.op("Unsqueeze", g.op("Where", active, back, t), g.ints(2))
    return mask, order


def _reorder(g: _Nodes, v: str, order: str) -> str:
    """Each entry's valid steps reversed along axis 0 (the index is its own inverse)."""
    index = g.op("Expand", order, g.op("Shape", v))
    return g.op("GatherElements", v, index, axis=0)


def _flip(g: _Nodes, v: str) -> str:
    """``v`` backwards along axis 0: a Slice with step -1 (its gradient is the same Slice, where
    a Gather's would be a scatter-add)."""
    return g.op("Slice", v, g.ints(-1), g.ints(-(2**63)), g.ints(0), g.ints(-1))


def _both_directions(
    g: _Nodes,
    ctx: GradContext,
    kind: str,
    hid: int,
    acts: list[tuple[str, float, float]],
    xs: str,
    h0_all: str,
    c0_all: str,
    mask: str,
    order: str,
) -> tuple[str, list[str]]:
    """Both directions (with the same activations) in one Scan whose states are [2, B, H]: half the
    steps' nodes of two Scans, forward and backward. X is stacked with its reverse-order copy
    ([T, 2, B, I]); returns Y [T, 2, B, H] in time order and the final states [2, B, H]."""
    n_g = _GATES[kind]
    x_rev = _reorder(g, xs, order) if order else _flip(g, xs)
    # [2, T, B, I] as [2, T*B, I]: the projection is one GEMM per direction, and so are the
    # gradients of W and X (a MatMul broadcast over T would be T GEMMs and a ReduceSum)
    x2 = g.op("Concat", g.op("Unsqueeze", xs, g.ints(0)), g.op("Unsqueeze", x_rev, g.ints(0)), axis=0)
    shape = g.op("Shape", x2)
    flat = g.op("Reshape", x2, g.op("Concat", g.ints(2, -1), _cols(g, shape, 3, 4, 0), axis=0))
    proj = g.op("MatMul", flat, g.op("Transpose", ctx.input(1), perm=[0, 2, 1]))  # [2, T*B, G*H]
    rt = g.op("Transpose", ctx.input(2), perm=[0, 2, 1])  # [2, H, G*H]
    cap = {"Rt": rt}
    if kind == "GRU":
        cap = dict(zip(("Rt_zr", "Rt_h"), _split(g, rt, [2 * hid, hid])))
    if ctx.input(3):
        b = g.op("Unsqueeze", ctx.input(3), g.ints(1))  # [2, 1, 2*G*H]
        wb, rb = _split(g, b, [n_g * hid, n_g * hid])
        proj = g.op("Add", proj, wb)
        if kind == "GRU":
            cap["Rb_zr"], cap["Rb_h"] = _split(g, rb, [2 * hid, hid])
        else:
            proj = g.op("Add", proj, rb)
    proj = g.op("Reshape", proj, g.op("Concat", _cols(g, shape, 0, 3, 0), g.ints(n_g * hid), axis=0))  # [2, T, B, G*H]
    if kind == "LSTM" and ctx.input(7):
        p = g.op("Unsqueeze", ctx.input(7), g.ints(1))  # [2, 1, 3H]
        cap["P_i"], cap["P_o"], cap["P_f"] = (_cols(g, p, k * hid, (k + 1) * hid) for k in range(3))
    batch = _cols(g, g.op("Shape", xs), 1, 2, 0)
    zeros = g.op("ConstantOfShape", g.op("Concat", g.ints(2), batch, g.ints(hid), axis=0), value=_zero(g.dtype))
    init = [h0_all or zeros]
    if kind == "LSTM":
        init.append(c0_all or zeros)
    results = _scan(g, ctx, kind, hid, acts, cap, init, proj, mask, False, [2], (None, False), 1)
    y_f, y_b = (ctx.fresh_name("rnn_Split") for _ in range(2))
    g.nodes.append(helper.make_node("Split", [results[-1], g.ints(1, 1)], [y_f, y_b], axis=1))
    y_b = g.op("Squeeze", y_b, g.ints(1))
    y_b = _reorder(g, y_b, order) if order else _flip(g, y_b)
    return g.op("Concat", y_f, g.op("Unsqueeze", y_b, g.ints(1)), axis=1), results[:-1]


def _direction(
    g: _Nodes,
    ctx: GradContext,
    kind: str,
    hid: int,
    d: int,
    rev: bool,
    acts: list[tuple[str, float, float]],
    xs: str,
    h0_all: str,
    c0_all: str,
    mask: str,
    order: str,
) -> tuple[str, list[str]]:
    """One direction's Scan: returns its Y [T, B, H] and final states."""
    di = g.const(d, 7)
    n_g = _GATES[kind]
    wd = g.op("Gather", ctx.input(1), di, axis=0)
    proj = g.op("MatMul", xs, g.op("Transpose", wd, perm=[1, 0]))
    rt = g.op("Transpose", g.op("Gather", ctx.input(2), di, axis=0), perm=[1, 0])
    cap = {"Rt": rt}
    if kind == "GRU":
        cap = dict(zip(("Rt_zr", "Rt_h"), _split(g, rt, [2 * hid, hid])))
    if ctx.input(3):
        bd = g.op("Gather", ctx.input(3), di, axis=0)
        wb, rb = _split(g, bd, [n_g * hid, n_g * hid])
        proj = g.op("Add", proj, wb)
        if kind == "GRU":
            cap["Rb_zr"], cap["Rb_h"] = _split(g, rb, [2 * hid, hid])
        else:
            proj = g.op("Add", proj, rb)
    if kind == "LSTM" and ctx.input(7):
        p = g.op("Gather", ctx.input(7), di, axis=0)
        cap["P_i"], cap["P_o"], cap["P_f"] = (_cols(g, p, k * hid, (k + 1) * hid) for k in range(3))
    if rev and order:
        proj = _reorder(g, proj, order)
    batch = _cols(g, g.op("Shape", xs), 1, 2, 0)
    zeros = g.op("ConstantOfShape", g.op("Concat", batch, g.ints(hid), axis=0), value=_zero(g.dtype))
    init = [g.op("Gather", h0_all, di, axis=0) if h0_all else zeros]
    if kind == "LSTM":
        init.append(g.op("Gather", c0_all, di, axis=0) if c0_all else zeros)
    results = _scan(g, ctx, kind, hid, acts, cap, init, proj, mask, rev and not order, [], (d, rev))
    y = results[-1]
    if rev and order:
        y = _reorder(g, y, order)
    return y, results[:-1]


def _scan(
    g: _Nodes,
    ctx: GradContext,
    kind: str,
    hid: int,
    acts: list[tuple[str, float, float]],
    cap: dict[str, str],
    init: list[str],
    proj: str,
    mask: str,
    flip: bool,
    lead: list[int],
    where: tuple[int | None, bool],
    axis: int = 0,
) -> list[str]:
    """The Scan of the cell over ``proj`` (and ``mask``): its final states and stacked Y.
    ``lead``: the leading dims of the states ([2] for both directions in one Scan); ``where``:
    the direction it computes (None: both) and whether it runs backwards in time; ``axis``: the
    time axis of ``proj`` (the mask's is 0)."""
    n_g = _GATES[kind]
    body = _Nodes(ctx, g.dtype)
    bdim = g.batch
    s_in, s_out, xt = _cell(body, kind, hid, acts, cap, ctx)
    b_inputs = [xt]
    y_t = s_out[0]
    if mask:
        mt = ctx.fresh_name("mask")
        b_inputs.append(mt)
        s_out = [body.op("Add", s, body.op("Mul", mt, body.op("Sub", o, s))) for s, o in zip(s_in, s_out)]
        y_t = body.op("Mul", mt, y_t)
    y_t = body.op("Identity", y_t)
    infos = [helper.make_tensor_value_info(n, g.dtype, [*lead, bdim, hid]) for n in s_in]
    infos += [helper.make_tensor_value_info(xt, g.dtype, [*lead, bdim, n_g * hid])]
    if mask:
        infos.append(helper.make_tensor_value_info(b_inputs[1], g.dtype, [bdim, 1]))
    outs = [helper.make_tensor_value_info(n, g.dtype, [*lead, bdim, hid]) for n in [*s_out, y_t]]
    graph: GraphProto = helper.make_graph(body.nodes, f"{kind.lower()}_cell", infos, outs)
    scanned = [proj, mask] if mask else [proj]
    results = [ctx.fresh_name("rnn_scan") for _ in range(len(init) + 1)]
    if len(init) == 1 and not mask:
        g.tapes.append(((*init, *scanned), where[0], where[1], init[0]))
    g.nodes.append(
        helper.make_node(
            "Scan",
            [*init, *scanned],
            results,
            body=graph,
            num_scan_inputs=len(scanned),
            scan_input_axes=[axis, 0][: len(scanned)],
            scan_input_directions=[int(flip)] * len(scanned),
            scan_output_directions=[int(flip)],
        )
    )
    g.infos += [helper.make_tensor_value_info(n, g.dtype, [*lead, bdim, hid]) for n in results[:-1]]
    g.infos.append(helper.make_tensor_value_info(results[-1], g.dtype, [g.steps, *lead, bdim, hid]))
    return results


def _zero(dtype: int) -> Any:
    arr = np.zeros((1,), helper.tensor_dtype_to_np_dtype(dtype))
    return helper.make_tensor("zero", dtype, [1], arr.tobytes(), raw=True)


def tape_from_outputs(
    ctx: GradContext, nodes: Sequence[NodeProto], tapes: list[Any], rename: dict[str, str]
) -> list[NodeProto]:
    """``nodes`` with each lowered Scan of ``tapes`` (the forward one and its tape, which have its
    inputs) replaced by slices of the node's own outputs Y and Y_h.

    With one state (RNN, GRU) and no mask, the state after step t is Y at that step, so the
    tape of states entering each step is the initial state then Y without its last step (in
    the Scan's iteration order): the recurrence is not run again beside the node, whose kernel
    computes it anyway. Without Y or Y_h among the node's outputs, ``nodes`` are returned unchanged.
    ``rename``: the lowered names to those in ``nodes`` (the pass renames what it re-emits).
    """
    y, y_h = ctx.output(0), ctx.output(1)
    if not (tapes and y and y_h):
        return list(nodes)
    g = _Nodes(ctx, ctx.dtype(ctx.input(0)) or 1)
    by_inputs = {tuple(rename.get(i, i) for i in recipe[0]): recipe for recipe in tapes}
    out: list[NodeProto] = []
    for node in nodes:
        recipe = by_inputs.get(tuple(node.input)) if node.op_type == "Scan" else None
        if recipe is None or len(node.output) not in (2, 3):
            out.append(node)
            continue
        _, d, rev, init = recipe
        init = rename.get(init, init)
        del g.nodes[:]
        if d is None:  # both directions, the second in reverse time order
            y_f = _cols(g, y, 0, 1, 1)
            y_scan = g.op("Concat", y_f, _flip(g, _cols(g, y, 1, 2, 1)), axis=1)
            h_final, in_order = y_h, y_scan
        else:
            y_scan = g.op("Squeeze", _cols(g, y, d, d + 1, 1), g.ints(1))
            h_final = g.op("Squeeze", _cols(g, y_h, d, d + 1, 0), g.ints(0))
            in_order = _flip(g, y_scan) if rev else y_scan
        values = [h_final, y_scan]
        if len(node.output) == 3:
            # the state entering each step: the initial one, then every step's but the last
            states = g.op("Concat", g.op("Unsqueeze", init, g.ints(0)), in_order, axis=0)
            values.append(_cols(g, states, 0, -1, 0))
        out += g.nodes
        out += [helper.make_node("Identity", [v], [o]) for v, o in zip(values, node.output) if o]
    return out
