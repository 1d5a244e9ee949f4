"""generate_artifacts: training, eval, optimizer and train-step models plus the checkpoint."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..onnx_core import (
    ModelProto,
    NodeProto,
    OnnxLightError,
    TensorProto,
    ValueInfoProto,
    from_onnx,
    helper,
    load,
    numpy_helper,
    save,
)
from ..onnx_core.gradient import EMITTED_OPSET, GradientOfFunction, upgrade_nodes
from ..onnx_core.ops import traits
from ..onnx_core.optimizer import optimize
from ..onnx_extensions.gradient import DefaultGradRegistry
from ._checkpoint import CheckpointState, Parameter
from ._emit import Emitter
from ._graphs import _is_default, assemble, bn_buffers, differentiable_sources, for_eval, for_training, used_values
from ._losses import LOSSES, label_type
from ._optimizers import OptimizerSpec, emit_update, make_optimizer

__all__ = ["generate_artifacts", "ArtifactPaths"]

_FLOATS = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16}
IR_VERSION = 10
USER_INPUTS_KEY = "onnx_light.training.user_inputs"  # read by Module
SEED_INPUT_KEY = "onnx_light.training.seed_input"  # the Dropout seed Module feeds


@dataclass
class ArtifactPaths:
    """Where generate_artifacts wrote each artifact."""

    training_model: str
    eval_model: str
    optimizer_model: str
    train_step: str
    checkpoint: str


@dataclass
class _Plan:
    """The forward model, read once: its nodes at the target opset and its tensors sorted."""

    model: ModelProto
    opset: int
    nodes: list[NodeProto]
    inits: dict[str, TensorProto]
    data_inputs: list[ValueInfoProto]
    trainable: list[str]
    frozen: list[str]
    buffers: list[str]
    taken: set[str] = field(default_factory=set)
    seed: str = "dropout_seed"
    base_dir: str = ""

    def vi(self, name: str) -> ValueInfoProto:
        """A tensor value info for an initializer."""
        t = self.inits[name]
        return helper.make_tensor_value_info(name, t.data_type, list(t.dims))

    def imports(self) -> list[Any]:
        others = [o for o in self.model.opset_import if o.domain not in ("", "ai.onnx")]
        return [helper.make_opsetid("", self.opset), *others]

    def make(
        self,
        name: str,
        nodes: list[NodeProto],
        inputs: list[ValueInfoProto],
        outputs: list[ValueInfoProto],
        user: Sequence[str] = (),
    ) -> ModelProto:
        """A model over ``nodes`` whose non-state initializers are kept, its state ones inputs.

        The nodes go through ``onnx_light.optimize`` first (Identity copies, repeated
        subexpressions and dead nodes removed; the outputs keep their names).
        """
        nodes = self.optimized(nodes, inputs, outputs)
        reads = set(used_values(nodes))
        inits = [t for n, t in self.inits.items() if n in reads and n not in self.state_names()]
        graph = helper.make_graph(nodes, name, inputs, outputs, initializer=inits)
        used = {(n.domain, n.op_type) for n in nodes}
        functions = [f for f in self.model.functions if (f.domain, f.name) in used]  # forward nodes may call them
        m = helper.make_model(graph, opset_imports=self.imports(), ir_version=IR_VERSION, functions=functions)
        m.producer_name = "onnx_light.training"
        props = {USER_INPUTS_KEY: json.dumps(list(user))}
        if any(i.name == self.seed for i in inputs):
            props[SEED_INPUT_KEY] = self.seed
        helper.set_model_props(m, props)
        return m

    def optimized(
        self, nodes: list[NodeProto], inputs: list[ValueInfoProto], outputs: list[ValueInfoProto]
    ) -> list[NodeProto]:
        """``nodes`` after ``onnx_light.optimize``, every initializer an input (kept, never folded)."""
        names = [i.name for i in inputs] + [n for n in self.inits if n not in {i.name for i in inputs}]
        fn = helper.make_function(
            "onnx_light.training", "step", names, [o.name for o in outputs], nodes, self.imports()
        )
        return list(optimize(fn, fold=None).node)

    def state_names(self) -> set[str]:
        return set(self.trainable) | set(self.frozen)


def _names_or_error(names: Sequence[str] | None, known: dict[str, TensorProto], what: str) -> list[str]:
    names = list(names or [])
    bad = [n for n in names if n not in known]
    if bad:
        floats = [n for n, t in known.items() if t.data_type in _FLOATS]
        raise OnnxLightError(f"{what} names {bad}, which are not float initializers of the model; it has {floats}")
    return names


def _weights(nodes: list[NodeProto], outputs: list[str], opset: int) -> set[str]:
    """The values with a differentiable path to an output: ``differentiable_sources`` with
    the default rules' nondifferentiable inputs and the inputs that set a shape (the
    ``sizes_from`` trait) left out; an op without a rule keeps its other inputs."""
    registry = DefaultGradRegistry()

    def nondiff(node: NodeProto) -> frozenset[int] | None:
        rule = registry.lookup(node.domain, node.op_type, opset)
        if rule is not None and rule.no_grad:
            return None
        sizes = traits(node.domain, node.op_type, opset).sizes_from
        return frozenset(sizes) | (rule.nondiff if rule is not None else frozenset())

    return differentiable_sources(nodes, outputs, nondiff)


def _running_statistics(nodes: list[NodeProto]) -> set[str]:
    """The running mean and variance of inference BatchNormalizations that nothing else
    reads: torch's buffers, never trained (its optimizers see parameters only); they have a
    gradient in the graph, so a default ``requires_grad`` took them."""
    slots = {(id(n), k) for n in nodes if n.op_type == "BatchNormalization" and _is_default(n) for k in (3, 4)}
    stats = {n.input[k] for n in nodes for k in (3, 4) if (id(n), k) in slots and len(n.input) > k}
    other = {v for n in nodes for k, v in enumerate(n.input) if (id(n), k) not in slots}
    return stats - other


def _warn_tied_statistics(nodes: list[NodeProto], trainable: list[str]) -> None:
    """Warns when an inference BatchNormalization reads its running mean or variance from a
    trained parameter (directly or through Identity nodes). torch's exporter merges equal
    initializers: a fresh BatchNorm2d (weight = running_var = 1, bias = running_mean = 0)
    comes out as ``running_var = Identity(weight)``, so training the weight moves the
    variance too and the trajectory leaves torch's (the gradient of weight is that graph's)."""
    alias = {n.output[0]: n.input[0] for n in nodes if n.op_type == "Identity" and _is_default(n)}
    params, tied = set(trainable), []
    for node in nodes:
        if node.op_type != "BatchNormalization" or not _is_default(node) or len(node.input) < 5:
            continue
        for name in node.input[3:5]:
            source, seen = name, set()
            while source in alias and source not in seen:
                seen.add(source)
                source = alias[source]
            if source in params:
                tied.append(f"{name!r} = {source!r}")
    if tied:
        warnings.warn(
            f"BatchNormalization running statistics read trained parameters ({', '.join(tied)}; torch's exporter "
            "merges equal initializers, as a fresh BatchNorm's weight and running_var): training moves the "
            "statistics too. Give them their own values before export, or freeze those parameters",
            UserWarning,
            stacklevel=4,
        )


def _plan(
    model: ModelProto,
    requires_grad: Sequence[str] | None,
    frozen_params: Sequence[str] | None,
    loss_reads: Sequence[str] | None = None,
) -> _Plan:
    graph = model.graph
    source = next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), EMITTED_OPSET)
    target = max(source, EMITTED_OPSET)
    taken = {v for n in graph.node for v in (*n.input, *n.output)} | {i.name for i in graph.input}
    inits = {t.name: t for t in graph.initializer}
    taken |= set(inits)
    e = Emitter("_upg", taken)
    dtypes = {t.name: int(t.data_type) for t in graph.initializer}
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        if vi.type.HasField("tensor_type"):
            dtypes[vi.name] = int(vi.type.tensor_type.elem_type)
    nodes = upgrade_nodes(list(graph.node), source, target, e.fresh, dtype_of=lambda n: dtypes.get(n, 0))
    floats = {n: t for n, t in inits.items() if t.data_type in _FLOATS}
    frozen = _names_or_error(frozen_params, floats, "frozen_params")
    buffers = [b for b in bn_buffers(nodes) if b in floats]
    if requires_grad is None:
        # only weights with a gradient: an initializer read only where no gradient flows
        # (Resize's scales, ...) is a constant, which AdamW's weight decay would still change
        # the weights reaching what the loss reads (loss_input_names, else the first output): a
        # weight of another head has no gradient (GradientError), and AdamW would decay it
        reads_ = list(loss_reads or [o.name for o in graph.output][:1])
        weights = _weights(nodes, reads_, target)
        statistics = _running_statistics(nodes)
        trainable = [n for n in floats if n not in frozen and n not in buffers and n not in statistics and n in weights]
    else:
        trainable = _names_or_error(requires_grad, floats, "requires_grad")
        both = [n for n in trainable if n in frozen or n in buffers]
        if both:
            raise OnnxLightError(
                f"{both} are frozen or BatchNormalization running statistics; they cannot require grad"
            )
    reads = set(used_values(nodes))
    trainable = [n for n in trainable if n in reads]
    _warn_tied_statistics(nodes, trainable)
    rest = [n for n in floats if n not in trainable]
    data_inputs = [i for i in graph.input if i.name not in inits]
    plan = _Plan(model, target, nodes, inits, data_inputs, trainable, rest, buffers, taken)
    plan.seed = _fresh_name("dropout_seed", taken)
    return plan


def _loss(
    plan: _Plan, loss: str | None, loss_input_names: Sequence[str] | None, e: Emitter
) -> tuple[list[NodeProto], str, ValueInfoProto | None, ValueInfoProto]:
    """The loss nodes, the loss's name, the labels input (None for a model's own loss), the loss output."""
    outputs = list(plan.model.graph.output)
    if loss is None:
        if not loss_input_names:
            raise OnnxLightError(
                "pass loss= one of "
                + str(sorted(LOSSES))
                + ", or loss_input_names naming the model's scalar loss output"
            )
        name = loss_input_names[0]
        vi = next((o for o in outputs if o.name == name), None)
        if vi is None:
            raise OnnxLightError(f"loss_input_names names {name!r}, which is not an output of the model")
        return [], name, None, vi
    if loss not in LOSSES:
        raise OnnxLightError(f"unknown loss {loss!r}; choose one of {sorted(LOSSES)}")
    if not outputs and not loss_input_names:
        raise OnnxLightError(f"the model has no outputs: the {loss} loss needs the prediction as an output")
    names = list(loss_input_names or [outputs[0].name])
    pred = next((o for o in outputs if o.name == names[0]), None)
    if pred is None:  # never another output in its place: the loss would be of the wrong value
        raise OnnxLightError(
            f"loss_input_names names {names[0]!r}, which is not an output of the model; its outputs are"
            f" {[o.name for o in outputs]}"
        )
    tt = pred.type.tensor_type
    shape = (
        [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
        if tt.HasField("shape")
        else None
    )
    dtype, lshape = label_type(loss, int(tt.elem_type), shape)
    labels = _fresh_name("labels", plan.taken)
    loss_name = _fresh_name("loss", plan.taken)
    e = e.child()
    out = LOSSES[loss](e, pred.name, labels)
    e.Identity(out, out=loss_name)
    lvi = helper.make_tensor_value_info(labels, dtype, lshape)
    return e.nodes, loss_name, lvi, helper.make_tensor_value_info(loss_name, int(tt.elem_type), [])


def _fresh_name(base: str, taken: set[str]) -> str:
    name, n = base, 0
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    taken.add(name)
    return name


def _training_nodes(
    plan: _Plan,
    loss_nodes: list[NodeProto],
    loss_name: str,
    labels: ValueInfoProto | None,
    loss_vi: ValueInfoProto,
    e: Emitter,
) -> tuple[list[NodeProto], list[str]]:
    """Forward + loss + backward; returns the nodes and the updated buffers' ``_next`` names."""
    buffers = {b: numpy_helper.to_array(plan.inits[b], plan.base_dir) for b in plan.buffers}
    fwd, updates = for_training(plan.nodes, e, buffers, plan.seed)
    fwd = fwd + loss_nodes
    inputs = plan.data_inputs + ([labels] if labels is not None else []) + _seed_input(plan, fwd)
    gmodel = helper.make_model(
        helper.make_graph(fwd, "forward", inputs, [loss_vi], initializer=list(plan.inits.values())),
        opset_imports=plan.imports(),
        ir_version=IR_VERSION,
        functions=list(plan.model.functions),
    )
    if not plan.trainable:
        if not any(t.data_type in _FLOATS for t in plan.inits.values()):
            raise OnnxLightError(
                "no parameter requires a gradient: the model has no float initializers (weights stored "
                "as Constant nodes, as paddle2onnx writes them, cannot be trained); move them into "
                "graph.initializer"
            )
        raise OnnxLightError("no parameter requires a gradient: pass requires_grad or fewer frozen_params")
    bwd = GradientOfFunction(gmodel, plan.trainable, loss_name, registry=DefaultGradRegistry())
    dy = bwd.input[len(bwd.input) - 1]
    # dL/dL = 1 in the loss's own type (a float32 seed made a float64 model's gradients float32)
    loss_type = loss_vi.type.tensor_type.elem_type or TensorProto.FLOAT
    seed = helper.make_node("Constant", [], [dy], value=helper.make_tensor(dy, loss_type, [], [1.0]))
    rename = {f"grad_{p}": f"{p}_grad" for p in plan.trainable}
    bwd_nodes = [seed] + [_rename_outputs(n, rename) for n in bwd.node]
    buffers_next = [o for n in updates for o in n.output if o.endswith("_next")]
    wanted = [loss_name, *rename.values(), *buffers_next]
    return assemble(bwd_nodes, fwd + updates, wanted, e.fresh), buffers_next


def _seed_input(plan: _Plan, nodes: list[NodeProto]) -> list[ValueInfoProto]:
    """The Dropout seed input (int64 scalar), when the nodes read it."""
    if plan.seed not in used_values(nodes):
        return []
    return [helper.make_tensor_value_info(plan.seed, TensorProto.INT64, [])]


def _rename_outputs(node: NodeProto, rename: dict[str, str]) -> NodeProto:
    if not any(o in rename for o in node.output):
        return node
    new = helper.make_node(
        node.op_type, list(node.input), [rename.get(o, o) for o in node.output], domain=node.domain or None
    )
    new.attribute.extend(node.attribute)
    return new


def _state_inputs(plan: _Plan, nodes: list[NodeProto]) -> list[ValueInfoProto]:
    reads = set(used_values(nodes))
    names = [n for n in plan.inits if n in reads and n in plan.state_names()]
    return [plan.vi(n) for n in names]


def _optimizer_nodes(
    plan: _Plan, spec: OptimizerSpec, grads: dict[str, str], max_grad_norm: float | None, e: Emitter
) -> tuple[list[NodeProto], list[ValueInfoProto], list[ValueInfoProto]]:
    """The update of every trainable parameter: nodes, state inputs, ``_next`` outputs."""
    e = e.child()
    params = [(p, grads[p], {k: f"{p}.{k}" for k in spec.state_kinds}) for p in plan.trainable]
    news = emit_update(e, spec, "learning_rate", "step", params, max_grad_norm)
    ins: list[ValueInfoProto] = []
    p_outs: list[ValueInfoProto] = []
    st_outs: list[ValueInfoProto] = []
    for (p, _, states), (p_new, st_new) in zip(params, news):
        e.Identity(p_new, out=f"{p}_next")
        p_outs.append(_like(plan, p, f"{p}_next"))
        for kind, name in states.items():
            e.Identity(st_new[kind], out=f"{name}_next")
            ins.append(_like(plan, p, name))
            st_outs.append(_like(plan, p, f"{name}_next"))
    return e.nodes, ins, p_outs + st_outs


def _like(plan: _Plan, param: str, name: str) -> ValueInfoProto:
    t = plan.inits[param]
    return helper.make_tensor_value_info(name, t.data_type, list(t.dims))


def _scalars() -> list[ValueInfoProto]:
    return [
        helper.make_tensor_value_info("learning_rate", TensorProto.FLOAT, []),
        helper.make_tensor_value_info("step", TensorProto.INT64, []),
    ]


def generate_artifacts(
    model: str | os.PathLike[str] | ModelProto,
    requires_grad: Sequence[str] | None = None,
    frozen_params: Sequence[str] | None = None,
    loss: str | None = None,
    optimizer: str = "AdamW",
    artifact_directory: str | os.PathLike[str] = ".",
    *,
    loss_input_names: Sequence[str] | None = None,
    **optimizer_options: Any,
) -> ArtifactPaths:
    """Writes the training artifacts of ``model`` (onnxruntime.training's names and files).

    Args:
        model: the forward model (path or ModelProto), e.g. a torch export.
        requires_grad: the initializers to train (default: every float initializer not
            frozen, not a BatchNormalization running statistic, and with a gradient: one
            read only where none flows, as Resize's scales, is a constant and stays one).
        frozen_params: initializers kept constant (no gradient, no optimizer state).
        loss: "CrossEntropyLoss", "MSELoss", "BCEWithLogitsLoss", "L1Loss" or "HuberLoss",
            applied to the model's first output and a new input ``labels``; None when the
            model already outputs a scalar loss named by ``loss_input_names``.
        optimizer: "AdamW", "Adam" or "SGD" (torch.optim's defaults and formulas).
        artifact_directory: where the files go (created if missing).
        loss_input_names: the model output the loss reads (or the loss itself when
            ``loss`` is None).
        **optimizer_options: torch.optim's keywords (``lr``, ``betas``, ``eps``,
            ``weight_decay``, ``amsgrad``, ``momentum``, ``dampening``, ``nesterov``) and
            ``max_grad_norm`` for clipping by global norm.

    Returns:
        The paths of training_model.onnx, eval_model.onnx, optimizer_model.onnx,
        train_step.onnx and checkpoint.

    Raises:
        OnnxLightError: unknown names, loss or optimizer options; an op without a
            gradient rule (GradientError).
    """
    base_dir = ""
    source: Any = None
    if isinstance(model, (str, os.PathLike)):
        base_dir = os.path.dirname(os.path.abspath(os.fspath(model)))
        source = load(os.fspath(model))
    else:
        try:
            source = from_onnx(model)  # ours, or onnx's ModelProto converted
        except TypeError:
            pass
    if not isinstance(source, ModelProto):
        raise OnnxLightError(f"generate_artifacts takes a model path or a ModelProto, not {type(model).__name__}")
    max_grad_norm = optimizer_options.pop("max_grad_norm", None)
    spec = make_optimizer(optimizer, optimizer_options)
    plan = _plan(source, requires_grad, frozen_params, loss_input_names)
    plan.base_dir = base_dir
    models = _models(plan, spec, loss, loss_input_names, max_grad_norm)
    return _write(plan, spec, artifact_directory, *models)


def _models(
    plan: _Plan,
    spec: OptimizerSpec,
    loss: str | None,
    loss_input_names: Sequence[str] | None,
    max_grad_norm: float | None,
) -> tuple[ModelProto, ModelProto, ModelProto, ModelProto]:
    """The training, eval, optimizer and train-step models."""
    e = Emitter("_train", plan.taken)
    loss_nodes, loss_name, labels, loss_vi = _loss(plan, loss, loss_input_names, e)
    train_nodes, buffers_next = _training_nodes(plan, loss_nodes, loss_name, labels, loss_vi, e)
    user_inputs = plan.data_inputs + ([labels] if labels is not None else [])
    user_names = [i.name for i in user_inputs]
    grad_out = [_like(plan, p, f"{p}_grad") for p in plan.trainable]
    buf_out = [_like(plan, n[: -len("_next")], n) for n in buffers_next]
    training = plan.make(
        "training",
        train_nodes,
        user_inputs + _state_inputs(plan, train_nodes) + _seed_input(plan, train_nodes),
        [loss_vi, *grad_out, *buf_out],
        user_names,
    )
    model_outs = [o for o in plan.model.graph.output if o.name != loss_name]  # (loss=None: the loss is one)
    eval_nodes = assemble([], for_eval(plan.nodes, e) + loss_nodes, [loss_name, *(o.name for o in model_outs)], e.fresh)
    evalm = plan.make(
        "eval",
        eval_nodes,
        user_inputs + _state_inputs(plan, eval_nodes),
        [loss_vi, *model_outs],
        user_names,
    )
    opt_nodes, st_in, st_out = _optimizer_nodes(plan, spec, {p: f"{p}_grad" for p in plan.trainable}, max_grad_norm, e)
    params_in = [plan.vi(p) for p in plan.trainable]
    optm = plan.make("optimizer", opt_nodes, [*_scalars(), *params_in, *grad_out, *st_in], st_out)
    step_nodes = train_nodes + opt_nodes
    step = plan.make(
        "train_step",
        step_nodes,
        [*user_inputs, *_state_inputs(plan, step_nodes), *st_in, *_scalars(), *_seed_input(plan, step_nodes)],
        [loss_vi, *st_out, *buf_out],
        user_names,
    )
    return training, evalm, optm, step


def _write(plan: _Plan, spec: OptimizerSpec, directory: str | os.PathLike[str], *models: ModelProto) -> ArtifactPaths:
    d = os.fspath(directory)
    os.makedirs(d, exist_ok=True)
    names = ["training_model.onnx", "eval_model.onnx", "optimizer_model.onnx", "train_step.onnx"]
    paths = [os.path.join(d, n) for n in names]
    for m, p in zip(models, paths):
        save(m, p)
    state = CheckpointState()
    for name in plan.trainable + plan.frozen:
        arr = np.array(numpy_helper.to_array(plan.inits[name], plan.base_dir))
        state.parameters[name] = Parameter(name, arr, name in plan.trainable)
    for p in plan.trainable:
        for kind in spec.state_kinds:
            state.optimizer_states[f"{p}.{kind}"] = np.zeros_like(state.parameters[p].data)
    state.learning_rate = spec.lr
    ck = os.path.join(d, "checkpoint")
    CheckpointState.save_checkpoint(state, ck)
    return ArtifactPaths(paths[0], paths[1], paths[2], paths[3], ck)
