"""The README's op tables, generated from the gradient registry and the op-schema layer.

``onnx-light ops`` prints them; ``onnx-light ops --write README.md`` rewrites the block
between ``<!-- ops:begin -->`` and ``<!-- ops:end -->`` in place (one command after a merge).
"""

from __future__ import annotations

import pathlib

from .defs import get_all_schemas, has
from .onnx_core import OnnxLightError
from .onnx_core.ops import OpSchema, body_op_types, expandable_op_types
from .onnx_extensions.gradient import DefaultGradRegistry, refusals

__all__ = ["ops_markdown", "write_ops_block", "BEGIN", "END"]

BEGIN = "<!-- ops:begin -->\n"
END = "<!-- ops:end -->"
_FLOATS = {"tensor(float)", "tensor(double)", "tensor(float16)", "tensor(bfloat16)"}


def _carries_floats(schema: OpSchema) -> bool:
    """True when some input and some output of ``schema`` may be a floating-point tensor."""
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}

    def floats(params: tuple[object, ...]) -> bool:
        for p in params:
            type_str = getattr(p, "type_str", "")
            if _FLOATS & allowed.get(type_str, {type_str}):
                return True
        return False

    return floats(schema.inputs) and floats(schema.outputs)


def _without_rule(known: set[str]) -> list[str]:
    """Default-domain ops with floating-point inputs and outputs that have no gradient state."""
    # a deprecated op (Upsample, Scatter) is upgraded to its successor before differentiation
    return sorted(
        s.name
        for s in get_all_schemas()
        if s.domain == "" and s.name not in known and not s.deprecated and _carries_floats(s)
    )


def _expanded(known: set[str], exact: set[str]) -> list[str]:
    """Ops with no rule that differentiate through their expansion (the spec's static body or
    our decomposition): every op of a static body must have an exact rule (not a
    straight-through estimator) or an expansion itself."""
    candidates = {op for op in expandable_op_types() if has(op)} - known
    return sorted(op for op in candidates if (body_op_types(op) or frozenset()) <= exact | candidates)


def ops_markdown() -> str:
    """The README's op lists: ops with gradient rules (and which lack a forward rule), ops
    declared without gradient, ops with no rule, and the table of what rules refuse."""
    rules = [r for r in DefaultGradRegistry().rules() if r.domain == ""]
    with_rule = sorted({r.op_type for r in rules if not r.no_grad})
    no_jvp = sorted({r.op_type for r in rules if not r.no_grad and r.jvp is None})
    no_grad = sorted({r.op_type for r in rules if r.no_grad})
    exact = {r.op_type for r in rules if not r.straight_through}
    expanded = _expanded({r.op_type for r in rules}, exact)
    missing = _without_rule({r.op_type for r in rules} | set(expanded))
    lines = [
        f"**Gradient rules ({len(with_rule)} ops; {len(with_rule) - len(no_jvp)} with a forward-mode "
        f"(JVP) rule too):** {', '.join(with_rule)}.",
        "",
        f"**Differentiated through their expansion ({len(expanded)} ops; the spec's function body or our "
        f"decomposition, see onnx_core/ops/_expand.py):** {', '.join(expanded) or 'none'}.",
        "",
        f"**Without a forward-mode rule yet ({len(no_jvp)} ops; reverse mode only):** {', '.join(no_jvp) or 'none'}.",
        "",
        f"**Declared without gradient ({len(no_grad)} ops; their outputs are constants to the pass):** "
        f"{', '.join(no_grad)}.",
        "",
        f"**No rule ({len(missing)} ops with floating-point inputs and outputs; a path through one is an "
        f"error naming the node):** {', '.join(missing) or 'none'}.",
        "",
        "**Refused, with an error naming the node** (never a silent zero):",
        "",
        "| op | what is refused | why |",
        "|---|---|---|",
    ]
    for r in sorted(refusals(), key=lambda r: r.op_types[0]):
        ops = ", ".join(r.op_types if not r.domain else (f"{r.domain}::{op}" for op in r.op_types))
        lines.append(f"| {ops} | {r.what} | {r.why} |")
    return "\n".join(lines) + "\n"


def write_ops_block(path: str | pathlib.Path) -> bool:
    """Rewrites the block between the markers of the file ``path`` with :func:`ops_markdown`.

    Returns:
        True when the file changed.

    Raises:
        OnnxLightError: the file has no ``<!-- ops:begin -->`` ... ``<!-- ops:end -->`` block.
    """
    p = pathlib.Path(path)
    text = p.read_text()
    if BEGIN not in text or END not in text.split(BEGIN, 1)[1]:
        raise OnnxLightError(f"{p} has no {BEGIN.strip()} ... {END} block to rewrite; add the two markers")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    new = head + BEGIN + ops_markdown() + END + tail
    if new == text:
        return False
    p.write_text(new)
    return True
