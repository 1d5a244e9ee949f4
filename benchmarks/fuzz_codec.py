"""Runs many mutated ONNX models through the decoder and counts the outcomes.

Every input must either decode or raise ``DecodeError``; anything else (another
exception, or a DecodeError from the decoder's "malformed input" safety net, which
means an internal bug was caught) is listed. onnx's own protobuf decoder is run on the
same bytes for comparison of accept/reject decisions.

Both decoders run on every input when the native codec is built: the pure-Python twin
(``_wire.decode_into_twin`` + ``encode_twin``) and the native one (``src/codec.cpp``).
They must agree exactly: both succeed with the same re-encoded bytes (and equal
messages; the native encoder also re-encodes the twin's message to the same bytes),
or both raise DecodeError with the same reason, byte offset and path. Disagreements
are listed and make the script fail.

    PYTHONPATH=. python benchmarks/fuzz_codec.py [--count 100000] [--seed 0]
"""

from __future__ import annotations

import argparse
import collections
import random
import struct
import sys
import time
from typing import Any

import numpy as np
import onnx
from onnx import helper as H
from onnx import numpy_helper

import onnx_light.onnx_core as oc
from onnx_light.onnx_core import _native_codec, _wire
from onnx_light.onnx_core._message import Message


def seed_models() -> list[bytes]:
    """A few small valid models covering every wire type and a nested subgraph."""
    x = H.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, "N"])
    y = H.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    body = H.make_graph(
        [H.make_node("Neg", ["x"], ["y"])], "body", [x], [y],
        [numpy_helper.from_array(np.arange(4, dtype=np.int64), "k")],
    )  # fmt: skip
    nodes = [
        H.make_node("Transpose", ["x"], ["t"], perm=[1, 0], name="tr"),
        H.make_node("If", ["c"], ["y"], then_branch=body, else_branch=body),
        H.make_node("Constant", [], ["s"], value_floats=[1.5, -2.0], value_string="héllo"),
        H.make_node("Custom", ["t"], ["z"], domain="my", alpha=-0.5, i=-7),
    ]
    inits = [
        numpy_helper.from_array(np.linspace(0, 1, 300, dtype=np.float32), "w"),
        H.make_tensor("ints", onnx.TensorProto.INT64, [3], [1, -1, 1 << 40]),
        H.make_tensor("f", onnx.TensorProto.FLOAT, [2], [0.5, 1.5]),
        H.make_tensor("d", onnx.TensorProto.DOUBLE, [1], [0.25]),
    ]
    graph = H.make_graph(nodes, "g", [x], [y], inits)
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 17), H.make_opsetid("my", 1)])
    model.metadata_props.add(key="k", value="v")
    model.functions.append(H.make_function("my", "F", ["a"], ["b"], [H.make_node("Relu", ["a"], ["b"])], []))
    small = H.make_model(H.make_graph([H.make_node("Relu", ["x"], ["y"])], "g", [x], [y]))
    return [model.SerializeToString(), small.SerializeToString()]


def mutate(rng: random.Random, data: bytes) -> bytes:
    """One to four random edits: bit flips, truncation, insertion, deletion, bad lengths."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(7)
        pos = rng.randrange(len(buf)) if buf else 0
        if kind == 0 and buf:
            buf[pos] ^= 1 << rng.randrange(8)
        elif kind == 1:
            del buf[pos:]
        elif kind == 2:
            buf[pos:pos] = rng.randbytes(rng.randint(1, 12))
        elif kind == 3:
            del buf[pos : pos + rng.randint(1, 8)]
        elif kind == 4 and buf:
            buf[pos] = rng.randrange(256)
        elif kind == 5:
            n = rng.choice([len(buf), len(buf) - pos + 1, 1 << 31, 1 << 62, (1 << 64) - 1])
            buf[pos:pos] = bytes([rng.choice([0x0A, 0x12, 0x2A, 0x3A, 0x4A])]) + _wire._varint(n)
        else:
            # duplicate a slice: repeated fields, merged singular messages
            a = rng.randrange(len(buf) + 1)
            b = min(len(buf), a + rng.randint(1, 64))
            buf[pos:pos] = buf[a:b]
    return bytes(buf)


class _Codec:
    """decode(bytes) -> message and encode(message) -> bytes with one codec selected."""

    def __init__(self, name: str) -> None:
        self.name = name

    def decode(self, data: bytes) -> Any:
        msg = oc.ModelProto()
        if self.name == "native":
            old = _native_codec.set_enabled(True)
            try:
                _wire.decode_into(msg, data)
            finally:
                _native_codec.set_enabled(old)
        else:
            _wire.decode_into_twin(msg, data)
        return msg

    def encode(self, msg: Any) -> bytes:
        if self.name == "native":
            assert _native_codec.NATIVE is not None
            return _native_codec.NATIVE.encode(msg)  # type: ignore[no-any-return]
        return _wire.encode_twin(msg)


def _decoders() -> dict[str, _Codec]:
    decoders = {"python": _Codec("python")}
    if _native_codec.available():
        decoders["native"] = _Codec("native")
    else:
        print("onnx_light._native: not built; only the pure-Python decoder is fuzzed")
    return decoders


def _same(a: Any, b: Any) -> bool:
    """Field-by-field equality of two decoded values: same types, NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, Message):
        names = [f.slot for f in a.FIELDS] + ["_unknown", "_implicit"]
        for slot in names:
            x, y = getattr(a, slot, None), getattr(b, slot, None)
            if not _same(x, y):
                return False
        return True
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, memoryview):
        return bytes(a) == bytes(b)
    return bool(a == b)


def _run(codec: _Codec, data: bytes) -> tuple[str, Any, Any]:
    """(outcome, detail, message): detail is the re-encoding or the error's (reason, offset, path)."""
    try:
        msg = codec.decode(data)
        again = codec.encode(msg)
        codec.decode(again)
        return "ok", again, msg
    except oc.DecodeError as err:
        outcome = "masked" if err.reason.startswith("malformed input") else "DecodeError"
        return outcome, (err.reason, err.offset, err.path), None
    except Exception as err:  # noqa: BLE001  (counting everything is the point)
        return "other", f"{type(err).__name__}: {err}", None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    seeds = seed_models()
    decoders = _decoders()
    counts: dict[str, collections.Counter[str]] = {k: collections.Counter() for k in decoders}
    agree: collections.Counter[str] = collections.Counter()
    twins: collections.Counter[str] = collections.Counter()
    problems: list[str] = []
    start = time.perf_counter()
    for i in range(args.count):
        data = mutate(rng, rng.choice(seeds))
        try:
            onnx.ModelProto.FromString(data)
            theirs = "ok"
        except Exception:
            theirs = "error"
        results = {}
        for name, codec in decoders.items():
            outcome, detail, msg = results[name] = _run(codec, data)
            counts[name][outcome] += 1
            if outcome in ("masked", "other"):
                problems.append(f"#{i} {name}: {detail} input={data.hex()}")
            if name == "python":
                ours = "ok" if outcome == "ok" else "error"
                agree[f"ours={ours} onnx={theirs}"] += 1
        if "native" in results:
            (o1, d1, m1), (o2, d2, m2) = results["python"], results["native"]
            same = o1 == o2 and d1 == d2
            if same and o1 == "ok":
                same = _same(m1, m2) and decoders["native"].encode(m1) == d1 and _wire.encode_twin(m2) == d2
            twins["same" if same else "different"] += 1
            if not same:
                problems.append(
                    f"#{i} native != python: {o2} {str(d2)[:120]} vs {o1} {str(d1)[:120]} input={data.hex()}"
                )
    elapsed = time.perf_counter() - start
    print(f"inputs: {args.count} (seed {args.seed}), {elapsed:.1f} s")
    for name, c in counts.items():
        print(
            f"{name:>7}: ok={c['ok']} DecodeError={c['DecodeError']} masked-internal={c['masked']} other={c['other']}"
        )
    if twins:
        print("native vs python (outcome, re-encoded bytes / error reason+offset+path):", dict(sorted(twins.items())))
    print("accept/reject vs onnx (protobuf):", dict(sorted(agree.items())))
    for line in problems[:20]:
        print("PROBLEM", line[:4000])
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
