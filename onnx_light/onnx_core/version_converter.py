"""onnx's version converter, protobuf-free: ``convert_version(model, target_version)``.

Upgrades the default-domain opset of a model (7 -> 21 and newer): the nodes of ops whose
signature or meaning changed on the way are rewritten by the op-schema layer's upgrades
(``@upgrade`` beside each op's inference in ``ops/``; the ones the gradient pass uses on
torch exports: Reduce* axes, Split, Squeeze/Unsqueeze, Slice, Pad, Clip, Dropout, Softmax
family, BatchNormalization, TopK, Scatter, Upsample/Resize, GroupNormalization,
ConvTranspose's odd padding, RoiAlign, GridSample, DFT), in the main graph, every
subgraph and every model-local function; every other op keeps its node. Each converted
node is then checked against its schema at the target opset, so an op the upgrades do
not cover fails with the node's name and reason instead of producing an invalid model. Downgrades
are refused.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator

from ._check_node import CheckerContext, NodeChecks, ValidationError, node_label
from ._errors import GradientError, OnnxLightError
from ._infer_model import infer_graph
from ._proto import AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto
from .gradient._types import ValueType
from .helper import find_min_ir_version_for
from .ops import has_schema, normalise_domain, op_label, schema_table
from .ops._upgrade import upgrade_nodes

__all__ = ["ConvertError", "convert_version", "newest_opset"]


class ConvertError(OnnxLightError, ValueError):
    """A model cannot be converted to the asked opset (the message says which node and why)."""


def newest_opset() -> int:
    """The newest default-domain opset the op-schema layer knows."""
    return max(e.since for e in schema_table().entries() if e.domain == "")


def _subgraphs(node: NodeProto) -> Iterator[GraphProto]:
    for a in node.attribute:
        if a.type == AttributeProto.GRAPH:
            yield a.g
        elif a.type == AttributeProto.GRAPHS:
            yield from a.graphs


def _all_names(graph: GraphProto, into: set[str]) -> set[str]:
    into.update(v.name for v in graph.input)
    into.update(v.name for v in graph.output)
    into.update(t.name for t in graph.initializer)
    for node in graph.node:
        into.update(node.input)
        into.update(node.output)
        for g in _subgraphs(node):
            _all_names(g, into)
    return into


class _Converter:
    """One conversion: fresh names, then each graph upgraded from the inside out."""

    def __init__(self, taken: set[str], source: int, target: int) -> None:
        self.source, self.target = source, target
        self.taken = taken
        self.counter = itertools.count()
        self.ctx = CheckerContext(opset_imports={"": target}, is_main_graph=False)

    def new_name(self, prefix: str) -> str:
        """A value name used nowhere in the model."""
        while True:
            name = f"{prefix}_v{self.target}_{next(self.counter)}"
            if name not in self.taken:
                self.taken.add(name)
                return name

    def graph(self, graph: GraphProto, outer: dict[str, ValueType]) -> None:
        """Upgrades ``graph``'s nodes (and their subgraphs) in place."""
        types = infer_graph(graph, self.source, outer).types

        def dtype_of(name: str) -> int:
            return types[name].dtype if name in types else 0

        def shape_of(name: str) -> object:
            return types[name].shape if name in types else None

        for i, node in enumerate(graph.node):
            if normalise_domain(node.domain) == "" and not has_schema(node.op_type, self.source):
                raise ConvertError(
                    f"graph {graph.name!r}: {node_label(node, i)}: {op_label('', node.op_type)} does not exist at "
                    f"the model's opset {self.source}; fix the model first (onnx_light.checker.check_model)"
                )
        try:
            nodes = upgrade_nodes(
                list(graph.node), self.source, self.target, self.new_name, dtype_of, None, shape_of, subgraphs=False
            )
        except GradientError as e:
            raise ConvertError(f"graph {graph.name!r}: {e}") from None
        for node in nodes:
            for g in _subgraphs(node):
                self.graph(g, types)
        graph.node = nodes
        for i, node in enumerate(nodes):
            self.verify(graph, i, node)

    def function(self, fn: FunctionProto) -> None:
        """Upgrades a model-local function's nodes (their types unknown) in place."""
        here = f"function {fn.domain}::{fn.name}"
        try:
            nodes = upgrade_nodes(list(fn.node), self.source, self.target, self.new_name, subgraphs=False)
        except GradientError as e:
            raise ConvertError(f"{here}: {e}") from None
        for node in nodes:
            for g in _subgraphs(node):
                self.graph(g, {})
        fn.node = nodes
        for i, node in enumerate(nodes):
            self.verify(here, i, node)

    def verify(self, where: GraphProto | str, index: int, node: NodeProto) -> None:
        """The converted node is valid at the target opset; else a ConvertError saying why."""
        if normalise_domain(node.domain) != "":
            return
        scope = f"graph {where.name!r}" if isinstance(where, GraphProto) else where
        at = f"{scope}: {node_label(node, index)}"
        try:
            checks = NodeChecks(self.ctx, lambda _name: None, lambda _g, _where: None)
            schema = checks.schema(node, at)
            if schema is not None:
                checks.arity(node, schema, at)
                checks.attributes(node, schema, at)
        except ValidationError as e:
            raise ConvertError(
                f"cannot convert from opset {self.source} to {self.target}: {e}; no adapter covers this change "
                "of the op's signature (re-export the model at the target opset)"
            ) from None


def _with_default(imports: list[OperatorSetIdProto], version: int) -> list[OperatorSetIdProto]:
    default = OperatorSetIdProto()
    default.domain = ""
    default.version = version
    return [default, *(o for o in imports if normalise_domain(o.domain) != "")]


def convert_version(model: ModelProto, target_version: int) -> ModelProto:
    """Converts ``model`` to default-domain opset ``target_version``, as ``onnx.version_converter`` does.

    Args:
        model: the model (never modified).
        target_version: the default-domain opset to reach; not below the model's.

    Returns:
        A new ModelProto importing ``target_version`` (its IR version raised if needed).

    Raises:
        ConvertError: a downgrade, an unknown target, or a node no adapter can express
            at the target opset (naming the node, its ``domain::op_type`` and why).
    """
    source = next((o.version for o in model.opset_import if normalise_domain(o.domain) == ""), None)
    if source is None:
        raise ConvertError("the model imports no default-domain (ai.onnx) opset; there is nothing to convert")
    newest = newest_opset()
    if target_version > newest:
        raise ConvertError(f"target opset {target_version} is newer than the newest this build knows ({newest})")
    if target_version < source:
        raise ConvertError(
            f"downgrading from opset {source} to {target_version} is not supported: the newer ops' meanings "
            "cannot in general be expressed at the older opset; export the model at the opset you need"
        )
    out = copy.deepcopy(model)
    if target_version == source:
        return out
    _Converter(_all_names(out.graph, set()), source, target_version).graph(out.graph, {})
    out.opset_import = _with_default(list(out.opset_import), target_version)
    for fn in out.functions:
        version = next((o.version for o in fn.opset_import if normalise_domain(o.domain) == ""), None)
        if version is not None and version < target_version:
            names = set(fn.input) | set(fn.output) | {v for n in fn.node for v in [*n.input, *n.output]}
            _Converter(names, version, target_version).function(fn)
            fn.opset_import = _with_default(list(fn.opset_import), target_version)
    out.ir_version = max(out.ir_version, find_min_ir_version_for(out.opset_import, ignore_unknown=True))
    return out
