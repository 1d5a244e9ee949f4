"""The public surface, locked (DESIGN §1, STYLE "the public surface locked").

* every public module (no ``_`` in its dotted path) exposes exactly the names listed in
  ``tests/public_api.txt``: a new public name is a decision, so the list changes with it
  (``PYTHONPATH=. python tests/test_surface.py --update`` rewrites it);
* no module imports a private module (``_x``) of another unit (units: onnx_core,
  onnx_extensions, runtime, and the facade: every other module of the package);
* importing the package changes no process-wide state (STYLE convention 10).
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import subprocess
import sys

import onnx_light as ol

PACKAGE = pathlib.Path(ol.__file__).parent
LOCK = pathlib.Path(__file__).with_name("public_api.txt")
UNITS = ("onnx_core", "onnx_extensions", "runtime")


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_public(modname: str) -> bool:
    return all(not part.startswith("_") for part in modname.split("."))


def public_modules() -> list[str]:
    """The dotted names of the package's public modules, sorted."""
    names = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    return sorted(n for n in names if _is_public(n))


def _top_level_names(path: str) -> set[str]:
    """The names a module's source defines at top level (def, class, assignment)."""
    names: set[str] = set()
    for node in ast.parse(pathlib.Path(path).read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def public_names(modname: str) -> list[str]:
    """``__all__`` when the module has one, else the public names its source defines."""
    module = importlib.import_module(modname)
    if hasattr(module, "__all__"):
        return sorted(set(module.__all__))
    assert module.__file__ is not None
    return sorted(n for n in _top_level_names(module.__file__) if not n.startswith("_"))


def surface() -> list[str]:
    """One line per public name: ``module: name``."""
    return [f"{m}: {n}" for m in public_modules() for n in public_names(m)]


def test_public_names_match_the_committed_list() -> None:
    want = LOCK.read_text().splitlines()
    got = surface()
    added = sorted(set(got) - set(want))
    removed = sorted(set(want) - set(got))
    assert not added and not removed, (
        f"the public surface changed: added {added}, removed {removed}. If intended, run "
        "`PYTHONPATH=. python tests/test_surface.py --update` and commit tests/public_api.txt"
    )


def _unit(parts: list[str]) -> str:
    """The unit a dotted module path (split) belongs to."""
    return parts[1] if len(parts) > 1 and parts[1] in UNITS else "facade"


def _is_private(parts: list[str]) -> bool:
    """Whether an ``onnx_light...`` path (split) names a private module of its unit."""
    if _unit(parts) == "facade":
        return len(parts) > 1 and parts[1].startswith("_") and parts[1] != "_native"
    return any(p.startswith("_") and not p.endswith("__") for p in parts[2:])


def private_imports_across_units() -> list[str]:
    """``file -> module`` for every import of another unit's private module."""
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        here = _module_name(path).split(".")
        package = here if path.name == "__init__.py" else here[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name.split(".") for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                module = base + (node.module.split(".") if node.module else [])
                targets = [module] + [module + [a.name] for a in node.names]
            else:
                continue
            for t in targets:
                if t[:1] == ["onnx_light"] and _unit(t) != _unit(here) and _is_private(t):
                    bad.append(f"{path.relative_to(PACKAGE.parent)} -> {'.'.join(t)}")
                    break
    return bad


def test_no_module_imports_a_private_module_of_another_unit() -> None:
    bad = private_imports_across_units()
    assert not bad, "give the owning unit a public name for these:\n" + "\n".join(bad)


def test_the_scan_sees_a_private_import() -> None:
    """The scan itself can fail: a runtime module importing onnx_core._inline is caught."""
    assert _is_private(["onnx_light", "onnx_core", "_inline"])
    assert not _is_private(["onnx_light", "onnx_core", "ops", "OpTable"])
    assert _unit(["onnx_light", "runtime", "_plan"]) != _unit(["onnx_light", "onnx_core", "_inline"])


PROCESS_STATE = """
import gc, os, sys
def state():
    return dict(os.environ), gc.isenabled(), gc.get_threshold(), sys.getrecursionlimit(), sys.getswitchinterval()
before = state()
import onnx_light, onnx_light.runtime, onnx_light.onnx_extensions.gradient
after = state()
changed = [k for k in set(before[0]) | set(after[0]) if before[0].get(k) != after[0].get(k)]
print(changed, before[1:] == after[1:])
"""


def test_import_changes_no_process_wide_state() -> None:
    import os

    # a fresh environment without the thread variables (this process imported onnx_light already)
    drop = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "ONNX_LIGHT_BLAS_THREADS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    out = subprocess.run([sys.executable, "-c", PROCESS_STATE], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split("\n")[0] == "[] True", f"environment variables changed / gc or sys state: {out.stdout}"


def test_the_pass_pauses_gc_only_while_it_runs_and_when_asked() -> None:
    import gc

    from onnx_light import TensorProto, helper

    seen: list[bool] = []

    def rule(ctx: ol.GradContext, dy: str) -> tuple[str]:
        seen.append(gc.isenabled())
        return (dy,)

    reg = ol.DefaultGradRegistry()
    ol.RegisterGradientFunction("test.gc", "Probe", rule, registry=reg)
    g = helper.make_graph(
        [helper.make_node("Probe", ["x"], ["y"], domain="test.gc")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    assert gc.isenabled()
    ol.GradientOfFunction(g, ["x"], "y", registry=reg)
    ol.GradientOfFunction(g, ["x"], "y", registry=reg, pause_gc=False)
    assert seen == [False, True]
    assert gc.isenabled()


def test_the_paused_pass_leaves_its_result_in_the_oldest_generation_and_frozen_objects_frozen() -> None:
    import gc

    from onnx_light import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("Mul", ["t", "x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    reg = ol.DefaultGradRegistry()
    for transform in (
        lambda: ol.GradientOfFunction(g, ["x"], "y", registry=reg),
        lambda: ol.TangentOfFunction(g, ["x"], ["y"], registry=reg),
    ):
        gc.collect()
        fn = transform()
        young = {id(o) for o in gc.get_objects(0)} | {id(o) for o in gc.get_objects(1)}
        # the result and its nodes skipped the young generations: no collection walks them first
        assert id(fn) not in young and not any(id(n) in young for n in fn.node)
        assert gc.get_freeze_count() == 0 and gc.isenabled()
    # objects the caller froze stay frozen (freeze and unfreeze would thaw them)
    gc.collect()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        ol.GradientOfFunction(g, ["x"], "y", registry=reg)
        assert gc.get_freeze_count() >= frozen
    finally:
        gc.unfreeze()


if __name__ == "__main__":
    if sys.argv[1:] == ["--update"]:
        LOCK.write_text("\n".join(surface()) + "\n")
        print(f"wrote {LOCK}")
    else:
        print("\n".join(surface()))


#: functions over 80 lines being split by other work (issue 9 §3); none may be added
LONG_FUNCTIONS_BEING_SPLIT = {"onnx_core/gradient/_pass.py:run", "onnx_core/gradient/_types.py:infer_types"}


def test_no_function_over_80_lines() -> None:
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                where = f"{path.relative_to(PACKAGE).as_posix()}:{node.name}"
                if n > 80 and where not in LONG_FUNCTIONS_BEING_SPLIT:
                    long.append(f"{where} ({n} lines)")
    assert not long, f"split these into their phases: {long}"


def test_at_most_20_type_ignores() -> None:
    count = sum(path.read_text().count("type: ignore") for path in PACKAGE.rglob("*.py"))
    assert count <= 20, f"{count} '# type: ignore' under onnx_light/ (at most 20): type the code instead"
