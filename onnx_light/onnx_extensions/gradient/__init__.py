"""The per-op gradient RULES and ``DefaultGradRegistry``.

Rules are grouped by family (math, activation, nn, normalization, reduction,
tensor, loss, ...); importing this package registers all of them.
"""

from __future__ import annotations

import importlib
import pkgutil

from ...onnx_core.gradient import GradRegistry
from ._table import REFUSALS, REGISTRY, Refusal

for _m in pkgutil.iter_modules(__path__):
    if not _m.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_m.name}")

__all__ = ["DefaultGradRegistry", "Refusal", "refusals"]


def DefaultGradRegistry() -> GradRegistry:  # noqa: N802  (the seed's name)
    """A fresh copy of the registry holding every default rule.

    Rules registered into the copy (``RegisterGradientFunction(..., registry=reg)``)
    do not leak into later copies.
    """
    return REGISTRY.copy()


def refusals() -> list[Refusal]:
    """What the default rules refuse (attribute values, input forms, unknown shapes), each
    with its reason, in declaration order: the README's table of refusals."""
    return list(REFUSALS)
