"""Op traits: what the gradient pass and the runtime's planner ask instead of naming ops.

A trait is a fact about an op that an algorithm needs without knowing the op:

* ``random``: the outputs differ from run to run unless a ``seed`` attribute is given
  (RandomNormal, Bernoulli, ...); ``random_if_input``: only when that input is given
  (Dropout's ``training_mode``);
* ``elementwise``: output element ``i`` depends on input elements ``i`` (broadcast) only;
* ``moves_elements``: every output element is a copy of an input element (Reshape,
  Gather, ...), so any bit pattern passes through unchanged;
* ``bit_exact``: the op does no float arithmetic, so its kernel handles values stored as
  bit patterns (bfloat16, float8) itself: the movers, plus Cast, Shape, If, ...;
* ``subgraphs``: the op has graph attributes (If, Loop, Scan, SequenceMap);
* ``constant``: the output is the node's ``value`` attribute;
* ``casts_to``: the attribute that names the output element type (Cast's ``to``);
* ``branches``: the subgraph attributes a boolean input 0 chooses between, the first
  when true (If's ``then_branch``, ``else_branch``): the gradient pass inlines the taken
  one when the condition is known before run time.
* ``sizes_from``: the inputs whose values set the output's shape (Range's start, limit
  and delta; Resize's roi, scales and sizes): a float initializer read there is a
  constant of the model, never a weight to train (``training.generate_artifacts``).

Each op family module declares its ops' traits with :func:`declare_traits`; an op
declared nowhere has none of them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .._proto import NodeProto
from ._table import DEFAULT_DOMAIN, OpTable, normalise_domain

__all__ = ["Traits", "NO_TRAITS", "declare_traits", "traits", "trait_table", "is_random", "op_types_with"]


@dataclass(frozen=True)
class Traits:
    """The traits of one op (see the module docstring)."""

    random: bool = False
    random_if_input: int | None = None
    elementwise: bool = False
    moves_elements: bool = False
    bit_exact: bool = False
    subgraphs: bool = False
    constant: bool = False
    casts_to: str | None = None
    #: the subgraph attributes input 0 (a boolean) selects between, the first when true (If)
    branches: tuple[str, ...] | None = None
    #: the inputs whose values set the output's shape (Range's three, Resize's roi/scales/sizes)
    sizes_from: tuple[int, ...] = ()


#: the traits of an op declared nowhere
NO_TRAITS = Traits()

_TABLE: OpTable[Traits] = OpTable("trait declaration", "declare it with onnx_core.ops.declare_traits")
_CACHE: dict[tuple[str, str], Traits] = {}
_WITH: dict[tuple[str, str], frozenset[str]] = {}


def declare_traits(
    op_types: str | tuple[str, ...], *, domain: str = DEFAULT_DOMAIN, since: int = 1, **flags: Any
) -> None:
    """Declares traits of ops (added to what is declared already for them).

    Args:
        op_types: one op type or several; a string may hold several separated by spaces.
        domain: their domain.
        since: the first opset the traits hold at.
        **flags: the :class:`Traits` fields to set.
    """
    names = op_types.split() if isinstance(op_types, str) else list(op_types)
    for op in names:
        old = _TABLE.lookup(domain, op, since) or NO_TRAITS
        _TABLE.register(domain, op, replace(old, **flags), since=since)
    _CACHE.clear()
    _WITH.clear()


def _load_families() -> None:
    """Imports the family modules, which declare their ops' traits (once; then a no-op)."""
    from . import _infer_math, _infer_nn, _infer_tensor  # noqa: F401


def traits(domain: str, op_type: str, opset: int | None = None) -> Traits:
    """The traits of ``domain::op_type`` (at ``opset``, the newest when None)."""
    if opset is None:
        key = (domain, op_type)
        found = _CACHE.get(key)
        if found is None:
            _load_families()
            versions = _TABLE.versions(domain, op_type)
            found = _TABLE.lookup(domain, op_type, versions[-1][0]) if versions else None
            found = _CACHE[key] = found or NO_TRAITS
        return found
    _load_families()
    return _TABLE.lookup(domain, op_type, opset) or NO_TRAITS


def trait_table() -> OpTable[Traits]:
    """The table of declared traits (a copy)."""
    _load_families()
    return _TABLE.copy()


def op_types_with(flag: str, domain: str = DEFAULT_DOMAIN) -> frozenset[str]:
    """The op types of ``domain`` with trait ``flag`` set at some opset (e.g. ``"subgraphs"``)."""
    d = normalise_domain(domain)
    found = _WITH.get((flag, d))
    if found is None:
        _load_families()
        found = _WITH[flag, d] = frozenset(
            e.op_type for e in _TABLE.entries() if e.domain == d and getattr(e.value, flag) not in (None, False)
        )
    return found


def is_random(node: NodeProto) -> bool:
    """True for a node whose outputs differ from run to run: a random op without ``seed``."""
    t = traits(node.domain, node.op_type)
    if not t.random and t.random_if_input is None:
        return False
    if any(a.name == "seed" for a in node.attribute):
        return False
    if t.random:
        return True
    i = t.random_if_input
    return i is not None and len(node.input) > i and bool(node.input[i])
