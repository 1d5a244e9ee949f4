"""Shape-only chains: what follows from tensors' shapes and constants alone runs once per shape.

Torch exports compute sizes at run time: ``Shape -> Gather -> Unsqueeze -> Concat`` feeding a
``Reshape`` or an ``Expand`` of a constant (an LSTM's zero initial state). Each of those kernels
costs a few microseconds, but 20-30 in a model where the big kernels have just flushed the caches
(crnn: 20 such steps, ~0.45 ms a run). Constant folding (``_fold.py``) cannot take them: their
root reads a value computed at run time. :func:`fuse_shape_chains` makes each connected chain one
step that keys its outputs by the shapes of the tensors its roots read: the first run with those
shapes runs the chain's kernels, later ones return the kept (read-only, like folded constants)
arrays. A root is a step whose kernel declares ``reads_only_shape`` (Shape, Size); a chain step
is a deterministic step without subgraphs whose inputs are constants or chain values, at least
one of them a chain value. The planner knows no op here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..onnx_core.ops import is_random, traits
from ._fold import FOLD_LIMIT, _frozen
from ._registry import NO_OPTIONS

if TYPE_CHECKING:  # _plan imports this module
    from ._plan import Step

__all__ = ["fuse_shape_chains"]

_KEYS = 8  # input shapes kept per chain (a session fed a few sizes)


class ShapeChain:
    """One chain's steps run as one, their outputs kept per shape of the roots' inputs."""

    def __init__(self, steps: list[Step], sources: tuple[int, ...], outputs: tuple[int, ...], constants: dict) -> None:
        self.steps = steps
        self.sources = sources
        self.outputs = outputs
        self.constants = {s: constants[s] for step in steps for s in step.inputs if s in constants}
        self.kept: dict[tuple[Any, ...], Any] = {}

    def __call__(self, *values: Any) -> Any:
        key = tuple(getattr(v, "shape", None) for v in values)
        hit = self.kept.get(key)
        if hit is not None:
            return hit
        result = self.run(values)
        if None not in key and all(isinstance(o, np.ndarray) and o.size <= FOLD_LIMIT for o in result):
            if len(self.kept) >= _KEYS:
                self.kept.clear()
            result = tuple(_frozen(o) for o in result)
            self.kept[key] = result[0] if len(result) == 1 else result
        return result[0] if len(result) == 1 else result

    def run(self, values: tuple[Any, ...]) -> tuple[Any, ...]:
        """The chain's kernels in order; a kernel's error names its own node (RuntimeFailure)."""
        from ._plan import _failure

        local: dict[int, Any] = dict(self.constants)
        local.update(zip(self.sources, values))
        for step in self.steps:
            args = [local.get(s) if s else None for s in step.inputs]
            try:
                result = step.fn(*args, **step.kwargs)
            except Exception as err:
                raise _failure(step, args, err) from err
            outs = result if type(result) is tuple else (result,)
            local.update(zip(step.outputs, outs))
        return tuple(local.get(s) for s in self.outputs)


def _chain_step(step: Step, constants: dict[int, Any], derived: set[int]) -> bool:
    """Whether ``step`` joins a chain: a root, or pure with chain and constant inputs only."""
    node = step.node
    if is_random(node) or traits(node.domain, node.op_type).subgraphs or "_captured" in step.kwargs:
        return False
    ins = [s for s in step.inputs if s != 0]
    if step.options.reads_only_shape:
        return len(ins) == 1 and ins[0] not in constants
    return bool(ins) and all(s in constants or s in derived for s in ins) and any(s in derived for s in ins)


def _components(steps: list[Step], members: list[int]) -> list[list[int]]:
    """The chain steps (indices) grouped by the values they share, each group in plan order."""
    parent = {i: i for i in members}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    made = {s: i for i in members for s in steps[i].outputs}
    for i in members:
        for s in steps[i].inputs:
            if s in made:
                parent[root(i)] = root(made[s])
    groups: dict[int, list[int]] = {}
    for i in members:
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())


def fuse_shape_chains(steps: list[Step], constants: dict[int, Any], keep: set[int]) -> list[Step]:
    """The plan's steps with each shape-only chain of at least two steps as one :class:`ShapeChain`
    step, placed just before the first step outside it that reads one of its values; a chain
    measuring a tensor made only after that point is left as it is, and so are the chain steps
    writing a kept slot (a graph output: they run as steps of their own)."""
    from ._plan import Step

    derived: set[int] = set()
    members: list[int] = []
    for i, step in enumerate(steps):
        if _chain_step(step, constants, derived) and not any(s in keep for s in step.outputs):
            derived.update(step.outputs)
            members.append(i)
    read_by: dict[int, list[int]] = {}
    for i, step in enumerate(steps):
        for s in set(step.inputs) & derived:
            read_by.setdefault(s, []).append(i)
    producer = {s: i for i, step in enumerate(steps) for s in step.outputs}
    dropped: set[int] = set()
    before: dict[int, list[Step]] = {}
    for group in _components(steps, members):
        if len(group) < 2:
            continue
        inside = set(group)
        made = {s for i in group for s in steps[i].outputs}
        readers = {s: [i for i in read_by.get(s, ()) if i not in inside] for s in made}
        outputs = tuple(s for s in sorted(made) if readers[s])
        # the tensors measured (a Shape of a value the chain makes itself reads it inside)
        roots = (steps[i].inputs[0] for i in group if steps[i].options.reads_only_shape)
        sources = tuple(dict.fromkeys(s for s in roots if s not in made))
        if not outputs:
            continue
        # just before the first step outside it that reads it, once every tensor it measures exists
        at = min(min(readers[s]) for s in outputs)
        if any(producer.get(s, -1) >= at for s in sources):
            continue
        chain = ShapeChain([steps[i] for i in group], sources, outputs, constants)
        head = steps[group[0]]
        fused = tuple(steps[i].node.op_type for i in group[1:])
        dropped.update(group)
        before.setdefault(at, []).append(Step(chain, sources, outputs, {}, head.node, head.opset, NO_OPTIONS, fused))
    out: list[Step] = []
    for i, step in enumerate(steps):
        out.extend(before.get(i, ()))
        if i not in dropped:
            out.append(step)
    return out
