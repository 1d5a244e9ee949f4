"""The ``onnx-light`` command.

onnx-light demo                                   train the spiral classifier
onnx-light grad MODEL --wrt W,b --of loss -o OUT  write the backward model
onnx-light jvp MODEL --wrt x --of y -o OUT        write the forward-mode (JVP) model
onnx-light family MODEL -o DIR/f.onnx              write f, adj_f, fwd_adj_f (CasADi's siblings)
onnx-light check-grad MODEL --wrt W,b --of loss   finite-difference report
onnx-light print MODEL                            the graph as text
onnx-light ops                                    the ops with gradient rules
onnx-light train MODEL --data D.npz -o OUT        train (loss, optimizer, epochs) and export
onnx-light artifacts MODEL -o DIR                 the training artifacts alone

Every failure a user can cause (a missing or unreadable file, a file that is not an
ONNX model, an unknown name, a bad option value, a closed pipe) is one line on
stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import difflib
import errno
import fnmatch
import os
import sys
from typing import NoReturn

from . import (
    DecodeError,
    OnnxLightError,
    TangentOfFunction,
    __version__,
    family,
    gradcheck,
    gradient_model,
    helper,
    load,
    save,
)
from . import _gradcheck as _gc
from ._cli_training import add_training_commands, refuse_overwrite
from ._ops_table import ops_markdown, write_ops_block
from .onnx_core import ModelProto, TensorProto
from .onnx_core.gradient import input_types

__all__ = ["main", "ops_markdown", "write_ops_block"]

_FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16)


class UsageError(OnnxLightError):
    """A command-line argument that cannot be used (reported in one line, exit code 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad argument reported in one line (the usage stays in --help)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def _read_model(path: str) -> ModelProto:
    """The model at ``path``, or a UsageError saying in one line why it cannot be read."""
    if not os.path.exists(path):
        raise UsageError(f"{path}: no such file")
    if os.path.isdir(path):
        raise UsageError(f"{path}: is a folder, not an ONNX model file")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{path}: permission denied")
    if os.path.getsize(path) == 0:
        raise UsageError(f"not an ONNX model: {path} is empty")
    try:
        model = load(path)
    except DecodeError as err:
        raise UsageError(f"not an ONNX model: {path} ({err.reason})") from None
    except OSError as err:
        raise UsageError(f"{path}: {err.strerror or err}") from None
    if not model.HasField("graph") or not model.graph.node:
        raise UsageError(f"not an ONNX model: {path} has no graph nodes")
    return model


def _value_names(model: ModelProto) -> list[str]:
    graph = model.graph
    names = [i.name for i in graph.input] + [t.name for t in graph.initializer]
    names += [o for n in graph.node for o in n.output if o]
    return list(dict.fromkeys(names))


def _float_params(model: ModelProto) -> list[str]:
    return [t.name for t in model.graph.initializer if t.data_type in _FLOAT_TYPES]


def _names(model: ModelProto, text: str) -> list[str]:
    """``--wrt``: names, globs (``fc*``) and ``@params`` (every float initializer)."""
    known = _value_names(model)
    out: list[str] = []
    for item in (n.strip() for n in text.split(",")):
        if not item:
            continue
        if item == "@params":
            found = _float_params(model)
            if not found:
                raise UsageError("@params: the model has no float initializers")
        elif any(c in item for c in "*?["):
            found = fnmatch.filter(known, item)
            if not found:
                raise UsageError(f"--wrt {item!r} matches no value of the model")
        else:
            _require(model, item, "--wrt", known)
            found = [item]
        out.extend(n for n in found if n not in out)
    if not out:
        raise UsageError("--wrt names nothing to differentiate")
    return out


def _require(model: ModelProto, name: str, option: str, known: list[str] | None = None) -> None:
    known = known if known is not None else _value_names(model)
    if name in known:
        return
    close = difflib.get_close_matches(name, known, n=5, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f" (outputs: {[o.name for o in model.graph.output]})"
    raise UsageError(f"{option} {name!r} is not a value of the model{hint}")


def _output_path(path: str, model: str, prefixes: tuple[str, ...] = ()) -> str:
    """``path`` where a file can be written without replacing the input ``model`` (nor can
    its siblings ``<prefix><name>``)."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"-o {path}: the folder {folder} does not exist")
    if os.path.isdir(path):
        raise UsageError(f"-o {path}: is a folder; give a file name")
    try:
        refuse_overwrite(path, model, prefixes)
    except OnnxLightError as err:
        raise UsageError(str(err)) from None
    return path


def _grad(args: argparse.Namespace) -> int:
    model = _read_model(args.model)
    xs = _names(model, args.wrt)
    _require(model, args.of, "--of")
    out_path = _output_path(args.output, args.model)
    out = gradient_model(model, xs, args.of, inline=args.inline, allow_unused=args.allow_unused)
    try:
        save(out, out_path)
    except OSError as err:
        raise UsageError(f"-o {out_path}: {err.strerror or err}") from None
    n_nodes = len(out.graph.node) + sum(len(f.node) for f in out.functions)
    print(
        f"wrote {out_path}: {n_nodes} nodes for {len(model.graph.node)} forward nodes; "
        f"inputs {[i.name for i in out.graph.input]}, outputs {[o.name for o in out.graph.output]}"
    )
    return 0


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _seeds(text: str) -> int | str:
    """``--seeds``: a positive count of directions or 'dynamic'."""
    if text == "dynamic":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive int or 'dynamic'") from None


def _jvp(args: argparse.Namespace) -> int:
    """Writes a model computing fwd_<y> = J fwd_<x> (forward mode), its nodes inlined."""
    model = _read_model(args.model)
    xs = _names(model, args.wrt)
    ys = [y.strip() for y in args.of.split(",") if y.strip()]
    for y in ys:
        _require(model, y, "--of")
    out_path = _output_path(args.output, args.model)
    seeds: int | str | None = args.seeds
    fwd = TangentOfFunction(model, xs, ys, seeds=seeds, allow_unused=args.allow_unused)
    types = {vi.name: vi for vi in fwd.value_info}
    known = input_types(model, ys[0], list(fwd.input) + ys)
    outputs = []
    for y, name in zip(ys, fwd.output):
        t = known.get(y)
        shape = None if t is None or t.shape is None or seeds is not None else list(t.shape)
        outputs.append(helper.make_tensor_value_info(name, t.dtype if t is not None else 0, shape))
    graph = helper.make_graph(list(fwd.node), fwd.name, [types[n] for n in fwd.input], outputs)
    try:
        save(helper.make_model(graph, opset_imports=list(fwd.opset_import)), out_path)
    except OSError as err:
        raise UsageError(f"-o {out_path}: {err.strerror or err}") from None
    print(f"wrote {out_path}: {len(fwd.node)} nodes; inputs {list(fwd.input)}, outputs {list(fwd.output)}")
    return 0


def _family(args: argparse.Namespace) -> int:
    """Writes the model and its derivative siblings beside it (CasADi's conventions)."""
    model = _read_model(args.model)
    out_path = _output_path(args.output, args.model, ("adj_", "fwd_", "fwd_adj_"))
    try:
        written = family(
            model, out_path, layout=args.layout, second_order=not args.first_order, forward_sibling=args.forward
        )
    except OSError as err:
        raise UsageError(f"-o {out_path}: {err.strerror or err}") from None
    print(f"wrote {', '.join(str(p) for p in written)}")
    return 0


def _check_grad(args: argparse.Namespace) -> int:
    """Compares the backward graph with central differences along random directions."""
    model = _read_model(args.model)
    xs = _names(model, args.wrt)
    _require(model, args.of, "--of")
    rtol = args.rtol if args.tolerance is None else args.tolerance
    result = gradcheck(
        model,
        xs,
        args.of,
        eps=args.eps,
        atol=args.atol,
        rtol=rtol,
        directions=args.directions,
        dtype=args.dtype,
        seed=args.seed,
        allow_unused=args.allow_unused,
    )
    print(result)
    worst = max((r.error / max(abs(r.analytic), abs(r.numeric), 1e-30) for r in result.rows), default=0.0)
    print(f"largest relative error {worst:.2e} ({'ok' if result.ok else 'ABOVE tolerance'})")
    return 0 if result.ok else 1


def _ops(args: argparse.Namespace) -> int:
    if args.write:
        changed = write_ops_block(args.write)
        print(f"{args.write}: {'op tables rewritten' if changed else 'op tables already up to date'}")
        return 0
    print(ops_markdown(), end="")
    return 0


def _print(args: argparse.Namespace) -> int:
    print(helper.to_text(_read_model(args.model)))
    return 0


_WRT_HELP = (
    "comma-separated values to differentiate with respect to; globs (conv*) and @params (every float initializer)"
)


def _differentiating(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="the forward ONNX model file")
    p.add_argument("--wrt", required=True, help=_WRT_HELP)
    p.add_argument("--of", required=True, help="the output (or intermediate value) to differentiate")
    p.add_argument("--allow-unused", action="store_true", help="zeros for names that do not reach --of")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="onnx-light", description="protobuf-free ONNX: gradients, runtime, codec")
    parser.add_argument("--version", action="version", version=f"onnx-light {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("demo", help="train a small classifier with gradients from onnx-light (demo --help)")

    p = sub.add_parser("grad", help="write a model computing the gradients of --of")
    _differentiating(p)
    p.add_argument("-o", "--output", required=True, help="the backward model file to write")
    p.add_argument("--inline", action="store_true", help="put the nodes in the graph instead of a function")
    p.set_defaults(run=_grad)

    p = sub.add_parser("jvp", help="write a model computing Jacobian-vector products of --of")
    p.add_argument("model", help="the ONNX model file")
    p.add_argument("--wrt", required=True, help="comma-separated inputs with a tangent (globs, @params)")
    p.add_argument("--of", required=True, help="comma-separated outputs whose tangent to compute")
    p.add_argument("-o", "--output", required=True, help="the forward-mode model file to write")
    p.add_argument("--seeds", type=_seeds, default=None, help="k directions (a trailing axis) or 'dynamic'")
    p.add_argument("--allow-unused", action="store_true", help="accept names that reach no output (zeros)")
    p.set_defaults(run=_jvp)

    p = sub.add_parser("family", help="write the model and its derivative siblings for CasADi")
    p.add_argument("model", help="the ONNX model file (static shapes)")
    p.add_argument("-o", "--output", required=True, help="where the primal goes (DIR/f.onnx); siblings beside it")
    p.add_argument("--layout", choices=["casadi", "onnx"], default="casadi", help="seed layout (default casadi)")
    p.add_argument("--first-order", action="store_true", help="no fwd_adj_ sibling (no exact Hessians)")
    p.add_argument("--forward", action="store_true", help="also write the forward-mode sibling fwd_<name>")
    p.set_defaults(run=_family)

    p = sub.add_parser(
        "check-grad",
        help="compare the backward graph with finite differences",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    _differentiating(p)
    p.add_argument("--eps", type=_positive, default=None, help="step relative to each tensor (None: 1e-6 in float64)")
    p.add_argument("--atol", type=_positive, default=None, help=f"absolute tolerance (None: {_gc.DEFAULT_ATOL:g})")
    p.add_argument("--rtol", type=_positive, default=None, help=f"relative tolerance (None: {_gc.DEFAULT_RTOL:g})")
    p.add_argument("--tolerance", type=_positive, default=None, help=argparse.SUPPRESS)  # the old name of --rtol
    p.add_argument("--directions", type=int, default=3, help="random directions per tensor")
    p.add_argument("--dtype", choices=["float64", "float32"], default="float64", help="precision of the check")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs and directions")
    p.set_defaults(run=_check_grad)

    p = sub.add_parser("ops", help="list the ops with gradient rules, without, and what is refused (markdown)")
    p.add_argument("--write", metavar="README", default=None, help="rewrite the <!-- ops:begin --> block of this file")
    p.set_defaults(run=_ops)

    p = sub.add_parser("print", help="print a model as text")
    p.add_argument("model", help="the ONNX model file")
    p.set_defaults(run=_print)
    add_training_commands(sub)
    return parser


def _fail(message: str) -> int:
    try:
        print(f"onnx-light: error: {message}", file=sys.stderr)
    except (BrokenPipeError, OSError):
        pass
    return 2


def _run(argv: list[str]) -> int:
    if argv[:1] == ["demo"]:
        from .demo import main as demo_main  # it parses its own options

        return demo_main(argv[1:])
    args = _parser().parse_args(argv)
    return int(args.run(args))


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``onnx-light`` command."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return _run(argv)
    except BrokenPipeError:
        # the reader went away (``| head``): stop quietly, and keep Python from
        # complaining again when it flushes stdout at exit
        _silence_stdout()
        return 2
    except OnnxLightError as err:
        return _fail(" ".join(str(err).split()) or type(err).__name__)
    except OSError as err:
        if err.errno == errno.EPIPE:
            _silence_stdout()
            return 2
        return _fail(f"{getattr(err, 'filename', '') or ''}: {err.strerror or err}".lstrip(": "))
    except KeyboardInterrupt:
        return _fail("interrupted")
    except Exception as err:  # noqa: BLE001  (a bug of ours: still one line; ONNX_LIGHT_DEBUG=1 shows it)
        if os.environ.get("ONNX_LIGHT_DEBUG"):
            raise
        return _fail(f"internal error, please report it: {type(err).__name__}: {' '.join(str(err).split())}")


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
