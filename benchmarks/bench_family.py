"""``family()``'s files before -> after a change, and against ``onnx_ad.family``'s, in one process.

Writes ``adj_f.onnx`` / ``fwd_adj_f.onnx`` for the MLP and the CNN of bench_gradient.py with
``onnx_light/_family.py`` as of git revision ``--before`` (loaded beside the current one), with
the current one, and with onnx-ad, then times the three alternating in onnxruntime (one
thread, medians; ``--nadj``/``--nfwd`` seeds of each kind, default 1: CasADi's
``hessian`` and the bench_jvp.py rows).

Run: ``PYTHONPATH=$PWD python benchmarks/bench_family.py --before int --runs 30``.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gradient as bg  # noqa: E402

import onnx_light as ol  # noqa: E402


def _old_family(rev: str) -> Any:
    """``onnx_light._family`` as of ``rev``, imported as a sibling module of the package."""
    root = Path(__file__).resolve().parent.parent
    text = subprocess.run(["git", "show", f"{rev}:onnx_light/_family.py"], cwd=root, check=True,
                          capture_output=True, text=True).stdout  # fmt: skip
    path = Path(tempfile.mkdtemp()) / "_family_before.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("onnx_light._family_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dim(d: Any, n: dict[str, int]) -> int:
    """A declared dim for ``n`` seeds of each kind: ``nadj`` -> n, ``nadj_x4`` -> 4 n, ``nfwd_nadj`` -> nfwd nadj."""
    if isinstance(d, int) and d > 0:
        return d
    s = str(d)
    head, _, width = s.partition("_x")
    count = 1
    for part in head.split("_"):
        count *= n.get(part, 1)
    return count * (int(width) if width else 1)


def bench(name: str, runs: int, before: Any, n: dict[str, int]) -> dict[str, dict[str, float]]:
    import onnx_ad

    model, _, _ = getattr(bg, f"{name}_model")()
    model = onnx.ModelProto.FromString(model.SerializeToString())
    del model.graph.output[1:]  # the loss only
    base = bg._feeds(model, np.random.default_rng(0))
    base.update({t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer})
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {k: Path(tmp, k) for k in ("before", "after", "onnx_ad")}
        ours = ol.ModelProto.FromString(model.SerializeToString())
        before.family(ours, dirs["before"] / "f.onnx")
        ol.family(ours, dirs["after"] / "f.onnx")
        try:
            onnx_ad.family(model, str(dirs["onnx_ad"] / "f.onnx"))
        except Exception:  # onnx-ad refusing its own second order: first order only
            onnx_ad.family(model, str(dirs["onnx_ad"] / "f.onnx"), second_order=False)
        rng = np.random.default_rng(1)
        for file in ("adj_f.onnx", "fwd_adj_f.onnx"):
            sessions = {k: bg._session((d / file).read_bytes()) for k, d in dirs.items() if (d / file).exists()}
            feeds = dict(base)
            for i in sessions["after"].get_inputs():
                if i.name not in feeds:
                    feeds[i.name] = rng.standard_normal([_dim(d, n) for d in i.shape]).astype(np.float32)
            fns = {k: _run(s, feeds) for k, s in sessions.items()}
            results = {k: dict(zip([o.name for o in sessions[k].get_outputs()], f())) for k, f in fns.items()}
            for k, r in results.items():  # the same values, or the timing means nothing
                for o, want in results["after"].items():
                    np.testing.assert_allclose(r[o], want, rtol=1e-3, atol=1e-4, err_msg=f"{name} {file} {k} {o}")
            out[file], _ = bg.alternate(fns, runs)
    return out


def _run(session: Any, feeds: dict[str, np.ndarray]) -> Any:
    names = [i.name for i in session.get_inputs()]
    return lambda: session.run(None, {k: feeds[k] for k in names})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="int")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--nadj", type=int, default=1)
    parser.add_argument("--nfwd", type=int, default=1)
    args = parser.parse_args()
    before = _old_family(args.before)
    n = {"nadj": args.nadj, "nfwd": args.nfwd}
    heads = ("before", "after", "onnx_ad", "after/before", "after/onnx_ad")
    print(f"{'model':6s} {'file':15s} " + " ".join(f"{h:>{w}s}" for h, w in zip(heads, (9, 9, 9, 12, 13))))
    for name in args.models.split(","):
        for file, t in bench(name, args.runs, before, n).items():
            ad = t.get("onnx_ad")
            ad_ms, ad_ratio = ("n/a", "n/a") if ad is None else (f"{ad * 1e3:7.2f}ms", f"{t['after'] / ad:.2f}")
            print(f"{name:6s} {file:15s} {t['before'] * 1e3:7.2f}ms {t['after'] * 1e3:7.2f}ms {ad_ms:>9s} "
                  f"{t['after'] / t['before']:12.2f} {ad_ratio:>13s}")  # fmt: skip


if __name__ == "__main__":
    main()
