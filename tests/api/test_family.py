"""family(): CasADi's sibling files, their signatures and values (against torch's, stored).

The layouts are written out here independently of the code under test: CasADi's matrices
are column-major, a rank-2 tensor is a matrix, any other rank a column of its elements in
row-major order, and the seeds of an r-by-c value are the r-by-(nseed c) matrix
``[S_1 | S_2 | ...]``. The CasADi test (``casadi`` extra) runs CasADi's own
``jacobian``/``hessian`` over the files through its onnxruntime plugin.
"""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest

import onnx_light as ol
from onnx_light import TensorProto, helper, numpy_helper

ort = pytest.importorskip("onnxruntime")

FIXTURES = np.load(pathlib.Path(__file__).parent / "data" / "family_fixtures.npz")


def _model(name: str) -> ol.ModelProto:
    """The fixture's function as an ONNX model (mlp in float64; conv in float32, which
    onnxruntime's Conv needs)."""
    w = {k.split(":")[1]: v for k, v in FIXTURES.items() if k.startswith(f"{name}:")}
    if name == "mlp":
        dt, np_dt = TensorProto.DOUBLE, np.float64
        nodes = [
            helper.make_node("MatMul", ["X", "W1"], ["h"]),
            helper.make_node("Add", ["h", "b1"], ["a"]),
            helper.make_node("Tanh", ["a"], ["t"]),
            helper.make_node("MatMul", ["t", "W2"], ["Y"]),
        ]
        weights, y_shape = ["W1", "b1", "W2"], [2, 2]
    else:
        dt, np_dt = TensorProto.FLOAT, np.float32
        nodes = [
            helper.make_node("Conv", ["X", "K", "c"], ["v"]),
            helper.make_node("Softplus", ["v"], ["s"]),
            helper.make_node("Flatten", ["s"], ["f"], axis=1),
            helper.make_node("MatMul", ["f", "W"], ["Y"]),
        ]
        weights, y_shape = ["K", "c", "W"], [1, 3]
    inits = [numpy_helper.from_array(w[k].astype(np_dt), k) for k in weights]
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("X", dt, list(w["x"].shape))],
        [helper.make_tensor_value_info("Y", dt, y_shape)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _session(path: pathlib.Path) -> object:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _to_casadi(seeds: list[np.ndarray]) -> np.ndarray:
    """Seeds (each shaped like the value) as CasADi's seed matrix, in the tensor's row-major form."""
    shape = seeds[0].shape
    if len(shape) == 2:
        return np.concatenate(seeds, axis=1)  # [S_1 | S_2 | ...], r x (n c)
    return np.stack([s.reshape(-1) for s in seeds], axis=1)  # a column per seed


def _from_casadi(t: np.ndarray, shape: tuple[int, ...]) -> list[np.ndarray]:
    if len(shape) == 2:
        return [t[:, k * shape[1] : (k + 1) * shape[1]] for k in range(t.shape[1] // shape[1])]
    return [t[:, k].reshape(shape) for k in range(t.shape[1])]


def _units(shape: tuple[int, ...], dtype: np.dtype) -> list[np.ndarray]:
    out = []
    for k in range(int(np.prod(shape))):
        e = np.zeros(int(np.prod(shape)), dtype)
        e[k] = 1
        out.append(e.reshape(shape))
    return out


@pytest.mark.parametrize("name", ["mlp", "conv"])
def test_family_jacobian_and_hessian_match_torch(name: str, tmp_path: pathlib.Path) -> None:
    """J^T from adj_f (one seed per output element) and H t from fwd_adj_f (one direction per
    input element, the seed 2Y of sum(Y^2)) equal torch's."""
    model = _model(name)
    paths = ol.family(model, tmp_path / "f.onnx")
    assert [p.name for p in paths] == ["f.onnx", "adj_f.onnx", "fwd_adj_f.onnx"]
    x = FIXTURES[f"{name}:x"]
    dtype = np.float64 if name == "mlp" else np.float32
    tol = 1e-10 if name == "mlp" else 2e-4
    x = x.astype(dtype)
    jac, hess = FIXTURES[f"{name}:jac"], FIXTURES[f"{name}:hess"]
    (y,) = _session(paths[0]).run(None, {"X": x})
    units_y = _units(y.shape, dtype)
    (adj_x,) = _session(paths[1]).run(None, {"X": x, "adj_Y": _to_casadi(units_y)})
    rows = _from_casadi(adj_x, x.shape)
    for k, (e, row) in enumerate(zip(units_y, rows)):
        expected = np.tensordot(e, jac, axes=e.ndim)
        np.testing.assert_allclose(row, expected, rtol=tol, atol=tol, err_msg=f"{name}: row {k} of J")
    units_x = _units(x.shape, dtype)
    jt = [np.tensordot(jac, t, axes=t.ndim).astype(dtype) for t in units_x]
    feeds = {
        "X": x,
        "adj_Y": _to_casadi([2 * y]),
        "fwd_X": _to_casadi(units_x),
        "fwd_adj_Y": _to_casadi([2 * j for j in jt]),
    }
    (fwd_adj_x,) = _session(paths[2]).run(None, feeds)
    adj_shape = _to_casadi([x]).shape  # the adjoint's own CasADi shape (one seed)
    for k, (t, col) in enumerate(zip(units_x, _from_casadi(fwd_adj_x, adj_shape))):
        expected = np.tensordot(hess, t, axes=t.ndim)
        got = _from_casadi(col, x.shape)[0]
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * 10, err_msg=f"{name}: H e_{k}")


def _signature(path: pathlib.Path) -> tuple[list[tuple[str, list[object]]], list[tuple[str, list[object]]]]:
    m = ol.load(path)

    def dims(v: ol.ValueInfoProto) -> list[object]:
        return [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]

    inits = {t.name for t in m.graph.initializer}
    return (
        [(i.name, dims(i)) for i in m.graph.input if i.name not in inits],
        [(o.name, dims(o)) for o in m.graph.output],
    )


def _ranks_model() -> ol.ModelProto:
    """Inputs of ranks 0, 1, 2 and 3 (float64); outputs y (rank 1) and Z (2 x 1)."""
    dt = TensorProto.DOUBLE
    nodes = [
        helper.make_node("Mul", ["a", "v"], ["av"]),
        helper.make_node("MatMul", ["M", "av"], ["mv"]),
        helper.make_node("ReduceSum", ["T"], ["ts"], keepdims=0),
        helper.make_node("Add", ["mv", "ts"], ["p"]),
        helper.make_node("Mul", ["p", "w"], ["q"]),
        helper.make_node("Sin", ["q"], ["y"]),
        helper.make_node("Unsqueeze", ["y", "axes"], ["Z"]),
    ]
    inputs = [
        helper.make_tensor_value_info("a", dt, []),
        helper.make_tensor_value_info("v", dt, [3]),
        helper.make_tensor_value_info("M", dt, [2, 3]),
        helper.make_tensor_value_info("T", dt, [2, 2, 2]),
    ]
    inits = [
        numpy_helper.from_array(np.array([0.5, -1.5]), "w"),
        numpy_helper.from_array(np.array([1], np.int64), "axes"),
    ]
    outputs = [helper.make_tensor_value_info("y", dt, [2]), helper.make_tensor_value_info("Z", dt, [2, 1])]
    return helper.make_model(
        helper.make_graph(nodes, "g", inputs, outputs, inits), opset_imports=[helper.make_opsetid("", 21)]
    )


def test_family_names_and_seed_dims_follow_casadi(tmp_path: pathlib.Path) -> None:
    """Ranks 0, 1, 2 and 3: names adj_/fwd_, dims nadj / nadj_x<c> / numel, weights embedded."""
    model = _ranks_model()
    paths = ol.family(model, tmp_path / "sub" / "g.onnx", forward_sibling=True)
    assert [p.name for p in paths] == ["g.onnx", "adj_g.onnx", "fwd_adj_g.onnx", "fwd_g.onnx"]
    primal = [("a", []), ("v", [3]), ("M", [2, 3]), ("T", [2, 2, 2])]
    assert _signature(paths[1]) == (
        [*primal, ("adj_y", [2, "nadj"]), ("adj_Z", [2, "nadj"])],
        [("adj_a", [1, "nadj"]), ("adj_v", [3, "nadj"]), ("adj_M", [2, "nadj_x3"]), ("adj_T", [8, "nadj"])],
    )
    adj_in = [("adj_y", [2, "nadj"]), ("adj_Z", [2, "nadj"])]
    fwd = [("fwd_a", [1, "nfwd"]), ("fwd_v", [3, "nfwd"]), ("fwd_M", [2, "nfwd_x3"]), ("fwd_T", [8, "nfwd"])]
    assert _signature(paths[2]) == (
        [*primal, *adj_in, *fwd, ("fwd_adj_y", [2, "nfwd_nadj"]), ("fwd_adj_Z", [2, "nfwd_nadj"])],
        [("fwd_adj_a", [1, "nfwd_nadj"]), ("fwd_adj_v", [3, "nfwd_nadj"]), ("fwd_adj_M", [2, "nfwd_nadj_x3"]),
         ("fwd_adj_T", [8, "nfwd_nadj"])],
    )  # fmt: skip
    assert _signature(paths[3]) == (
        [*primal, *fwd],
        [("fwd_y", [2, "nfwd"]), ("fwd_Z", [2, "nfwd"])],
    )
    for p in paths:
        assert {t.name for t in ol.load(p).graph.initializer} >= {"w"}, f"{p.name}: weights not embedded"
    # the values: J^T u against J t from the forward sibling, for two seeds each, in onnxruntime
    rng = np.random.default_rng(0)
    feeds = {"a": np.array(0.7), "v": rng.standard_normal(3), "M": rng.standard_normal((2, 3))}
    feeds["T"] = rng.standard_normal((2, 2, 2))
    u = {"adj_y": rng.standard_normal((2, 2)), "adj_Z": rng.standard_normal((2, 2))}
    t = {"fwd_a": rng.standard_normal((1, 2)), "fwd_v": rng.standard_normal((3, 2))}
    t.update({"fwd_M": rng.standard_normal((2, 6)), "fwd_T": rng.standard_normal((8, 2))})
    adj = _session(paths[1]).run(None, {**feeds, **u})
    fwd_y, fwd_z = _session(paths[3]).run(None, {**feeds, **t})
    for k in range(2):
        left = sum(float(np.sum(g_k * t_k)) for g_k, t_k in zip(_seed(adj, k), _seed(list(t.values()), k)))
        right = float(np.sum(u["adj_y"][:, k] * fwd_y[:, k]) + np.sum(u["adj_Z"][:, k] * fwd_z[:, k]))
        assert abs(left - right) <= 1e-12 * max(1.0, abs(left)), f"seed {k}: <J^T u, t> = {left} vs <u, J t> = {right}"
        # one seed (the If's single-seed branch, not the Loop): the same identity, every rank's layout
        adj_1 = _session(paths[1]).run(None, {**feeds, **{n: s[:, k : k + 1] for n, s in u.items()}})
        assert [a.shape for a in adj_1] == [(1, 1), (3, 1), (2, 3), (8, 1)]
        left_1 = sum(float(np.sum(g * t_k)) for g, t_k in zip(adj_1, _seed(list(t.values()), k)))
        assert abs(left_1 - right) <= 1e-12 * max(1.0, abs(right)), f"one seed {k}: {left_1} vs {right}"


def _seed(values: list[np.ndarray], k: int) -> list[np.ndarray]:
    """Seed k of each CasADi seed matrix above (M is 2 x 3: its seeds are 3 columns wide)."""
    out = []
    for v in values:
        width = 3 if v.shape == (2, 6) else 1
        out.append(v[:, k * width : (k + 1) * width])
    return out


def test_family_onnx_layout_has_a_trailing_seed_axis(tmp_path: pathlib.Path) -> None:
    model = _model("mlp")
    paths = ol.family(model, tmp_path / "f.onnx", layout="onnx")
    assert _signature(paths[1]) == ([("X", [2, 3]), ("adj_Y", [2, 2, "nadj"])], [("adj_X", [2, 3, "nadj"])])
    x = FIXTURES["mlp:x"]
    rng = np.random.default_rng(1)
    seeds = [rng.standard_normal((2, 2)) for _ in range(3)]
    (ours,) = _session(paths[1]).run(None, {"X": x, "adj_Y": np.stack(seeds, axis=-1)})
    casadi_paths = ol.family(model, tmp_path / "c" / "f.onnx", second_order=False)
    (theirs,) = _session(casadi_paths[1]).run(None, {"X": x, "adj_Y": _to_casadi(seeds)})
    for k, s in enumerate(_from_casadi(theirs, x.shape)):
        np.testing.assert_allclose(ours[..., k], s, rtol=1e-12, atol=1e-12)
        (one,) = _session(paths[1]).run(None, {"X": x, "adj_Y": seeds[k][..., None]})  # one seed: no Loop
        assert one.shape == (2, 3, 1)
        np.testing.assert_allclose(one[..., 0], s, rtol=1e-12, atol=1e-12)
    with pytest.raises(ol.OnnxLightError, match="layout='matlab'"):
        ol.family(model, tmp_path / "x.onnx", layout="matlab")


def test_family_of_a_rank_3_output(tmp_path: pathlib.Path) -> None:
    """A rank-3 output's seeds are a column of its elements: the adjoint reshapes them with
    static sizes (it used to read Shape(Y), a value the adjoint never computes, so onnxruntime
    refused adj_f and fwd_adj_f)."""
    x_info = helper.make_tensor_value_info("X", TensorProto.DOUBLE, [2, 2, 3])
    y_info = helper.make_tensor_value_info("Y", TensorProto.DOUBLE, [2, 2, 3])
    graph = helper.make_graph([helper.make_node("Mul", ["X", "X"], ["Y"])], "sq", [x_info], [y_info])
    paths = ol.family(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), tmp_path / "f.onnx")
    rng = np.random.default_rng(2)
    x, u = rng.standard_normal((2, 2, 3)), rng.standard_normal((12, 2))
    want = 2 * x.reshape(-1, 1) * u  # d(x*x)^T u, per seed column
    for run in (_session(paths[1]).run, ol.runtime.InferenceSession(ol.load(paths[1])).run):
        (got,) = run(None, {"X": x, "adj_Y": u})
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    t = rng.standard_normal((12, 1))  # forward over reverse: d/dx (2 x u) . t = 2 u t
    (got,) = _session(paths[2]).run(None, {"X": x, "adj_Y": u, "fwd_X": t, "fwd_adj_Y": np.zeros((12, 2))})
    np.testing.assert_allclose(got, 2 * u * t, rtol=1e-12, atol=1e-12)


def test_family_refuses_symbolic_shapes(tmp_path: pathlib.Path) -> None:
    model = _model("mlp")
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    with pytest.raises(ol.OnnxLightError, match="symbolic dimension 'N'"):
        ol.family(model, tmp_path / "f.onnx")


def test_cli_family_writes_the_siblings(tmp_path: pathlib.Path) -> None:
    from onnx_light.cli import main

    src = tmp_path / "mlp.onnx"
    ol.save(_model("mlp"), src)
    assert main(["family", str(src), "-o", str(tmp_path / "f.onnx")]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adj_f.onnx", "f.onnx", "fwd_adj_f.onnx", "mlp.onnx"]
    assert main(["family", str(src), "-o", str(tmp_path / "nope" / "f.onnx")]) == 2


def _casadi_order(shape: tuple[int, ...]) -> np.ndarray:
    """For each element of CasADi's vec (column-major) of the value, its row-major flat index."""
    if len(shape) == 2:
        r, c = shape
        return np.array([i * c + j for j in range(c) for i in range(r)])
    return np.arange(int(np.prod(shape)))


@pytest.mark.parametrize("name", ["mlp", "conv"])
def test_casadi_jacobian_and_hessian_over_our_family(name: str, tmp_path: pathlib.Path) -> None:
    """CasADi 3.8.2 loads our family through its onnxruntime plugin: casadi.jacobian and
    casadi.hessian (reverse, then forward over reverse: adj_f and fwd_adj_f) equal torch's."""
    ca = pytest.importorskip("casadi")
    lib_dir = pathlib.Path(ort.__file__).parent / "capi"
    libs = sorted(lib_dir.glob("libonnxruntime.so*"))
    if not libs:
        pytest.skip(f"no libonnxruntime.so under {lib_dir}")
    os.environ.setdefault("CASADI_ONNXRUNTIME_LIB", str(libs[0]))
    paths = ol.family(_model(name), tmp_path / "f.onnx")
    f = ca.GraphBuilder(str(paths[0]), {}).create("f", {})
    x = FIXTURES[f"{name}:x"]
    jac, hess = FIXTURES[f"{name}:jac"], FIXTURES[f"{name}:hess"]
    y_shape = jac.shape[: jac.ndim - x.ndim]
    sym = ca.MX.sym("X", *(x.shape if x.ndim == 2 else (x.size, 1)))
    x_ca = x if x.ndim == 2 else x.reshape(-1, 1)
    j_fn = ca.Function("J", [sym], [ca.jacobian(f(sym), sym)])
    h_fn = ca.Function("H", [sym], [ca.hessian(ca.sumsqr(f(sym)), sym)[0]])
    got_j, got_h = np.array(j_fn(x_ca)), np.array(h_fn(x_ca))
    oy, ox = _casadi_order(tuple(y_shape)), _casadi_order(x.shape)
    want_j = jac.reshape(len(oy), len(ox))[np.ix_(oy, ox)]
    want_h = hess.reshape(len(ox), len(ox))[np.ix_(ox, ox)]
    tol = 1e-10 if name == "mlp" else 2e-4
    np.testing.assert_allclose(got_j, want_j, rtol=tol, atol=tol, err_msg=f"{name}: casadi.jacobian vs torch")
    np.testing.assert_allclose(got_h, want_h, rtol=tol, atol=tol * 10, err_msg=f"{name}: casadi.hessian vs torch")


def test_family_embeds_weights_loaded_from_external_data(tmp_path: pathlib.Path) -> None:
    """CasADi hands the bytes to onnxruntime: no sibling may point at an external data file."""
    src = tmp_path / "src.onnx"
    ol.save(_model("mlp"), src, save_as_external_data=True, location="weights.bin", size_threshold=0)
    paths = ol.family(ol.load(src), tmp_path / "out" / "f.onnx")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["adj_f.onnx", "f.onnx", "fwd_adj_f.onnx"]
    for p in paths:
        for t in ol.load(p, load_external_data=False).graph.initializer:
            assert not t.external_data, f"{p.name}: {t.name} is stored outside the file"


def _counter_gathers(g: ol.GraphProto, counter: str | None = None) -> list[tuple[str, int]]:
    """(data, axis) of every Gather indexed by its enclosing Loop's iteration counter, at any depth."""
    out = []
    for n in g.node:
        if n.op_type == "Gather" and n.input[1] == counter:
            out.append((n.input[0], next((a.i for a in n.attribute if a.name == "axis"), 0)))
        for a in n.attribute:
            if a.HasField("g"):
                out += _counter_gathers(a.g, a.g.input[0].name if n.op_type == "Loop" else counter)
    return out


def test_family_seed_loops_take_contiguous_seed_slices(tmp_path: pathlib.Path) -> None:
    """A Loop over the seeds takes seed k on axis 0 (a block), not on the trailing seed axis:
    onnxruntime's Gather on axis -1 copies element by element (7 ms of a 784x512 weight's seed);
    and one adjoint seed skips the Loop (an If on nadj == 1)."""
    paths = ol.family(_model("mlp"), tmp_path / "f.onnx")
    adj, fwd_adj = ol.load(paths[1]), ol.load(paths[2])
    assert adj.graph.node[-1].op_type == "If"
    gathers = _counter_gathers(adj.graph) + _counter_gathers(fwd_adj.graph)
    assert len(gathers) >= 4, gathers  # the adjoint's seed, the tangent's seeds
    assert all(axis == 0 for _, axis in gathers), gathers


@pytest.mark.parametrize("layout", ["casadi", "onnx"])
def test_family_adjoint_seed_counts_equal_single_seeds(layout: str, tmp_path: pathlib.Path) -> None:
    """1 to 6 adjoint seeds (the unrolled If branches up to 4, the Loop beyond) give the
    one-seed adjoints side by side, for every rank's layout."""
    paths = ol.family(_ranks_model(), tmp_path / "g.onnx", layout=layout, second_order=False)
    sess = _session(paths[1])
    rng = np.random.default_rng(2)
    feeds = {"a": np.array(0.7), "v": rng.standard_normal(3), "M": rng.standard_normal((2, 3))}
    feeds["T"] = rng.standard_normal((2, 2, 2))
    z_shape = (2,) if layout == "casadi" else (2, 1)
    for n in range(1, 7):
        u = {"adj_y": rng.standard_normal((2, n)), "adj_Z": rng.standard_normal((*z_shape, n))}
        many = sess.run(None, {**feeds, **u})
        singles = [sess.run(None, {**feeds, **{k: s[..., j : j + 1] for k, s in u.items()}}) for j in range(n)]
        for i, got in enumerate(many):
            axis = 1 if layout == "casadi" else -1  # [S_1 | S_2 | ...] or the trailing seed axis
            want = np.concatenate([one[i] for one in singles], axis=axis)
            np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13, err_msg=f"{n} seeds, output {i}")


def _passthrough() -> ol.ModelProto:
    """y = tanh(x @ w) and x itself as a second output (an input passed through)."""
    w = numpy_helper.from_array(np.full((3, 3), 0.5, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Tanh", ["h"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
        ],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_output_that_is_an_input_is_a_clear_error(tmp_path: pathlib.Path) -> None:
    """Its seed adj_x and the input's adjoint adj_x are one name: the pass reported a cycle
    through an If node, and forward mode an SSA violation (fwd_x written twice)."""
    with pytest.raises(ol.OnnxLightError, match=r"outputs \['x'\] are also inputs"):
        ol.family(_passthrough(), tmp_path / "f.onnx")
    with pytest.raises(ol.OnnxLightError, match=r"ys \['x'\] are also in xs"):
        ol.TangentOfFunction(_passthrough(), ["x"], ["y", "x"])
    fwd = ol.TangentOfFunction(_passthrough(), ["x"], ["y"])  # the others still work
    assert list(fwd.output) == ["fwd_y"]
