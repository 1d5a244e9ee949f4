"""The ``onnx-light`` command.

onnx-light demo                                   train the spiral classifier
onnx-light grad MODEL --wrt W,b --of loss -o OUT  write the backward model
onnx-light jvp MODEL --wrt x --of y -o OUT        write the forward-mode (JVP) model
onnx-light check-grad MODEL --wrt W,b --of loss   finite-difference report
onnx-light print MODEL                            the graph as text
onnx-light ops                                    the ops with gradient rules
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from . import GradientOfFunction, OnnxLightError, TangentOfFunction, helper, load, numpy_helper, save
from .onnx_core.gradient import backward_model, input_types
from .runtime import InferenceSession

__all__ = ["main"]


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def _grad(args: argparse.Namespace) -> int:
    model = load(args.model)
    xs = _names(args.wrt)
    bwd = GradientOfFunction(model, xs, args.of, allow_unused=args.allow_unused)
    types = input_types(model, args.of, list(bwd.input))
    out = backward_model(bwd, types, inline=args.inline)
    save(out, args.output)
    print(
        f"wrote {args.output}: {len(bwd.node)} nodes for {len(model.graph.node)} forward nodes; "
        f"inputs {list(bwd.input)}, outputs {list(bwd.output)}"
    )
    return 0


def _jvp(args: argparse.Namespace) -> int:
    """Writes a model computing fwd_<y> = J fwd_<x> (forward mode), its nodes inlined."""
    model = load(args.model)
    xs, ys = _names(args.wrt), _names(args.of)
    seeds: int | str | None = None if args.seeds is None else "dynamic" if args.seeds == "dynamic" else int(args.seeds)
    fwd = TangentOfFunction(model, xs, ys, seeds=seeds, allow_unused=args.allow_unused)
    types = {vi.name: vi for vi in fwd.value_info}
    known = input_types(model, ys[0], list(fwd.input) + ys)
    outputs = []
    for y, name in zip(ys, fwd.output):
        t = known.get(y)
        shape = None if t is None or t.shape is None or seeds is not None else list(t.shape)
        outputs.append(helper.make_tensor_value_info(name, t.dtype if t is not None else 0, shape))
    inputs = [types[n] for n in fwd.input]
    graph = helper.make_graph(list(fwd.node), fwd.name, inputs, outputs)
    save(helper.make_model(graph, opset_imports=list(fwd.opset_import)), args.output)
    print(f"wrote {args.output}: {len(fwd.node)} nodes; inputs {list(fwd.input)}, outputs {list(fwd.output)}")
    return 0


def _random_feed(t: Any, rng: np.random.Generator, dims: dict[str, int]) -> np.ndarray:
    shape = [d if isinstance(d, int) else dims.get(str(d), 2) for d in (t.shape or ())]
    dtype = helper.tensor_dtype_to_np_dtype(t.dtype)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if np.dtype(dtype).kind == "b":
        return rng.integers(0, 2, shape).astype(dtype)
    return np.zeros(shape, dtype)


def _with_initializers_as_inputs(model: Any) -> Any:
    """A copy of ``model`` whose initializers are also graph inputs (so they can be fed)."""
    out = type(model)()
    out.CopyFrom(model)
    declared = {i.name for i in out.graph.input}
    for t in out.graph.initializer:
        if t.name not in declared:
            out.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return out


def _check_grad(args: argparse.Namespace) -> int:
    """Compares the backward graph with central differences along random directions."""
    model = load(args.model)
    xs = _names(args.wrt)
    rng = np.random.default_rng(args.seed)
    bwd = GradientOfFunction(model, xs, args.of)
    types = input_types(model, args.of, list(bwd.input))
    inits = {t.name: np.array(numpy_helper.to_array(t)) for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for name in bwd.input:
        if name == "dy":
            continue
        feeds[name] = inits[name] if name in inits else _random_feed(types[name], rng, {})
    forward = InferenceSession(_with_initializers_as_inputs(model))
    fwd_inputs = {i.name for i in forward.get_inputs()} | set(inits)
    y0 = forward.run([args.of], {k: v for k, v in feeds.items() if k in fwd_inputs})[0]
    dy = rng.standard_normal(np.shape(y0)).astype(y0.dtype)
    grads = InferenceSession(bwd).run(None, {**feeds, "dy": dy})
    worst = 0.0
    print(f"{'variable':24s} {'backward':>14s} {'finite diff':>14s} {'rel. error':>10s}")
    for x, g in zip(xs, grads):
        v = rng.standard_normal(feeds[x].shape).astype(feeds[x].dtype)
        h = args.eps

        def objective(t: float, x: str = x, v: np.ndarray = v) -> float:
            moved = {**feeds, x: (feeds[x] + t * v).astype(feeds[x].dtype)}
            out = forward.run([args.of], {k: val for k, val in moved.items() if k in fwd_inputs})[0]
            return float(np.sum(dy.astype(np.float64) * out.astype(np.float64)))

        numeric = (objective(h) - objective(-h)) / (2 * h)
        analytic = float(np.sum(g.astype(np.float64) * v))
        rel = abs(numeric - analytic) / max(1e-12, abs(numeric), abs(analytic))
        worst = max(worst, rel)
        print(f"{x:24s} {analytic:14.6g} {numeric:14.6g} {rel:10.2e}")
    ok = worst <= args.tolerance
    print(f"largest relative error {worst:.2e} ({'ok' if ok else 'ABOVE'} tolerance {args.tolerance:g})")
    return 0 if ok else 1


def ops_markdown() -> str:
    """The README's list of ops with gradient rules and ops declared without gradient."""
    from . import DefaultGradRegistry

    rules = DefaultGradRegistry().rules()
    with_rule = sorted({r.op_type for r in rules if not r.no_grad})
    no_grad = sorted({r.op_type for r in rules if r.no_grad})
    return (
        f"**Gradient rules ({len(with_rule)} ops):** {', '.join(with_rule)}.\n\n"
        f"**Declared without gradient ({len(no_grad)} ops; their outputs are constants to the pass):** "
        f"{', '.join(no_grad)}.\n"
    )


def _ops(args: argparse.Namespace) -> int:
    print(ops_markdown(), end="")
    return 0


def _print(args: argparse.Namespace) -> int:
    print(helper.to_text(load(args.model)))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``onnx-light`` command."""
    parser = argparse.ArgumentParser(prog="onnx-light", description="protobuf-free ONNX: gradients, runtime, codec")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("demo", help="train a small classifier with gradients from onnx-light (demo --help)")

    p = sub.add_parser("grad", help="write a model computing the gradients of OUTPUT")
    p.add_argument("model")
    p.add_argument("--wrt", required=True, help="comma-separated names to differentiate with respect to")
    p.add_argument("--of", required=True, help="the output to differentiate")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--inline", action="store_true", help="put the nodes in the graph instead of a function")
    p.add_argument("--allow-unused", action="store_true", help="zeros for names that do not reach OUTPUT")
    p.set_defaults(run=_grad)

    p = sub.add_parser("jvp", help="write a model computing Jacobian-vector products of OUTPUTS")
    p.add_argument("model")
    p.add_argument("--wrt", required=True, help="comma-separated inputs with a tangent")
    p.add_argument("--of", required=True, help="comma-separated outputs whose tangent to compute")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--seeds", default=None, help="k directions (a trailing axis) or 'dynamic'")
    p.add_argument("--allow-unused", action="store_true", help="accept names that reach no OUTPUT")
    p.set_defaults(run=_jvp)

    p = sub.add_parser("check-grad", help="compare the backward graph with finite differences")
    p.add_argument("model")
    p.add_argument("--wrt", required=True)
    p.add_argument("--of", required=True)
    p.add_argument("--eps", type=float, default=1e-3)
    p.add_argument("--tolerance", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(run=_check_grad)

    p = sub.add_parser("ops", help="list the ops with gradient rules (markdown)")
    p.set_defaults(run=_ops)

    p = sub.add_parser("print", help="print a model as text")
    p.add_argument("model")
    p.set_defaults(run=_print)

    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["demo"]:
            from .demo import main as demo_main  # it parses its own options

            return demo_main(argv[1:])
        args = parser.parse_args(argv)
        return int(args.run(args))
    except OnnxLightError as err:
        print(f"onnx-light: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
