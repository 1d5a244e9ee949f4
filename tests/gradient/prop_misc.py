"""Property generators of the remaining rules (see propgen.py): Trilu, ReverseSequence,
Compress, Unique, Scatter, TensorScatter, CumProd, Det, DFT, STFT, DequantizeLinear.

The first dim of the first input may be declared symbolic by the property test: where a
rule needs static sizes (Det's matrix, DFT's signal axis, STFT's signal length), the drawn
shapes put a batch dim first.
"""

from __future__ import annotations

import numpy as np
from gradcheck import Case
from hypothesis import strategies as st
from propgen import Draw, Gen, axis, i64, make_case, normal, shape, side

NO_CUMPROD_IN_ORT = "onnxruntime 1.32 has no CumProd kernel (opset 26)"


def _trilu(draw: Draw, rng: np.random.Generator) -> Case:
    dims = shape(draw, 2, 4)
    k = draw(st.one_of(st.none(), st.integers(-3, 3)))
    inputs = {"x": normal(rng, dims), "k": None if k is None else i64(k)}
    return make_case("Trilu", inputs, ["x"], attrs={"upper": int(draw(st.booleans()))}, consts=("k",))


def _reverse_sequence(draw: Draw, rng: np.random.Generator) -> Case:
    dims = shape(draw, 2, 4, lo=1, hi=4)
    batch_first = draw(st.booleans())
    b, t = (0, 1) if batch_first else (1, 0)
    lens = rng.integers(0, dims[t] + 1, dims[b])
    inputs = {"x": normal(rng, dims), "lens": i64(lens)}
    return make_case("ReverseSequence", inputs, ["x"], attrs={"batch_axis": b, "time_axis": t}, consts=("lens",))


def _compress(draw: Draw, rng: np.random.Generator) -> Case:
    dims = shape(draw, 1, 3)
    a = draw(st.one_of(st.none(), st.integers(-len(dims), len(dims) - 1)))
    n = int(np.prod(dims)) if a is None else dims[a]
    length = draw(st.integers(1, n))
    cond = rng.random(length) < 0.6
    cond[draw(st.integers(0, length - 1))] = True
    attrs = {} if a is None else {"axis": a}
    return make_case("Compress", {"x": normal(rng, dims), "c": cond}, ["x"], attrs=attrs, consts=("c",))


def _unique(draw: Draw, rng: np.random.Generator) -> Case:
    dims = shape(draw, 1, 3)
    size = int(np.prod(dims))
    # distinct values at least 0.5 apart: the sort order survives the FD steps
    values = rng.permutation(size) * 0.5 + rng.uniform(0, 0.1, size)
    attrs: dict[str, int] = {"sorted": int(draw(st.booleans()))}
    if draw(st.booleans()):
        attrs["axis"] = axis(draw, len(dims))
    return make_case("Unique", {"x": values.reshape(dims)}, ["x"], attrs=attrs, outputs=4, y="y")


def _scatter(draw: Draw, rng: np.random.Generator) -> Case:
    dims = shape(draw, 1, 3, lo=2)
    a_attr = axis(draw, len(dims))
    a = a_attr % len(dims)
    idx_dims = [side(draw, 1, d) for d in dims]
    n = dims[a]
    idx_dims[a] = min(idx_dims[a], n)
    # distinct targets along the axis in every fiber: no write collides
    idx = np.argsort(rng.random([*idx_dims[:a], n, *idx_dims[a + 1 :]]), axis=a).take(range(idx_dims[a]), axis=a)
    inputs = {"x": normal(rng, dims), "i": i64(idx), "u": normal(rng, idx_dims)}
    return make_case("Scatter", inputs, ["x", "u"], attrs={"axis": a_attr}, opset=10, consts=("i",))


def _tensor_scatter(draw: Draw, rng: np.random.Generator) -> Case:
    rank = draw(st.integers(3, 4))
    dims = [side(draw, 1, 3) for _ in range(rank)]
    a = draw(st.integers(1, rank - 1))
    dims[a] = draw(st.integers(2, 5))
    steps = draw(st.integers(1, dims[a]))
    mode = draw(st.sampled_from(["linear", "circular"]))
    top = dims[a] - steps + 1 if mode == "linear" else dims[a] + 2
    write = None if draw(st.booleans()) else i64(rng.integers(0, top, dims[0]))
    upd = list(dims)
    upd[a] = steps
    inputs = {"x": normal(rng, dims), "u": normal(rng, upd), "w": write}
    attrs = {"axis": a - rank if draw(st.booleans()) else a, "mode": mode}
    return make_case("TensorScatter", inputs, ["x", "u"], attrs=attrs, opset=24, consts=("w",))


def _cumprod(draw: Draw, rng: np.random.Generator) -> Case:
    dims = shape(draw, 1, 3)
    x = normal(rng, dims)
    x[rng.random(dims) < 0.2] = 0.0  # exact zeros: no division in the rule
    attrs = {"exclusive": int(draw(st.booleans())), "reverse": int(draw(st.booleans()))}
    inputs = {"x": x, "axis": i64(axis(draw, len(dims)))}
    return make_case("CumProd", inputs, ["x"], attrs=attrs, opset=26, consts=("axis",), skip_ort=NO_CUMPROD_IN_ORT)


def _det(draw: Draw, rng: np.random.Generator) -> Case:
    n = draw(st.integers(1, 4))
    batch = [side(draw, 1, 3) for _ in range(draw(st.integers(1, 2)))]  # a batch dim first
    return make_case("Det", {"x": normal(rng, [*batch, n, n])}, ["x"], ort_dtype=np.float32)


def _dft(draw: Draw, rng: np.random.Generator) -> Case:
    rank = draw(st.integers(3, 4))  # [batch, ..., signal, ..., 1 or 2]
    a = draw(st.integers(1, rank - 2))
    dims = [side(draw, 1, 3) for _ in range(rank - 1)]
    dims[a] = draw(st.integers(2, 7))
    inverse, onesided = int(draw(st.booleans())), int(draw(st.booleans()))
    complex_in = (inverse and onesided) or (not onesided and draw(st.booleans()))
    length = draw(st.one_of(st.none(), st.integers(2, 8)))
    inputs = {
        "x": normal(rng, [*dims, 2 if complex_in else 1]),
        "n": None if length is None else i64(length),
        "axis": i64(a - rank if draw(st.booleans()) else a),
    }
    attrs = {"inverse": inverse, "onesided": onesided}
    return make_case("DFT", inputs, ["x"], attrs=attrs, opset=20, consts=("n", "axis"), ort_dtype=np.float32)


def _stft(draw: Draw, rng: np.random.Generator) -> Case:
    batch, c = side(draw, 1, 2), draw(st.sampled_from([1, 2]))
    length = draw(st.integers(2, 6))
    n = length + draw(st.integers(0, 8))
    window = draw(st.booleans())
    inputs = {
        "x": normal(rng, [batch, n, c]),
        "step": i64(draw(st.integers(1, 4))),
        "w": normal(rng, [length]) if window else None,
        "len": None if window and draw(st.booleans()) else i64(length),
    }
    xs = ["x", "w"] if window else ["x"]
    attrs = {"onesided": int(c == 1 and draw(st.booleans()))}
    return make_case("STFT", inputs, xs, attrs=attrs, opset=17, consts=("step", "len"), ort_dtype=np.float32)


def _dequantize(draw: Draw, rng: np.random.Generator) -> Case:
    dims = shape(draw, 1, 3, lo=1, hi=5)
    layout = draw(st.sampled_from(["tensor", "axis", "block"]))
    a = axis(draw, len(dims))
    attrs: dict[str, int] = {}
    if layout == "tensor":
        s_dims: list[int] = []
    elif layout == "axis":
        s_dims, attrs = [dims[a]], {"axis": a}
    else:
        block = draw(st.integers(1, 3))
        s_dims = list(dims)
        s_dims[a] = -(-dims[a] // block)
        attrs = {"axis": a, "block_size": block}
    q = rng.integers(-100, 100, dims).astype(np.int8)
    zp = None if draw(st.booleans()) else rng.integers(-5, 5, s_dims).astype(np.int8)
    inputs = {"q": q, "s": rng.uniform(0.05, 1.0, s_dims), "zp": zp}
    return make_case("DequantizeLinear", inputs, ["s"], attrs=attrs, consts=("q", "zp"))


MISC: dict[str, Gen] = {
    "Trilu": _trilu,
    "ReverseSequence": _reverse_sequence,
    "Compress": _compress,
    "Unique": _unique,
    "Scatter": _scatter,
    "TensorScatter": _tensor_scatter,
    "CumProd": _cumprod,
    "Det": _det,
    "DFT": _dft,
    "STFT": _stft,
    "DequantizeLinear": _dequantize,
}
