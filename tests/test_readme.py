"""The README starts with the two commands, and its op list is the registry's."""

from __future__ import annotations

import pathlib

import pytest

from onnx_light.cli import ops_markdown

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
    assert listed == ops_markdown(), "regenerate with: onnx-light ops"
