"""scoring/layers.py: layer options and the layer loop shared by `posviz heads` and the report."""

from __future__ import annotations

import numpy as np
import pytest

from posviz.errors import OptionError
from posviz.scoring.layers import LayerTable, parse_layers, scan_layers


@pytest.mark.parametrize(("layer", "layers", "expected"), [
    (None, None, [0]),
    (3, None, [3]),
    (None, "all", [0, 1, 2, 3]),
    (None, " ALL ", [0, 1, 2, 3]),
    (None, "2,0-1,1", [2, 0, 1]),  # request order, each layer once
])
def test_parse_layers(layer, layers, expected):
    assert parse_layers(layer, layers, 4) == expected


@pytest.mark.parametrize(("layer", "layers", "fragment"), [
    (0, "all", "either --layer or --layers"),
    (None, "0-x", "is not 'all' or a list"),
    (None, "3-1", "is empty"),
    (None, "1,4", "--layers 1,4: layer 4 is out of range: tiny has 4 layers (0-3)"),
    (-1, None, "--layer -1 is out of range"),
])
def test_parse_layers_rejects(layer, layers, fragment):
    with pytest.raises(OptionError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        parse_layers(layer, layers, 4, "tiny")


def test_scan_keeps_only_the_requested_stacks_and_tables_the_rest(minilm_dir):
    from posviz.extract.registry import open_heads

    heads = open_heads(str(minilm_dir), positions="0:32")
    scanned = list(scan_layers(heads, [0, 2], keep={2}))
    assert [s.layer for s in scanned] == [0, 2]
    assert scanned[0].stack is None and scanned[1].stack.heads == 12 and scanned[1].stack.n == 32
    assert "Q/K biases on" in scanned[0].convention_line and not scanned[0].causal

    table = LayerTable(heads.metadata())
    for s in scanned:
        table.add(s)
    assert all(s.stack is None for s in table.layers) and table.indices == [0, 2]
    rows = table.rows(exclude_diagonal=True)
    assert len(rows) == 24 and [r["layer"] for r in rows[::12]] == [0, 2]
    assert list(rows[0])[:5] == ["model", "layer", "head", "toeplitzness", "toeplitzness_offdiag"]
    assert {r["variant"] for r in rows} == {"exclude_diagonal"} and "profile" not in rows[0]
    grid = table.matrix("toeplitzness")
    assert grid.shape == (2, 12)
    np.testing.assert_array_equal(grid[1], scanned[1].scores.toeplitzness)
    assert [r["toeplitzness"] for r in rows[12:]] == list(grid[1])
