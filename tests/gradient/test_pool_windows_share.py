"""MaxPool's rule uses MaxUnpool only when no two windows share a cell: the closed form
against the cells each window reads (cell o * s + j * d, 0 <= j < k), by brute force."""

from __future__ import annotations

import itertools

from onnx_light.onnx_extensions.gradient.pool import windows_share


def _share_by_cells(k: int, s: int, d: int, o: int) -> bool:
    cells = [{w * s + j * d for j in range(k)} for w in range(o)]
    return any(a & b for a, b in itertools.combinations(cells, 2))


def test_windows_share_matches_the_cells() -> None:
    for k, s, d, o in itertools.product(range(1, 7), range(1, 8), range(1, 7), range(0, 9)):
        assert windows_share(k, s, d, o) == _share_by_cells(k, s, d, o), (k, s, d, o)
