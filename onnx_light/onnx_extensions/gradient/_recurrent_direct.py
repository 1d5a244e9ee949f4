"""LSTM and GRU backward written out directly, for the common attributes: no lowering run
through the pass, and a reverse Scan holding only the step's element-wise derivatives and one
GEMM against R.

Applies to the spec's default activations (LSTM Sigmoid, Tanh, Tanh; GRU Sigmoid, Tanh),
without ``clip``, ``sequence_lens``, peepholes or ``input_forget``, when the node outputs Y
(the tape of h) and its inputs are distinct names, at opset 13 or later; anything else goes
through ``_recurrent_lowering`` and the pass (``control_flow.recurrent_grad``).

Directions are stacked on a leading axis D, each in its scan order s (the reverse direction's
time flipped); ``h_{s-1}`` comes from Y (the node's own output), so every gate of every step
is computed at once before the reverse loop (two GEMMs per direction over T·B rows, x W^T and
h_{s-1} R^T):

LSTM (gates i, o, f, g):
    pre = x W^T + h_{s-1} R^T + Wb + Rb;  i, o, f = σ(pre_iof);  g = tanh(pre_g)
    c_s = f c_{s-1} + i g   (a Scan of two element-wise nodes: the only forward recurrence left;
                             it scans out c_s and c_{s-1})
    reverse, from dh = dY_h, dc = dY_c, each step from its own gates and cell states (so the
    runtime can run the whole sweep in one native call, ``runtime/kernels/recurrent_sweep.py``;
    onnxruntime runs the same body step by step):
        dh_s = dh + dY_s;  dc_s = dc + dh_s o (1 - tanh² c_s)
        dpre_s = [dc_s, dh_s, dc_s, dc_s] * K_s,  K = [σ'(i) g, σ'(o) tanh c_s, σ'(f) c_{s-1}, (1 - g²) i]
        dh = dpre_s R,  dc = dc_s f_s
GRU (gates z, r, h̃; Rb_h inside r·(...) when ``linear_before_reset``):
    zr = σ(x W_zr^T + h_{s-1} R_zr^T + Wb_zr + Rb_zr);  n = tanh(x W_h^T + Wb_h + inner)
    inner = r (h_{s-1} R_h^T + Rb_h)  (lbr)   or   (r h_{s-1}) R_h^T + Rb_h;  h_s = n + z (h_{s-1} - n)
    reverse, from dh = dY_h:  dh_s = dh + dY_s;  da = dh_s (1 - z)(1 - n²)  (pre-activation of n)
        lbr:  dpre_s = [dh_s (h_{s-1} - n) σ'(z), da L σ'(r), da r],  L = h_{s-1} R_h^T + Rb_h
              dh = dh_s z + dpre_s R   (one GEMM)
        else: e = da R_h;  dpre_zr = [dh_s (h_{s-1} - n) σ'(z), e h_{s-1} σ'(r)]
              dh = dh_s z + e r + dpre_zr R_zr   (two GEMMs)
Then dW = Σ dpre^T x, dR = Σ dpre^T [h_{s-1} or r h_{s-1}], dB = Σ dpre, dX = dpre W, each one
GEMM over all steps after the loop (no weight accumulator in the loop's state).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...onnx_core import GraphProto, NodeProto, helper
from ...onnx_core.gradient import FLOAT_TYPES, GradContext, Grads

__all__ = ["direct_grad"]

_DEFAULT_ACTS = {"LSTM": ("sigmoid", "tanh", "tanh"), "GRU": ("sigmoid", "tanh")}
_GATES = {"LSTM": 4, "GRU": 3}
_MIN = -(2**63)


def _applies(ctx: GradContext) -> bool:
    kind = ctx.node.op_type
    if kind not in _GATES or ctx.node.domain or ctx.opset < 13 or not ctx.output(0):
        return False
    if ctx.input(4) or (kind == "LSTM" and (ctx.input(7) or ctx.attr("input_forget", 0))):
        return False
    if ctx.attr("clip") is not None or ctx.dtype(ctx.input(0)) not in FLOAT_TYPES:
        return False
    present = [n for n in ctx.inputs if n]
    if len(set(present)) != len(present):
        return False
    acts = ctx.attr("activations")
    if acts:
        names = tuple((a.decode() if isinstance(a, bytes) else str(a)).lower() for a in acts)
        if names != _DEFAULT_ACTS[kind] * (len(names) // len(_DEFAULT_ACTS[kind])):
            return False
    w = ctx.shape(ctx.input(1))
    return w is not None and len(w) == 3 and isinstance(w[2], int) and bool(_hidden(ctx))


def _hidden(ctx: GradContext) -> int:
    w = ctx.shape(ctx.input(1))
    g = _GATES[ctx.node.op_type]
    return int(ctx.attr("hidden_size") or (w[1] // g if w and isinstance(w[1], int) else 0))


class _Step:
    """Builds one Scan body: value infos of its inputs and outputs, nodes with fresh names."""

    def __init__(self, ctx: GradContext, dtype: int, name: str) -> None:
        self.ctx, self.dtype, self.name = ctx, dtype, name
        self.nodes: list[NodeProto] = []
        self.inputs: list[Any] = []

    def input(self, prefix: str, shape: list[Any]) -> str:
        name = self.ctx.fresh_name(prefix)
        self.inputs.append(helper.make_tensor_value_info(name, self.dtype, shape))
        return name

    def op(self, op_type: str, *inputs: str, **attrs: Any) -> str:
        name = self.ctx.fresh_name(f"{self.name}_{op_type}")
        self.nodes.append(helper.make_node(op_type, list(inputs), [name], **attrs))
        return name

    def graph(self, outputs: list[tuple[str, list[Any]]]) -> GraphProto:
        outs = [helper.make_tensor_value_info(n, self.dtype, s) for n, s in outputs]
        # its own fresh messages: no copies (helper.make_graph copies every node)
        return GraphProto(name=self.name, node=self.nodes, input=self.inputs, output=outs)


class _Direct:
    """The shared pieces: directions stacked in scan order, flattening, the tape of h."""

    def __init__(self, ctx: GradContext) -> None:
        self.ctx, self.op = ctx, ctx.op
        self.kind = ctx.node.op_type
        self.dtype = ctx.dtype(ctx.input(0))
        self.hid = _hidden(ctx)
        self.layout = int(ctx.attr("layout", 0))
        direction = ctx.attr("direction", b"forward")
        self.direction = direction.decode() if isinstance(direction, bytes) else str(direction)
        self.d = 2 if self.direction == "bidirectional" else 1
        self.features = int((ctx.shape(ctx.input(1)) or (0, 0, 0))[2] or 0)  # static (``_applies``)
        y = ctx.shape(ctx.output(0))
        self.batch: Any = None if y is None or len(y) != 4 else (y[0] if self.layout else y[2])
        self.steps: Any = None if y is None or len(y) != 4 else (y[1] if self.layout else y[0])

    # -- layout -------------------------------------------------------------------
    def flip(self, v: str, axis: int) -> str:
        return self.op.Slice(v, self.ctx.ints([-1]), self.ctx.ints([_MIN]), self.ctx.ints([axis]), self.ctx.ints([-1]))

    def states_in(self, v: str) -> str:
        """initial_h / initial_c or a gradient of Y_h / Y_c, as [D, B, H]."""
        return self.op.Transpose(v, perm=[1, 0, 2]) if self.layout else v

    def to_scan(self, v: str) -> str:
        """[D, T, ...] with each direction in its scan order (its own inverse)."""
        if self.direction == "forward":
            return v
        if self.direction == "reverse":
            return self.flip(v, 1)
        a, b = self.op.Split(v, self.ctx.ints([1, 1]), axis=0, _outputs=2)
        return self.op.Concat(a, self.flip(b, 1), axis=0)

    def seq_in(self, v: str) -> str:
        """Y or its gradient ([T, D, B, H], layout 1 [B, T, D, H]) as [D, T, B, H] in scan order."""
        return self.to_scan(self.op.Transpose(v, perm=[2, 1, 0, 3] if self.layout else [1, 0, 2, 3]))

    def x_in(self) -> str:
        """X as [D, T, B, I] in scan order."""
        x = self.ctx.input(0)
        if self.layout:
            x = self.op.Transpose(x, perm=[1, 0, 2])
        axis0 = self.ctx.ints([0])
        if self.direction == "forward":
            return self.op.Unsqueeze(x, axis0)
        if self.direction == "reverse":
            return self.op.Unsqueeze(self.flip(x, 0), axis0)
        return self.op.Concat(self.op.Unsqueeze(x, axis0), self.op.Unsqueeze(self.flip(x, 0), axis0), axis=0)

    def x_out(self, dxs: str) -> str:
        """The gradient of X from its [D, T, B, I] scan-order gradient."""
        axis0 = self.ctx.ints([0])
        if self.direction == "forward":
            dx = self.op.Squeeze(dxs, axis0)
        elif self.direction == "reverse":
            dx = self.flip(self.op.Squeeze(dxs, axis0), 0)
        else:
            a, b = self.op.Split(dxs, self.ctx.ints([1, 1]), axis=0, _outputs=2)
            dx = self.op.Add(self.op.Squeeze(a, axis0), self.flip(self.op.Squeeze(b, axis0), 0))
        return self.op.Transpose(dx, perm=[1, 0, 2]) if self.layout else dx

    def flat(self, v: str, k: int) -> str:
        """[D, T, B, k] -> [D, T*B, k]."""
        return self.op.Reshape(v, self.ctx.ints([0, -1, k]))

    def unflat(self, v: str, k: int, like: str) -> str:
        """[D, T*B, k] -> [D, T, B, k], T and B those of ``like`` ([D, T, B, *])."""
        if isinstance(self.batch, int) and self.batch > 0:  # (a 0 in Reshape's shape copies a dim)
            return self.op.Reshape(v, self.ctx.ints([0, -1, self.batch, k]))
        lead = self.op.Gather(self.op.Shape(like), self.ctx.ints([0, 1, 2]))
        return self.op.Reshape(v, self.op.Concat(lead, self.ctx.ints([k]), axis=0), allowzero=1)  # B may be 0

    def zeros(self, like4: str) -> str:
        """Zeros [D, B, H] (``like4``: [D, T, B, H])."""
        shape = self.op.Gather(self.op.Shape(like4), self.ctx.ints([0, 2, 3]))
        zero = helper.make_tensor("zero", self.dtype, [1], np.zeros(1, helper.tensor_dtype_to_np_dtype(self.dtype)))
        return self.op.ConstantOfShape(shape, value=zero)

    def prev(self, seq4: str, init: str) -> str:
        """The state entering each step: ``init`` [D, B, H], then ``seq4`` [D, T, B, H] but its last."""
        # init joined first and the last step cut after: T steps also when T is 0 (a cut first
        # would leave init alone, one step against X's none)
        joined = self.op.Concat(self.op.Unsqueeze(init, self.ctx.ints([1])), seq4, axis=1)
        return self.op.Slice(joined, self.ctx.ints([0]), self.ctx.ints([-1]), self.ctx.ints([1]))

    def seed(self, j: int) -> str:
        """The gradient of output ``j`` ("" when it has none)."""
        grads = self.ctx.output_grads
        return (grads[j] or "") if j < len(grads) else ""

    def info(self, name: str, *dims: Any) -> None:
        self.ctx.declare(name, helper.make_tensor_value_info(name, self.dtype, list(dims)))

    def one(self) -> str:
        return self.ctx.const(1.0, dtype=self.dtype)

    def scan(self, init: list[str], xs: list[str], body: GraphProto, reverse: bool, n_out: int = 1) -> list[str]:
        """A Scan over axis 1 of ``xs`` ([D, T, ...]), its ``n_out`` scan outputs stacked on axis 1."""
        outs = self.op.Scan(
            *init,
            *xs,
            body=body,
            num_scan_inputs=len(xs),
            scan_input_axes=[1] * len(xs),
            scan_input_directions=[int(reverse)] * len(xs),
            scan_output_axes=[1] * n_out,
            scan_output_directions=[int(reverse)] * n_out,
            _outputs=len(init) + n_out,
        )
        return list(outs)

    def weight_grads(self, dpf: str, xf: str, xs: str, rhs: str | None, dqf: str = "") -> list[str | None]:
        """dX, dW, dR, dB from the flat [D, T*B, G*H] gradients of the pre-activations, ``dpf``
        for x W^T + Wb and ``dqf`` (default ``dpf``) for ``rhs`` R^T + Rb (``rhs``: h_{s-1}, or
        None when the caller computes dR)."""
        ctx, op = self.ctx, self.op
        need = [ctx.needs_grad(k) for k in range(4)]
        dqf = dqf or dpf
        dx = None
        if need[0]:
            dx = self.x_out(self.unflat(op.MatMul(dpf, ctx.input(1)), self.features, xs))
        dw = op.MatMul(op.Transpose(dpf, perm=[0, 2, 1]), xf) if need[1] else None
        dr = op.MatMul(op.Transpose(dqf, perm=[0, 2, 1]), rhs) if need[2] and rhs else None
        db = None
        if need[3] and ctx.input(3):
            s = op.ReduceSum(dpf, ctx.ints([1]), keepdims=0)
            db = op.Concat(s, op.ReduceSum(dqf, ctx.ints([1]), keepdims=0) if dqf != dpf else s, axis=-1)
        return [dx, dw, dr, db]


def direct_grad(ctx: GradContext) -> Grads | None:
    """The backward of an LSTM or GRU node written out directly (see the module docstring), or
    None when the node's attributes need the general lowering."""
    if not _applies(ctx):
        return None
    return _lstm(_Direct(ctx)) if ctx.node.op_type == "LSTM" else _gru(_Direct(ctx))


def _common(g: _Direct) -> tuple[str, str, str, str, str, str]:
    """(X in scan order [D,T,B,I], its flat form, h tape [D,T,B,H], its flat form, zeros or "",
    the projection x W^T + Wb [+ Rb]) for both kinds."""
    ctx, op, hid = g.ctx, g.op, g.hid
    n_g = _GATES[g.kind]
    xs = g.x_in()
    xf = g.flat(xs, g.features)
    hs = g.seq_in(ctx.output(0))
    absent = not ctx.input(5) or (g.kind == "LSTM" and not ctx.input(6))
    zeros = g.zeros(hs) if absent else ""
    h0 = g.states_in(ctx.input(5)) if ctx.input(5) else zeros
    hprev = g.prev(hs, h0)
    hf = g.flat(hprev, hid)
    proj = op.MatMul(xf, op.Transpose(ctx.input(1), perm=[0, 2, 1]))
    if ctx.input(3):
        wb, rb = op.Split(op.Unsqueeze(ctx.input(3), ctx.ints([1])), ctx.ints([n_g * hid] * 2), axis=-1, _outputs=2)
        if g.kind == "GRU":
            rb_zr, _ = op.Split(rb, ctx.ints([2 * hid, hid]), axis=-1, _outputs=2)
            wb = op.Add(wb, op.Pad(rb_zr, ctx.ints([0, 0, 0, 0, 0, hid])))  # Rb_h acts inside r (...)
            proj = op.Add(proj, wb)
        else:
            proj = op.Add(proj, op.Add(wb, rb))
    return xs, xf, hprev, hf, zeros, proj


def _lstm(g: _Direct) -> Grads:
    ctx, op, hid, d, b = g.ctx, g.op, g.hid, g.d, g.batch
    # x W^T and h_{s-1} R^T as two GEMMs: one over [x, h_{s-1}] [W, R]^T would copy both weights
    # into a new [D, 4H, I+H] first (and split its [dW, dR] after), megabytes at crnn's sizes
    xs, xf, hprev, hf, zeros, proj = _common(g)
    pre = op.Add(proj, op.MatMul(hf, op.Transpose(ctx.input(2), perm=[0, 2, 1])))
    pre_iof, pre_g = op.Split(pre, ctx.ints([3 * hid, hid]), axis=-1, _outputs=2)
    s, gg = op.Sigmoid(pre_iof), op.Tanh(pre_g)
    i, _, f = op.Split(s, ctx.ints([hid] * 3), axis=-1, _outputs=3)
    # the cell state: c_s = f c_{s-1} + i g, the only recurrence left in the forward; it scans
    # out c_s and c_{s-1} (the reverse loop reads both at step s)
    cell = _Step(ctx, g.dtype, "lstm_cell_state")
    c, ft, igt = (cell.input(p, [d, b, hid]) for p in ("c", "f_t", "ig_t"))
    c_new = cell.op("Add", cell.op("Mul", ft, c), igt)
    outs = [(c_new, [d, b, hid]), (cell.op("Identity", c_new), [d, b, hid]), (cell.op("Identity", c), [d, b, hid])]
    c0 = g.states_in(ctx.input(6)) if ctx.input(6) else zeros
    _, cs, cps = g.scan(
        [c0], [g.unflat(f, hid, hprev), g.unflat(op.Mul(i, gg), hid, hprev)], cell.graph(outs), False, 2
    )
    for v in (cs, cps):
        g.info(v, d, g.steps, b, hid)
    # the reverse loop: the step's derivatives from its gates and cell states, one GEMM against R
    dy = g.seed(0)
    body = _lstm_step(g, bool(dy))
    init = [g.states_in(seed) if (seed := g.seed(j)) else zeros or g.zeros(hprev) for j in (1, 2)]
    scanned = [g.seq_in(dy)] if dy else []
    scanned += [g.unflat(s, 3 * hid, hprev), g.unflat(gg, hid, hprev), cs, cps]
    dh0, dc0, dps = g.scan(init, scanned, body, True)
    g.info(dh0, d, b, hid)
    g.info(dc0, d, b, hid)
    g.info(dps, d, g.steps, b, 4 * hid)
    dx, dw, dr, db = g.weight_grads(g.flat(dps, 4 * hid), xf, xs, hf)
    dh0_out = g.states_in(dh0) if ctx.needs_grad(5) and ctx.input(5) else None
    dc0_out = g.states_in(dc0) if ctx.needs_grad(6) and ctx.input(6) else None
    return [dx, dw, dr, db, None, dh0_out, dc0_out, None]


def _lstm_step(g: _Direct, with_dy: bool) -> GraphProto:
    """The reverse loop's body (the runtime's Scan kernel runs exactly this pattern in one native
    call, ``runtime/kernels/recurrent_sweep.py``: keep the two in step). State dh, dc; scanned
    [dY_s], σ(i, o, f), tanh(g), c_s, c_{s-1}; out dh, dc and the scanned dpre."""
    ctx, d, b, hid = g.ctx, g.d, g.batch, g.hid
    step = _Step(ctx, g.dtype, "lstm_vjp_step")
    dh, dc = step.input("dh", [d, b, hid]), step.input("dc", [d, b, hid])
    dyt = step.input("dy_t", [d, b, hid]) if with_dy else ""
    st, gt = step.input("s_t", [d, b, 3 * hid]), step.input("g_t", [d, b, hid])
    ct, cpt = step.input("c_t", [d, b, hid]), step.input("cp_t", [d, b, hid])
    one = g.one()
    dht = step.op("Add", dh, dyt) if with_dy else dh
    tc = step.op("Tanh", ct)
    split = ctx.ints([hid] * 3)
    i_name, o_name, f_name = (ctx.fresh_name(f"lstm_vjp_step_{k}") for k in "iof")
    step.nodes.append(helper.make_node("Split", [st, split], [i_name, o_name, f_name], axis=-1))
    a = step.op("Mul", o_name, step.op("Sub", one, step.op("Mul", tc, tc)))
    dct = step.op("Add", dc, step.op("Mul", dht, a))
    e = step.op("Mul", step.op("Concat", dct, dht, dct, axis=-1), step.op("Concat", gt, tc, cpt, axis=-1))
    dpre_iof = step.op("Mul", e, step.op("Mul", st, step.op("Sub", one, st)))
    dpre_g = step.op("Mul", step.op("Mul", dct, i_name), step.op("Sub", one, step.op("Mul", gt, gt)))
    dpre = step.op("Concat", dpre_iof, dpre_g, axis=-1)
    outs = [step.op("MatMul", dpre, ctx.input(2)), step.op("Mul", dct, f_name), dpre]
    return step.graph([(outs[0], [d, b, hid]), (outs[1], [d, b, hid]), (outs[2], [d, b, 4 * hid])])


def _gru(g: _Direct) -> Grads:
    ctx, op, hid, d, b = g.ctx, g.op, g.hid, g.d, g.batch
    lbr = bool(ctx.attr("linear_before_reset", 0))
    xs, xf, hprev, hf, zeros, proj = _common(g)
    px_zr, px_h = op.Split(proj, ctx.ints([2 * hid, hid]), axis=-1, _outputs=2)
    r_zr, r_h = op.Split(ctx.input(2), ctx.ints([2 * hid, hid]), axis=1, _outputs=2)
    rb_h = ""
    if ctx.input(3):
        cut = ctx.ints([5 * hid, hid])
        rb_h = op.Split(op.Unsqueeze(ctx.input(3), ctx.ints([1])), cut, axis=-1, _outputs=2)[1]
    if lbr:
        q = op.MatMul(hf, op.Transpose(ctx.input(2), perm=[0, 2, 1]))
        q_zr, lin = op.Split(q, ctx.ints([2 * hid, hid]), axis=-1, _outputs=2)
    else:
        q_zr = op.MatMul(hf, op.Transpose(r_zr, perm=[0, 2, 1]))
    zr = op.Sigmoid(op.Add(px_zr, q_zr))
    z, r = op.Split(zr, ctx.ints([hid, hid]), axis=-1, _outputs=2)
    if lbr:
        lin = op.Add(lin, rb_h) if rb_h else lin
        rhf = ""
        n = op.Tanh(op.Add(px_h, op.Mul(r, lin)))
    else:
        rhf = op.Mul(r, hf)
        inner = op.MatMul(rhf, op.Transpose(r_h, perm=[0, 2, 1]))
        n = op.Tanh(op.Add(px_h, op.Add(inner, rb_h) if rb_h else inner))
    one = g.one()
    zslope = op.Mul(zr, op.Sub(one, zr))  # σ' of z and r
    kn = op.Mul(op.Sub(one, z), op.Sub(one, op.Mul(n, n)))
    left = op.Sub(hf, n)
    step = _Step(ctx, g.dtype, "gru_vjp_step")
    dh = step.input("dh", [d, b, hid])
    dy = g.seed(0)
    dyt = step.input("dy_t", [d, b, hid]) if dy else ""
    knt = step.input("kn_t", [d, b, hid])
    dht = step.op("Add", dh, dyt) if dy else dh
    da = step.op("Mul", dht, knt)
    if lbr:
        k = op.Concat(op.Mul(zslope, op.Concat(left, lin, axis=-1)), r, axis=-1)
        kt, zt = step.input("k_t", [d, b, 3 * hid]), step.input("z_t", [d, b, hid])
        dpre = step.op("Mul", step.op("Concat", dht, da, da, axis=-1), kt)
        dh_new = step.op("Add", step.op("Mul", dht, zt), step.op("MatMul", dpre, ctx.input(2)))
        outs = [(dh_new, [d, b, hid]), (dpre, [d, b, 3 * hid]), (step.op("Identity", da), [d, b, hid])]
        scanned = [(kn, 1), (k, 3), (z, 1)]
    else:
        k = op.Mul(zslope, op.Concat(left, hf, axis=-1))
        kt, zt, rt = (step.input(p, [d, b, w * hid]) for p, w in (("k_t", 2), ("z_t", 1), ("r_t", 1)))
        e = step.op("MatMul", da, r_h)
        dpre = step.op("Mul", step.op("Concat", dht, e, axis=-1), kt)
        direct = step.op("Add", step.op("Mul", dht, zt), step.op("Mul", e, rt))
        dh_new = step.op("Add", direct, step.op("MatMul", dpre, r_zr))
        outs = [(dh_new, [d, b, hid]), (dpre, [d, b, 2 * hid]), (da, [d, b, hid])]
        scanned = [(kn, 1), (k, 2), (z, 1), (r, 1)]
    body = step.graph(outs)
    init = [g.states_in(seed) if (seed := g.seed(1)) else zeros or g.zeros(hprev)]
    xs_in = ([g.seq_in(dy)] if dy else []) + [g.unflat(v, w * hid, hprev) for v, w in scanned]
    results = g.scan(init, xs_in, body, True, len(outs) - 1)
    g.info(results[0], d, b, hid)
    for name, (_, shape) in zip(results[1:], outs[1:]):
        g.info(name, d, g.steps, b, shape[-1])
    if lbr:
        # W and Wb see da (x W_h^T is outside r), R and Rb the product's gradient r da
        dqf, da_f = g.flat(results[1], 3 * hid), g.flat(results[2], hid)
        dq_zr = op.Split(dqf, ctx.ints([2 * hid, hid]), axis=-1, _outputs=2)[0]
        dx, dw, dr, db = g.weight_grads(op.Concat(dq_zr, da_f, axis=-1), xf, xs, hf, dqf)
    else:
        dpzr, da_f = g.flat(results[1], 2 * hid), g.flat(results[2], hid)
        dx, dw, _, db = g.weight_grads(op.Concat(dpzr, da_f, axis=-1), xf, xs, None)
        dr = None
        if ctx.needs_grad(2):
            dr_zr = op.MatMul(op.Transpose(dpzr, perm=[0, 2, 1]), hf)
            dr = op.Concat(dr_zr, op.MatMul(op.Transpose(da_f, perm=[0, 2, 1]), rhf), axis=1)
    dh0 = g.states_in(results[0]) if ctx.needs_grad(5) and ctx.input(5) else None
    return [dx, dw, dr, db, None, dh0]
