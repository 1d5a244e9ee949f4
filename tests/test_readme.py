"""The README starts with the two commands, and its op list is the registry's."""

from __future__ import annotations

import pathlib

import pytest

import onnx_light as ol
from onnx_light.cli import ops_markdown, write_ops_block

README = pathlib.Path(__file__).parent.parent / "README.md"


def _readme() -> str:
    if not README.exists():
        pytest.fail(f"{README} not found: run the tests from a checkout")
    return README.read_text()


def test_readme_opens_with_the_two_commands() -> None:
    text = _readme()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert block == ['pip install ".[demo]" && onnx-light demo', 'pip install ".[test]" && pytest']
    ci = (README.parent / ".ci" / "run").read_text()
    assert block[1] in ci


def test_readme_op_list_matches_registry() -> None:
    text = _readme()
    listed = text.split("<!-- ops:begin -->\n", 1)[1].split("<!-- ops:end -->", 1)[0]
    assert listed == ops_markdown(), "regenerate with: onnx-light ops --write README.md"


def test_ops_block_is_rewritten_in_place(tmp_path: pathlib.Path) -> None:
    page = tmp_path / "README.md"
    page.write_text("intro\n<!-- ops:begin -->\nstale\n<!-- ops:end -->\nafter\n")
    assert write_ops_block(page)
    text = page.read_text()
    assert text == "intro\n<!-- ops:begin -->\n" + ops_markdown() + "<!-- ops:end -->\nafter\n"
    assert not write_ops_block(page)  # up to date: unchanged
    page.write_text("no markers\n")
    with pytest.raises(ol.OnnxLightError, match="ops:begin"):
        write_ops_block(page)


def test_op_lists_name_real_states() -> None:
    """Each refusal names ops with rules or expansions; a no-rule op has none; forward coverage is counted."""
    import onnx_light as ol
    from onnx_light.onnx_core.ops import expandable_op_types
    from onnx_light.onnx_extensions.gradient import refusals

    reg = ol.DefaultGradRegistry()
    for r in refusals():
        for op in r.op_types:
            rule = reg.lookup(r.domain, op, 26)
            expands = op in expandable_op_types()
            assert expands or (rule is not None and not rule.no_grad), f"refusal of {op} without a rule"
    text = ops_markdown()
    missing = text.split("**No rule (", 1)[1].split(":** ", 1)[1].split(".\n", 1)[0].split(", ")
    assert "DynamicQuantizeLinear" in missing
    assert all(reg.lookup("", op, 26) is None for op in missing if op != "none")
    line = text.split("**Without a forward-mode rule yet", 1)[1].split("\n", 1)[0]
    listed = set(line.split(":** ", 1)[1].rstrip(".").split(", ")) - {"none"}
    no_jvp = {r.op_type for r in reg.rules() if r.domain == "" and not r.no_grad and r.jvp is None}
    assert listed == no_jvp, (listed, no_jvp)
