"""``lookup_schema``: one op's schema without building the whole table (a fresh process's first
transform checks a few dozen ops; the table of ~700 schemas cost it ~40 ms)."""

from __future__ import annotations

import subprocess
import sys

from onnx_light.onnx_core.ops._schema import lookup_schema, schema_table


def test_one_op_lookup_agrees_with_the_table() -> None:
    table = schema_table()
    for domain, op_type in table.ops():
        sinces = [since for since, _ in table.versions(domain, op_type)]
        for opset in {s + k for s in sinces for k in (-1, 0, 1)} | {30}:
            assert lookup_schema(domain, op_type, opset) == table.lookup(domain, op_type, opset), (op_type, opset)
    assert lookup_schema("", "NoSuchOp", 21) is None
    assert lookup_schema("ai.onnx", "Relu", 14) == table.lookup("", "Relu", 14)


def test_signature_checks_do_not_build_the_table() -> None:
    code = (
        "from onnx_light.onnx_core.ops import _schema, _signature\n"
        "_signature.signature('Relu', 14); _schema.get_schema('Split', 18)\n"
        "assert _schema.schema_table.cache_info().currsize == 0\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
