"""onnxruntime-training 1.19.2 and onnx_light.training read each other's checkpoints.

Runs OUTSIDE CI, in its own virtual environment (onnxruntime-training and onnxruntime
install the same ``onnxruntime`` module, and its ``onnxruntime.training`` package imports
torch, so this uses the C binding the Python API wraps):

    python -m venv /tmp/ortt && /tmp/ortt/bin/pip install onnxruntime-training==1.19.2 numpy flatbuffers
    PYTHONPATH=. /tmp/ortt/bin/python benchmarks/ortt_interop.py

Ours -> theirs: artifacts and one AdamW step with onnx_light, save, onnxruntime-training's
``load_checkpoint`` sees every parameter (values, requires_grad) and the properties.
Theirs -> ours: it adds a property and saves (with the optimizer state); we load the
file and find the same parameters, optimizer states and properties.
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from onnxruntime.capi import _pybind_state as C  # noqa: E402

from onnx_light import training as olt  # noqa: E402

MODEL = os.path.join(os.path.dirname(HERE), "tests", "training", "data", "mlp.onnx")


def main() -> int:
    bad = []
    with tempfile.TemporaryDirectory() as d:
        olt.generate_artifacts(MODEL, loss="CrossEntropyLoss", optimizer="AdamW", artifact_directory=d)
        state = olt.CheckpointState.load_checkpoint(os.path.join(d, "checkpoint"))
        module = olt.Module(os.path.join(d, "training_model.onnx"), state)
        opt = olt.Optimizer(os.path.join(d, "optimizer_model.onnx"), module)
        rng = np.random.default_rng(0)
        module(rng.standard_normal((8, 20)).astype(np.float32), rng.integers(0, 5, 8))
        opt.step()
        state.properties.update({"epoch": 4, "best": 0.25, "note": "from onnx_light"})
        ours = os.path.join(d, "ours.ckpt")
        olt.CheckpointState.save_checkpoint(state, ours)

        theirs_state = C.load_checkpoint(ours)
        names = sorted(theirs_state.parameter_names())
        if names != sorted(state.parameters):
            bad.append(f"parameter names differ: {names}")
        for n in names:
            p = theirs_state.get_parameter(n)
            data = p.data.numpy() if hasattr(p.data, "numpy") else np.asarray(p.data)
            if not np.array_equal(data, state.parameters[n].data):
                bad.append(f"{n}: data differs")
            if bool(p.requires_grad) != state.parameters[n].requires_grad:
                bad.append(f"{n}: requires_grad differs")
        props = {k: theirs_state.get_property(k) for k in theirs_state.property_names()}
        if props != {"epoch": 4, "best": 0.25, "note": "from onnx_light"}:
            bad.append(f"properties differ: {props}")
        print(f"ours -> onnxruntime-training: {len(names)} parameters, properties {props}")

        theirs_state.add_property("their_prop", 7)
        theirs = os.path.join(d, "theirs.ckpt")
        C.save_checkpoint(theirs_state, theirs, True)
        back = olt.CheckpointState.load_checkpoint(theirs)
        for n, p in state.parameters.items():
            if n not in back.parameters or not np.array_equal(back.parameters[n].data, p.data):
                bad.append(f"{n}: lost or changed on the way back")
        missing = sorted(set(state.optimizer_states) - set(back.optimizer_states))
        if missing:
            bad.append(f"optimizer states lost on the way back: {missing[:4]}")
        if back.properties.get("their_prop") != 7:
            bad.append(f"their property is missing: {back.properties}")
        print(
            f"onnxruntime-training -> ours: {len(back.parameters)} parameters, "
            f"{len(back.optimizer_states)} optimizer states, step {back.optimizer_step}, properties {back.properties}"
        )
    for b in bad:
        print("FAIL", b)
    print("interop OK" if not bad else f"{len(bad)} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
