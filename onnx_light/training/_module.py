"""Module and Optimizer: run the artifacts in our runtime or in onnxruntime."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..onnx_core import OnnxLightError, helper, load, numpy_helper, save
from ..runtime import InferenceSession
from ._checkpoint import CheckpointState, check_matches
from ._graphs import assemble, used_values
from ._optimizers import check_learning_rate

__all__ = ["Module", "Optimizer"]

BACKENDS = ("onnx_light", "onnxruntime")
USER_INPUTS_KEY = "onnx_light.training.user_inputs"
SEED_INPUT_KEY = "onnx_light.training.seed_input"
SEED_PROPERTY = "dropout_seed"  # the next Dropout seed, kept in the checkpoint


class _Session:
    """One artifact, loaded in the chosen backend; ``inputs``/``outputs`` are names."""

    def __init__(self, uri: str | os.PathLike[str], backend: str, providers: Sequence[Any] | None) -> None:
        if backend not in BACKENDS:
            raise OnnxLightError(f"unknown backend {backend!r}; choose one of {BACKENDS}")
        self.path = os.fspath(uri)
        self.model = load(self.path)
        g = self.model.graph
        self.inputs = [i.name for i in g.input]
        self.meta = {p.key: p.value for p in self.model.metadata_props}
        self.seed = self.meta.get(SEED_INPUT_KEY)
        self.outputs = [o.name for o in g.output]
        self.types = {
            i.name: (
                np.dtype(helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)),
                tuple(d.dim_value for d in i.type.tensor_type.shape.dim),
            )
            for i in g.input
            if all(d.HasField("dim_value") for d in i.type.tensor_type.shape.dim)
        }
        self._sess: Any
        if backend == "onnxruntime":
            import onnxruntime  # the caller asked for it: an optional dependency

            self._sess = onnxruntime.InferenceSession(self.path, providers=list(providers or ["CPUExecutionProvider"]))
        else:
            self._sess = InferenceSession(self.model)

    def user_inputs(self, state: CheckpointState) -> list[str]:
        """The inputs the caller feeds: as generate_artifacts recorded, else those not in ``state``."""
        if USER_INPUTS_KEY in self.meta:
            return list(json.loads(self.meta[USER_INPUTS_KEY]))
        return [
            n for n in self.inputs if n not in state.parameters and n not in state.optimizer_states and n != self.seed
        ]

    def run(self, feeds: dict[str, Any]) -> list[np.ndarray]:
        return [np.asarray(v) for v in self._sess.run(None, feeds)]


class Module:
    """The trainable model: ``module(*inputs)`` runs the training (or eval) artifact.

    In training mode the gradients (``state.parameters[name].grad``) accumulate over calls
    until ``lazy_reset_grad()``, and BatchNormalization running statistics are updated.

    Args:
        training_model_uri: training_model.onnx from ``generate_artifacts``.
        state: the CheckpointState holding the parameters (updated in place).
        eval_model_uri: eval_model.onnx (needed by ``eval()`` and the inference export).
        backend: "onnx_light" (our runtime) or "onnxruntime".
        providers: onnxruntime's execution providers (backend "onnxruntime").
    """

    def __init__(
        self,
        training_model_uri: str | os.PathLike[str],
        state: CheckpointState,
        eval_model_uri: str | os.PathLike[str] | None = None,
        *,
        backend: str = "onnx_light",
        providers: Sequence[Any] | None = None,
    ) -> None:
        self._state = state
        self._backend, self._providers = backend, providers
        self._train = _Session(training_model_uri, backend, providers)
        self._eval_uri = eval_model_uri
        self._eval: _Session | None = None
        self._check(self._train, "training_model.onnx")
        self.training = True
        self._reset = False
        self._grads = {o: o[: -len("_grad")] for o in self._train.outputs[1:] if o.endswith("_grad")}
        self._buffers = {o: o[: -len("_next")] for o in self._train.outputs[1:] if o.endswith("_next")}

    def _check(self, sess: _Session, what: str) -> None:
        state_inputs = [n for n in sess.inputs if n not in sess.user_inputs(self._state) and n != sess.seed]
        check_matches(self._state, {n: sess.types.get(n) for n in state_inputs}, what)

    def _session(self) -> _Session:
        if self.training:
            return self._train
        if self._eval is None:
            if self._eval_uri is None:
                raise OnnxLightError("eval() needs eval_model_uri: pass eval_model.onnx to Module(...)")
            self._eval = _Session(self._eval_uri, self._backend, self._providers)
            self._check(self._eval, "eval_model.onnx")
        return self._eval

    def user_inputs(self) -> list[str]:
        """The names of the inputs ``module(*inputs)`` takes, in order."""
        return self._session().user_inputs(self._state)

    def __call__(self, *inputs: Any) -> Any:
        """Runs one forward (and, when training, backward) pass; returns the loss.

        In eval mode the eval model's other outputs follow the loss.
        """
        sess = self._session()
        names = sess.user_inputs(self._state)
        if len(inputs) != len(names):
            raise OnnxLightError(f"the module takes {len(names)} inputs {names}, got {len(inputs)}")
        feeds = {n: np.asarray(v) for n, v in zip(names, inputs)}
        params = self._state.parameters
        for n in sess.inputs:
            if n in params:
                feeds[n] = params[n].data
        if sess.seed is not None:
            # each training call draws new Dropout masks; the counter is in the checkpoint
            seed = int(self._state.properties.get(SEED_PROPERTY, 0))
            feeds[sess.seed] = np.array(seed, np.int64)
            self._state.properties[SEED_PROPERTY] = seed + 1
        outs = dict(zip(sess.outputs, sess.run(feeds)))
        if not self.training:
            vals = [outs[o] for o in sess.outputs]
            return vals[0] if len(vals) == 1 else vals
        for out, name in self._grads.items():
            p = params[name]
            p.grad = outs[out] if (self._reset or p.grad is None) else p.grad + outs[out]
        for out, name in self._buffers.items():
            params[name].data = outs[out]
        self._reset = False
        return outs[sess.outputs[0]]

    def fixed_batch(self) -> int | None:
        """The batch size the training model fixes (its first data input's first dim), or None."""
        names = self._train.user_inputs(self._state)
        shape = self._train.types.get(names[0]) if names else None
        return int(shape[1][0]) if shape and len(shape[1]) else None

    def lazy_reset_grad(self) -> None:
        """The next call replaces the gradients instead of adding to them."""
        self._reset = True

    def train(self, mode: bool = True) -> Module:
        """Training mode (gradients, batch statistics); ``train(False)`` is ``eval()``."""
        self.training = bool(mode)
        return self

    def eval(self) -> Module:
        """Evaluation mode: runs the eval model (running statistics, no gradients)."""
        return self.train(False)

    def export_model_for_inferencing(
        self, inference_model_uri: str | os.PathLike[str], graph_output_names: Sequence[str]
    ) -> None:
        """Writes the forward model with the current parameters embedded as initializers.

        Args:
            inference_model_uri: where to write the model.
            graph_output_names: the outputs to keep (e.g. ``["logits"]``).
        """
        if self._eval_uri is None:
            raise OnnxLightError(
                "export_model_for_inferencing needs eval_model_uri: pass eval_model.onnx to Module(...)"
            )
        em = load(os.fspath(self._eval_uri))
        g = em.graph
        known = {o.name: o for o in g.output}
        bad = [n for n in graph_output_names if n not in known]
        if bad:
            raise OnnxLightError(f"{bad} are not outputs of the eval model; it has {list(known)[1:]}")
        nodes = assemble([], list(g.node), list(graph_output_names), _no_names)
        reads = set(used_values(nodes))
        params = self._state.parameters
        inits = [numpy_helper.from_array(np.asarray(params[n].data), n) for n in params if n in reads]
        inits += [t for t in g.initializer if t.name in reads and t.name not in params]
        inputs = [i for i in g.input if i.name in reads and i.name not in params]
        graph = helper.make_graph(nodes, "inference", inputs, [known[n] for n in graph_output_names], initializer=inits)
        out = helper.make_model(
            graph, opset_imports=list(em.opset_import), ir_version=em.ir_version, functions=list(em.functions)
        )
        out.producer_name = "onnx_light.training"
        save(out, os.fspath(inference_model_uri))


def _no_names(hint: str) -> str:
    """assemble's namer, for node lists that never compute a value twice."""
    raise AssertionError(f"the eval model computes a value twice ({hint})")


class Optimizer:
    """Runs optimizer_model.onnx on a Module's parameters and gradients.

    Args:
        optimizer_model_uri: optimizer_model.onnx from ``generate_artifacts``.
        module: the Module whose state it updates.
    """

    def __init__(self, optimizer_model_uri: str | os.PathLike[str], module: Module) -> None:
        self._module = module
        self._state = module._state
        self._sess = _Session(optimizer_model_uri, module._backend, module._providers)
        expected = {
            n: t for n, t in self._sess.types.items() if n not in ("learning_rate", "step") and not n.endswith("_grad")
        }
        check_matches(self._state, expected, "optimizer_model.onnx")

    def step(self) -> None:
        """Updates every trainable parameter and its optimizer states (one torch.optim step)."""
        state = self._state
        feeds: dict[str, Any] = {
            "learning_rate": np.array(state.learning_rate, np.float32),
            "step": np.array(state.optimizer_step + 1, np.int64),
        }
        for n in self._sess.inputs:
            if n in feeds:
                continue
            if n in state.parameters:
                feeds[n] = state.parameters[n].data
            elif n in state.optimizer_states:
                feeds[n] = state.optimizer_states[n]
            elif n.endswith("_grad") and n[: -len("_grad")] in state.parameters:
                grad = state.parameters[n[: -len("_grad")]].grad
                if grad is None:
                    raise OnnxLightError(
                        f"{n[:-5]!r} has no gradient yet: call module(*inputs) before optimizer.step()"
                    )
                feeds[n] = grad
            else:
                raise OnnxLightError(f"optimizer_model.onnx needs {n!r}, which the checkpoint does not hold")
        for name, value in zip(self._sess.outputs, self._sess.run(feeds)):
            base = name[: -len("_next")]
            if base in state.parameters:
                state.parameters[base].data = value
            else:
                state.optimizer_states[base] = value
        state.optimizer_step += 1

    def set_learning_rate(self, learning_rate: float) -> None:
        """Sets the learning rate of the following steps (kept in the checkpoint)."""
        self._state.learning_rate = check_learning_rate(learning_rate)

    def get_learning_rate(self) -> float:
        """The current learning rate."""
        return float(self._state.learning_rate)
