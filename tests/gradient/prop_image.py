"""Property generators of the image ops' rules (test_properties.py's ``image`` family).

Resize draws every mode, coordinate transformation, nearest mode, antialias, axes and
scales or sizes; GridSample every mode, padding and alignment in 2-D and 3-D with grid
points kept off the pixel centres and cell borders (the weights' kinks); LRN odd and even
sizes; LpPool its windows (prop_nn's geometry); the permutations and CenterCropPad
random shapes.
"""

from __future__ import annotations

import numpy as np
from gradcheck import Case
from hypothesis import strategies as st
from prop_nn import _input_sides, _window
from propgen import Draw, Gen, away, i64, make_case, normal, side

F32 = np.float32


def _lrn(draw: Draw, rng: np.random.Generator) -> Case:
    x = [side(draw, 1, 2), side(draw, 1, 6), *[side(draw, 1, 3) for _ in range(draw(st.integers(1, 2)))]]
    attrs = {
        "size": int(draw(st.integers(1, 6))),
        "alpha": float(draw(st.sampled_from([1e-4, 0.3, 0.9]))),
        "beta": float(draw(st.sampled_from([0.5, 0.75, 1.3]))),
        "bias": float(draw(st.sampled_from([1.0, 2.0]))),
    }
    return make_case("LRN", {"x": normal(rng, x)}, ["x"], attrs=attrs, opset=int(draw(st.sampled_from([1, 13]))))


def _depth_space(draw: Draw, rng: np.random.Generator, op: str) -> Case:
    b = int(draw(st.integers(1, 3)))
    n, c, h, w = side(draw, 1, 2), side(draw, 1, 2), side(draw, 1, 3), side(draw, 1, 3)
    attrs: dict[str, object] = {"blocksize": b}
    if op == "DepthToSpace":
        x = [n, c * b * b, h, w]
        attrs["mode"] = str(draw(st.sampled_from(["DCR", "CRD"])))
    else:
        x = [n, c, h * b, w * b]
    return make_case(op, {"x": normal(rng, x)}, ["x"], attrs=attrs)


def _center_crop_pad(draw: Draw, rng: np.random.Generator) -> Case:
    rank = int(draw(st.integers(1, 4)))
    x = [side(draw, 1, 4) for _ in range(rank)]
    picked = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
    target = [int(draw(st.integers(1, 6))) for _ in picked]
    axes = [a - rank if draw(st.booleans()) else a for a in picked]
    return make_case(
        "CenterCropPad", {"x": normal(rng, x), "s": i64(target)}, ["x"], attrs={"axes": axes}, consts=("s",), opset=18
    )


def _resize(draw: Draw, rng: np.random.Generator) -> Case:
    x = [side(draw, 1, 2), side(draw, 1, 2), side(draw, 1, 4), side(draw, 1, 4)]
    mode = str(draw(st.sampled_from(["nearest", "linear", "cubic"])))
    transform = str(
        draw(
            st.sampled_from(["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric"])
        )
    )
    attrs: dict[str, object] = {"mode": mode, "coordinate_transformation_mode": transform}
    if mode == "nearest":
        attrs["nearest_mode"] = str(draw(st.sampled_from(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])))
    elif draw(st.booleans()):
        attrs["antialias"] = 1
    if mode == "cubic" and draw(st.booleans()):
        attrs["exclude_outside"] = 1
    axes = [2, 3] if draw(st.booleans()) else [0, 1, 2, 3]
    if axes != [0, 1, 2, 3]:
        attrs["axes"] = axes
    # onnxruntime's align_corners divides by the floored width: sizes there (integral widths)
    by_sizes = transform == "align_corners" or draw(st.booleans())
    inputs: dict[str, np.ndarray | None] = {"x": normal(rng, x), "roi": None}
    if by_sizes:
        inputs["scales"] = None
        inputs["sizes"] = i64([x[a] if a < 2 else int(draw(st.integers(1, 6))) for a in axes])
    else:
        picked = [1.0 if a < 2 else float(draw(st.sampled_from([0.5, 0.7, 1.5, 2.0, 2.6]))) for a in axes]
        # an empty output is not drawn (our MatMul kernel fails on a (.., 0) x (0, n) product: reported)
        scales = [s if x[a] * s >= 1 else 1.5 for a, s in zip(axes, picked)]
        inputs["scales"] = np.array(scales, F32)
    return make_case("Resize", inputs, ["x"], attrs=attrs, consts=("scales", "sizes"), opset=19)


def _grid(rng: np.random.Generator, n: int, out: list[int], sizes: list[int]) -> np.ndarray:
    """Grid points in [-1.3, 1.3] off the integers and half-integers of every pixel coordinate."""
    grid = rng.uniform(-1.3, 1.3, (n, *out, len(sizes)))
    for k, size in enumerate(reversed(sizes)):
        for scale, shift in (((size - 1) / 2, (size - 1) / 2), (size / 2, (size - 1) / 2)):
            v = grid[..., k] * scale + shift
            near = np.abs(v * 2 - np.round(v * 2)) < 0.1
            grid[..., k] = np.where(near, grid[..., k] + 0.1 / max(scale, 0.5), grid[..., k])
    return grid


def _grid_sample(draw: Draw, rng: np.random.Generator) -> Case:
    nd = int(draw(st.sampled_from([2, 2, 3])))
    n = side(draw, 1, 2)
    sizes = [side(draw, 1, 4) for _ in range(nd)]
    out = [side(draw, 1, 3) for _ in range(nd)]
    attrs = {
        "mode": str(draw(st.sampled_from(["nearest", "linear", "cubic"] if nd == 2 else ["nearest", "linear"]))),
        "padding_mode": str(draw(st.sampled_from(["zeros", "border", "reflection"]))),
        "align_corners": int(draw(st.integers(0, 1))),
    }
    inputs = {"x": normal(rng, [n, side(draw, 1, 2), *sizes]), "grid": _grid(rng, n, out, sizes)}
    return make_case("GridSample", inputs, ["x", "grid"], attrs=attrs, opset=22, rtol=1e-4)


def _affine_grid(draw: Draw, rng: np.random.Generator) -> Case:
    nd = int(draw(st.sampled_from([2, 3])))
    n = side(draw, 1, 2)
    align = int(draw(st.integers(0, 1)))
    # one position with align_corners: onnxruntime puts it at +1, torch, onnx's reference and we at -1
    size = [n, side(draw, 1, 2), *[side(draw, 1 + align, 4) for _ in range(nd)]]
    inputs = {"theta": normal(rng, [n, nd, nd + 1]), "size": i64(size)}
    attrs = {"align_corners": align}
    return make_case("AffineGrid", inputs, ["theta"], attrs=attrs, consts=("size",), opset=20)


def _lp_pool(draw: Draw, rng: np.random.Generator) -> Case:
    spatial = int(draw(st.sampled_from([1, 2, 2, 3])))
    geo = _window(draw, spatial, pooling=True)
    geo["p"] = int(draw(st.sampled_from([1, 2, 3])))
    x = [side(draw, 1, 2), side(draw, 1, 2), *_input_sides(draw, geo)]
    return make_case("LpPool", {"x": away(rng, x, gap=0.2)}, ["x"], attrs=geo, opset=18)


def _global_lp_pool(draw: Draw, rng: np.random.Generator) -> Case:
    x = [side(draw, 1, 2), side(draw, 1, 2), *[side(draw, 1, 3) for _ in range(draw(st.integers(1, 3)))]]
    p = int(draw(st.sampled_from([1, 2, 3])))
    return make_case("GlobalLpPool", {"x": away(rng, x, gap=0.2)}, ["x"], attrs={"p": p})


IMAGE: dict[str, Gen] = {
    "LRN": _lrn,
    "DepthToSpace": lambda draw, rng: _depth_space(draw, rng, "DepthToSpace"),
    "SpaceToDepth": lambda draw, rng: _depth_space(draw, rng, "SpaceToDepth"),
    "CenterCropPad": _center_crop_pad,
    "Resize": _resize,
    "GridSample": _grid_sample,
    "AffineGrid": _affine_grid,
    "LpPool": _lp_pool,
    "GlobalLpPool": _global_lp_pool,
}
