"""The measure contract and the registry: what a measure may declare, posviz's own measures, their parts, and the
entry points pyproject.toml declares for them (the same as the registry's, so an installed posviz lists them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from posviz.errors import OptionError
from posviz.measures import Measure, SeriesOptions, get_measure, measure_names
from posviz.measures.builtin import BUILT_IN, BUILT_IN_NAMES

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("fields", "says"), [
    ({"name": "Entropy"}, "is not lower case letters"),
    ({"needs": "gpu"}, "needs 'gpu' is not one of weights, text"),
    ({"series": "a:b", "point": "c:d", "columns": (("x", "x"),)}, "both series and point"),
    ({"point": "c:d"}, "a point measure names its columns"),
    ({"options": frozenset({"layers", "depth"})}, "options depth are not series options"),
    ({"needs": "text", "request": "a:b"}, "a measure with a text-pass request needs text, and gives its values"),
    ({"request": "a:b", "values": "c:d", "columns": (("x", "x"),)}, "a measure with a text-pass request needs text"),
    ({"needs": "text", "explorer": "a:B"}, "a text measure.s explorer tab is drawn from its text-pass result"),
])
def test_a_measure_that_breaks_the_contract_is_refused(fields, says):
    with pytest.raises(OptionError, match=says):
        Measure(**{"name": "x", "summary": "s", "needs": "weights", **fields})


def test_series_options_say_which_are_given():
    assert SeriesOptions().given() == []
    assert SeriesOptions(layers="0", cache=False, seq_len=128).given() == ["layers", "cache"]


def test_posviz_measures_and_their_parts_exist():
    """Every part named by a posviz measure imports (a typo in a "module:attribute" string fails here)."""
    assert measure_names()[: len(BUILT_IN)] == list(BUILT_IN_NAMES) == ["toeplitzness", "bands", "heads", "attention", "hidden", "extrapolate"]
    folders = [p.name for p in (ROOT / "posviz" / "measures").iterdir() if (p / "__init__.py").exists()]
    for m in (*BUILT_IN, *(get_measure(f.replace("_", "-")) for f in folders)):
        for part in ("series", "point", "table", "figure", "run", "accumulator", "request", "values", "plot"):
            if getattr(m, part):
                assert callable(m.load(part)), (m.name, part)
        for part in ("report", "explorer"):
            if getattr(m, part):
                assert m.load(part).title, (m.name, part)
        # a series shows its own table and figure, or (a point or a text-pass request) those of its columns
        assert m.origin == "posviz" and (m.table and m.figure or m.columns) or not m.has_series


def test_the_accumulator_of_attention_merges_the_sums_of_two_processes():
    import numpy as np
    import torch

    cls = get_measure("attention").load("accumulator")
    a, b = cls.zeros(2, 5), cls.zeros(2, 5)
    a.received += torch.arange(10.0).reshape(2, 5)
    b.received += 1.0
    a.blocks, b.blocks = 3, 4
    merged = cls.merge(a, b).numpy()
    assert merged["blocks"] == 7 and np.array_equal(merged["received"], np.arange(10.0).reshape(2, 5) + 1.0)


def test_unknown_measures_and_measures_without_a_series():
    with pytest.raises(OptionError, match="unknown measure 'entropy'") as e:
        get_measure("entropy")
    assert "toeplitzness" in e.value.hint
    assert get_measure("heads").command == "posviz heads"
    with pytest.raises(OptionError, match=r"measure 'heads' has no series along checkpoints \(it is posviz heads\)"):
        get_measure("heads", series=True)


def test_pyproject_declares_posviz_measures_as_entry_points():
    """The registry reads posviz's own measures from code; an installed posviz lists them as entry points too."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = text.split('[project.entry-points."posviz.measures"]', 1)[1].split("\n[", 1)[0]
    declared = dict(re.findall(r'^([a-z-]+) = "([^"]+)"', section, flags=re.M))
    own = {name: target for name, target in declared.items() if target.startswith("posviz.measures.builtin:")}
    assert own == {m.name: f"posviz.measures.builtin:{attr}" for m, attr in
                   zip(BUILT_IN, ("TOEPLITZNESS", "BANDS", "HEADS", "ATTENTION", "HIDDEN", "EXTRAPOLATE"), strict=True)}
    # a measure in its own package under posviz/measures/ is registered by its entry point alone (state-norms)
    packaged = {name: target for name, target in declared.items() if name not in own}
    folders = sorted(p.name for p in (ROOT / "posviz" / "measures").iterdir() if (p / "__init__.py").exists())
    assert packaged == {f.replace("_", "-"): f"posviz.measures.{f}:MEASURE" for f in folders}
    assert "state-norms" in packaged
    import importlib

    for name, target in declared.items():
        module, attr = target.split(":")
        measure = getattr(importlib.import_module(module), attr)
        assert measure.name == name and (name in own or get_measure(name).origin == "posviz")
    assert set(packaged) <= set(measure_names()[len(BUILT_IN):])


def test_listing_the_names_imports_neither_a_measure_nor_importlib_metadata():
    """``posviz --help`` names every measure: reading the names must stay cheap (benchmark 2)."""
    import subprocess
    import sys

    code = ("import sys; from posviz.measures import measure_names; names = measure_names(); "
            "print(names[0], 'importlib.metadata' in sys.modules, 'posviz.series.trajectory' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["toeplitzness", "False", "False", "False"]


def test_entry_point_names_are_read_from_the_files():
    from posviz.measures.registry import _group_names

    text = "[console_scripts]\nposviz = a:b\n\n[posviz.measures]\ntable-norm = posviz_norms:MEASURE\n# x = y\n[other]\nz = w\n"
    assert _group_names(text) == {"table-norm"}


def test_the_page_draws_a_view_for_each_measure_with_an_explorer_tab():
    """The explorer's script has a view (``VIEWS``) for exactly the measures of ``PAGE_VIEWS``, and every posviz
    measure with an explorer tab is one of them."""
    from posviz.explorer.tab import PAGE_VIEWS

    script = (ROOT / "posviz" / "explorer" / "assets" / "explorer.js").read_text(encoding="utf-8")
    views = re.search(r"const VIEWS = \{([^}]*)\}", script)
    assert views and tuple(re.findall(r"(\w+):", views.group(1))) == PAGE_VIEWS
    assert [m.name for m in BUILT_IN if m.explorer and m.needs == "text"] == list(PAGE_VIEWS)


def test_the_page_draws_a_view_for_each_measure_with_a_weight_tab():
    """The same for the weight tabs: ``WEIGHT_VIEWS`` of the script names exactly ``WEIGHT_VIEWS``, and every posviz
    measure of the weights with an explorer tab is one of them, each with its own key in a model's entry."""
    from posviz.explorer.tab import WEIGHT_VIEWS, WeightsTab

    script = (ROOT / "posviz" / "explorer" / "assets" / "explorer.js").read_text(encoding="utf-8")
    views = re.search(r"const WEIGHT_VIEWS = \{([^}]*)\}", script)
    assert views and tuple(re.findall(r"(\w+):", views.group(1))) == WEIGHT_VIEWS
    tabs = [m for m in BUILT_IN if m.explorer and m.needs == "weights"]
    assert [m.name for m in tabs] == list(WEIGHT_VIEWS)
    keys = [m.load("explorer").key for m in tabs]
    assert all(isinstance(m.load("explorer"), WeightsTab) for m in tabs) and keys == ["p", "heads"]
