"""Runs onnx's own helper and numpy_helper unit tests against onnx_light (issue 14 §1).

onnx 1.23's ``tests/python/helper_test.py`` and ``numpy_helper_test.py`` are not in its
wheel, so this script fetches onnx's source distribution from PyPI (``pip download``,
cached in ``--cache``), copies the two files into a temporary folder with their imports
swapped (``from onnx import ...`` -> ``from onnx_light import ...``, ``import onnx`` ->
``import onnx_light as onnx``) and runs pytest on them. Nothing of onnx's is stored in this
repository; the tests are only run.

The tests that need ``onnx.reference`` (onnx's ReferenceEvaluator, which takes onnx's own
protobuf objects) are deselected and counted: they test onnx's evaluator, not the helpers.

Run: ``PYTHONPATH=$PWD python tools/run_onnx_helper_tests.py [--cache /tmp/onnx-sdist]``.
Exit status: pytest's (0 when every selected test passes).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ONNX_VERSION = "1.23.2"
FILES = ("helper_test.py", "numpy_helper_test.py")


CONFTEST = """
DESELECT = set({names!r})


def pytest_collection_modifyitems(config, items):
    keep = [i for i in items if f"{{i.path.name}}::{{i.originalname}}" not in DESELECT]
    config.hook.pytest_deselected(items=[i for i in items if i not in keep])
    items[:] = keep
"""


def sdist(cache: Path) -> Path:
    """onnx's source archive, downloaded once into ``cache``."""
    cache.mkdir(parents=True, exist_ok=True)
    found = sorted(cache.glob(f"onnx-{ONNX_VERSION}.tar.gz"))
    if not found:
        cmd = [sys.executable, "-m", "pip", "download", f"onnx=={ONNX_VERSION}", "--no-binary", ":all:"]
        subprocess.run([*cmd, "--no-deps", "--no-build-isolation", "-d", str(cache)], check=True)
        found = sorted(cache.glob(f"onnx-{ONNX_VERSION}.tar.gz"))
    return found[0]


def swap_imports(text: str) -> str:
    """The test file with onnx's imports pointed at onnx_light (onnx.reference left to onnx)."""
    text = re.sub(r"^from onnx\.numpy_helper import", "from onnx_light.numpy_helper import", text, flags=re.M)
    text = re.sub(r"^from onnx import", "from onnx_light import", text, flags=re.M)
    text = re.sub(r"^import onnx\.reference$", "import onnx.reference as _onnx_reference", text, flags=re.M)
    text = re.sub(r"^import onnx$", "import onnx_light as onnx", text, flags=re.M)
    return text.replace("onnx.reference.", "_onnx_reference.")


def needs_reference(source: str) -> list[str]:
    """Names of the test functions that call onnx.reference, directly or through a helper."""
    bodies = {
        m.group(2): m.group(0)
        for m in re.finditer(r"^(\s*)def (\w+)\(.*?(?=^\1def |^\1@|^\S|\Z)", source, flags=re.M | re.S)
    }
    marked = {n for n, body in bodies.items() if "_onnx_reference." in body or "ReferenceEvaluator" in body}
    grew = True
    while grew:
        grew = False
        for name, body in bodies.items():
            if name not in marked and any(f"{m}(" in body for m in marked):
                marked.add(name)
                grew = True
    return sorted(n for n in marked if n.startswith("test_"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "onnx-sdist")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args()
    archive = sdist(args.cache)
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(archive) as tar:
        deselect: list[str] = []
        for name in FILES:
            member = tar.getmember(f"onnx-{ONNX_VERSION}/tests/python/{name}")
            handle = tar.extractfile(member)
            assert handle is not None
            text = swap_imports(handle.read().decode())
            (Path(tmp) / name).write_text(text)
            deselect += [f"{name}::{t}" for t in needs_reference(text)]
        print(f"deselected (need onnx.reference): {len(deselect)}: {' '.join(d.split('::')[1] for d in deselect)}")
        (Path(tmp) / "conftest.py").write_text(CONFTEST.format(names=sorted(deselect)))
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *FILES, *args.pytest_args]
        return subprocess.run(cmd, cwd=tmp, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
