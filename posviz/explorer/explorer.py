"""``posviz.explore(...)``: an interactive, offline explorer of what posviz measures, as one HTML file.

:func:`explore` gathers the numbers of each tab through posviz's own APIs, looping over the registry's measures
with a tab of their own (the weight tabs, P and Heads: :mod:`posviz.explorer.weights`; the corpus tabs:
:mod:`posviz.explorer.corpus`; a run's checkpoints: :mod:`posviz.explorer.series`), and
:class:`Explorer` holds the page (:mod:`posviz.explorer.page`): ``.save(path)`` writes it
atomically, and in a notebook it shows inline, offline, as an ``<iframe srcdoc>``.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posviz.errors import OptionError, UnsupportedModelError

#: Most models one explorer shows (side by side in the Comparison tab, where each map needs its own width).
MAX_MODELS = 4


@dataclass(frozen=True)
class Explorer:
    """One explorer page.

    Attributes
    ----------
    html
        The whole self-contained HTML document.
    data
        The numbers it shows (JSON-ready; arrays as base64 typed-array specs, see :mod:`posviz.explorer.arrays`).
    """

    html: str = field(repr=False)
    data: dict[str, Any] = field(repr=False)

    @property
    def size(self) -> int:
        """Bytes of the page in UTF-8."""
        return len(self.html.encode("utf-8"))

    def save(self, path: str | os.PathLike) -> Path:
        """Write the page to ``path`` (atomically: a failure leaves no partial file) and return the path."""
        from posviz.util.atomic import write_text_atomic

        target = Path(path)
        write_text_atomic(target, self.html)
        return target

    def _repr_html_(self) -> str:
        """The page inline in a notebook: an iframe whose ``srcdoc`` is the escaped page (nothing fetched).

        The attribute is pure ASCII (other characters as numeric references), so the page reads the same whatever
        encoding the host page declares or its browser guesses (``R²`` read as ``RÂ²`` otherwise)."""
        page = html.escape(self.html, quote=True).encode("ascii", "xmlcharrefreplace").decode("ascii")
        return (f'<iframe srcdoc="{page}" style="width: 100%; height: 820px; border: 1px solid #ddd;" '
                'sandbox="allow-scripts" title="posviz explorer"></iframe>')

    def __repr__(self) -> str:
        names = ", ".join(m.get("label", m["name"]) for m in self.data["models"])
        return f"Explorer({names}; {self.size / 2**20:.1f} MiB)"


def check_models(models: Sequence[str]) -> list[str]:
    """The models as a list, refused when empty or more than :data:`MAX_MODELS`."""
    models = [models] if isinstance(models, str) else list(models)
    if not models:
        raise OptionError("no model given", "name a model folder, hub id, run folder or control")
    if len(models) > MAX_MODELS:
        raise OptionError(f"too many models: {len(models)} given, an explorer shows at most {MAX_MODELS}",
                          "make one explorer per group of models")
    return models


def _model_entry(spec: str, settings: Any, tabs: Sequence[Any]) -> dict[str, Any]:
    """One model's weight ``tabs`` (the registry's: P, Heads; what the model has of them) and its Series tab, with
    notes on what it lacks."""
    from posviz.read.runs import is_run_folder
    from posviz.util.names import display_name

    entry: dict[str, Any] = {"name": spec, "p": None, "heads": None, "corpus": None, "series": None, "notes": []}
    missing: UnsupportedModelError | None = None
    for tab in tabs:
        try:
            view = tab.data(spec, settings)
        except UnsupportedModelError as e:  # no learned table (RoPE, T5, ...): the heads may still be there
            missing = missing or e
            entry["notes"].append(f"no {tab.short} tab: {e}")
            continue
        if view is not None:
            entry[tab.key], entry["name"] = view, view["model"]
    if not any(entry[tab.key] is not None for tab in tabs):
        raise missing if missing is not None else UnsupportedModelError(f"{spec}: nothing to explore")
    entry["label"] = display_name(entry["name"])  # menus and titles; the provenance keeps the full name
    if is_run_folder(spec) and entry["p"] is not None:  # the run's checkpoints, as its E_P's Toeplitzness series
        from posviz.explorer.series import series_view

        entry["series"] = series_view(spec, positions=settings.positions)
    return entry


def explore(
    models: str | Sequence[str],
    *,
    corpus: str | None = None,
    heads: bool = True,
    layers: str = "all",
    max_positions: int = 512,
    positions: str | None = None,
    table: str | None = None,
    null_draws: int = 10,
    seed: int = 0,
    seq_len: int = 128,
    max_blocks: int = 32,
    progress: bool = False,
    measured: Mapping[str, Mapping[str, Any]] | None = None,
    measures: Sequence[str] = (),
) -> Explorer:
    """An interactive explorer of one or more models (or ``posviz train`` runs), as one offline HTML page.

    Parameters
    ----------
    models
        Up to :data:`MAX_MODELS` model folders, weight files, hub ids, packaged models, run folders
        (with a Series tab along their checkpoints) or controls (``sinusoidal:512x384``).
    corpus
        A corpus (as ``posviz attention`` reads it) for the corpus tabs: one per measure of the registry with a tab of
        its own (Attention, Hidden states), all from one pass over the text; ``None``: no such tabs.
    heads
        Include the Heads tab (every layer's position-only map of every head).
    layers
        Layers of the Heads and Attention tabs: ``all`` or a list like ``0,2,5-7``.
    max_positions
        P is shown exactly up to this many positions, block-averaged above.
    positions, table
        Positions to keep (``A:B``) and the position table of models with several, as in ``posviz heatmap``.
    null_draws, seed
        Sampled permutations for the spread of P's null (its mean is exact).
    seq_len, max_blocks
        Block length and number of blocks of the corpus.
    progress
        Progress bars on stderr.
    measured
        Text measures already run, by model: ``{spec: {"attention": AttentionResult, "hidden": HiddenResult, ...}}``
        (a report's passes); the corpus tabs show them instead of running the model again.
    measures
        With ``corpus``: other measures of the registry that run on text (``state-norms``, another package's), on the
        same pass, in a Measures tab.

    Returns
    -------
    Explorer
        ``.save(path)`` writes it; a notebook shows it inline.

    Raises
    ------
    PosvizError
        Too many models, an unknown model, a model with neither a position table nor per-head maps, bad options.

    Examples
    --------
    >>> page = explore("sinusoidal:64x16", heads=False)
    >>> page.data["models"][0]["p"]["n"]
    64
    """
    models = check_models(models)
    if max_positions < 16:
        raise OptionError(f"max_positions must be at least 16, got {max_positions}")
    from posviz.explorer.weights import WeightSettings, weight_tab_measures

    settings = WeightSettings(layers=layers, max_positions=max_positions, positions=positions, table=table,
                              null_draws=null_draws, seed=seed, progress=progress)
    tabs = [(m.name, m.load("explorer")) for m in weight_tab_measures()]  # the registry, read once for every model
    wanted = [tab for name, tab in tabs if heads or name != "heads"]
    entries = [_model_entry(m, settings, wanted) for m in models]
    if corpus is not None:
        from posviz.explorer.corpus import corpus_view, corpus_view_of, tab_measures
        from posviz.read.embeddings import is_synthetic

        wanted = [m.name for m in tab_measures()] + list(measures)
        for entry, spec in zip(entries, models, strict=True):
            done = (measured or {}).get(spec, {})
            if all(name in done and not isinstance(done[name], Exception) for name in wanted):
                entry["corpus"] = corpus_view_of(done, measures)
            elif not is_synthetic(spec):  # what failed in the report fails here again, with its own error
                entry["corpus"] = corpus_view(spec, corpus, seq_len=seq_len, max_blocks=max_blocks, layers=layers,
                                              progress=progress, measures=measures)
    from posviz.explorer.page import plotly_js, render_page
    from posviz.explorer.provenance import sidebar

    js, js_version = plotly_js()
    weight_tabs = [{"name": name, "key": tab.key, "title": tab.title} for name, tab in tabs]
    data = {"format": "posviz-explorer/1", "models": entries, "weight_tabs": weight_tabs, "sidebar": sidebar(js_version)}
    title = "posviz explorer: " + ", ".join(e["label"] for e in entries)
    return Explorer(render_page(data, title, js), data)
