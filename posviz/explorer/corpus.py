"""The corpus tabs' numbers: a loop over the registry's text measures, on one pass over the text.

Every measure with a tab of its own (``Measure.explorer``, an :class:`~posviz.explorer.tab.ExplorerTab`: attention's,
hidden's) and every other measure asked for (the Measures tab) is a request in one text pass
(:func:`posviz.observe.text_pass.observe_text`: the model loaded once, each batch run once). Each tab's data is what
its ``ExplorerTab.data`` makes of the measure's result: for attention, its records (one per layer and head) and
per-head offset profiles; for hidden, one record per layer; each with its conventions line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from posviz.explorer.arrays import encode_array
from posviz.explorer.tab import ExplorerTab


def clean(value: Any) -> Any:
    """A record made JSON-ready: NaN and infinities become ``None``, numpy scalars Python ones."""
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    return value


def tab_measures() -> list[Any]:
    """The registry's measures with a tab of their own on the page (``Measure.explorer``), in registry order."""
    from posviz.explorer.tab import PAGE_VIEWS
    from posviz.measures import get_measure, measure_names

    # only names of the page's views can have a tab: no other package's measure is imported to find them
    return [m for m in (get_measure(name) for name in measure_names() if name in PAGE_VIEWS) if m.explorer]


def corpus_view(model: str, corpus: str, *, seq_len: int = 128, max_blocks: int = 32, layers: str = "all",
                progress: bool = False, measures: Sequence[str] = ()) -> dict[str, Any]:
    """What the corpus tabs show for one model on one corpus: every measure with a tab of its own, and ``measures``.

    Parameters
    ----------
    model
        Model folder, hub id, packaged model or run.
    corpus
        A corpus spec as ``posviz attention`` reads it.
    seq_len, max_blocks
        Positions per block and blocks run (the same blocks for every measure).
    layers
        Layers of the measures whose tab takes them (``ExplorerTab.layers``: attention), ``all`` or a list.
    progress
        Progress bars on stderr.
    measures
        Other measures of the registry with a text-pass request (the Measures tab), on the same pass.

    Returns
    -------
    dict
        :func:`corpus_view_of` of the one pass (:func:`posviz.observe.text_pass.observe_text`: the model loaded once,
        each batch run once, every measure fed by it).
    """
    from posviz.measures import SeriesOptions, get_measure
    from posviz.observe.text_pass import observe_text

    chosen = None if layers == "all" else layers
    requests = []
    for measure in [*tab_measures(), *(get_measure(name) for name in measures)]:
        own = measure.load("explorer") if measure.explorer else None
        settings = SeriesOptions(corpus=corpus, seq_len=seq_len, max_blocks=max_blocks,
                                 layers=chosen if own is not None and own.layers else None)
        requests.append(measure.load("request")(settings))
    done = observe_text(model, requests, corpus=corpus, seq_len=seq_len, max_blocks=max_blocks, show_progress=progress)
    return corpus_view_of(done, measures)


def corpus_view_of(results: Mapping[str, Any], measures: Sequence[str] = ()) -> dict[str, Any]:
    """The corpus tabs' numbers from one model's results by measure name.

    ``results`` holds a result for every measure of :func:`tab_measures` (each becomes its tab's data, under its name,
    and an entry of ``tabs``) and for each of ``measures`` (the Measures tab: :func:`measure_view`).
    """
    own = tab_measures()
    first = results[own[0].name] if own else next(iter(results.values()))
    view: dict[str, Any] = {"model": first.model, "tabs": [], "measures": {}}
    for measure in own:
        tab = measure.load("explorer")
        view[measure.name] = tab.data(results[measure.name])
        view["tabs"].append({"name": measure.name, "title": tab.title})
    view["measures"] = {name: measure_view(name, results[name]) for name in measures}
    return view


def attention_tab(a: Any) -> dict[str, Any]:
    """The Attention tab of an :class:`~posviz.observe.attention.AttentionResult`: its records (one per layer and
    head), the per-head offset profiles of the mean attention, and its conventions line."""
    return {"records": clean(a.records()), "layers": list(a.layers), "heads": a.heads, "seq_len": a.seq_len,
            "causal": a.causal, "profiles": {str(layer): encode_array(a.stats[layer].profiles) for layer in a.layers},
            "conventions": a.conventions}


def hidden_tab(h: Any) -> dict[str, Any]:
    """The Hidden-states tab of a :class:`~posviz.observe.hidden.HiddenResult`: one record per layer, conventions."""
    return {"records": clean(h.records()), "layers": list(h.layers), "conventions": h.conventions}


#: attention's tab (``Measure.explorer`` of :mod:`posviz.measures.builtin`).
ATTENTION_TAB = ExplorerTab("Attention", attention_tab, layers=True)
#: hidden's tab.
HIDDEN_TAB = ExplorerTab("Hidden states", hidden_tab)


def measure_view(name: str, result: Any) -> dict[str, Any]:
    """What the Measures tab shows of one measure's result: its summary, its values under their column labels, its
    records (the numeric fields) and its conventions line."""
    from posviz.measures import get_measure

    measure = get_measure(name)
    records = clean(result.records()) if hasattr(result, "records") else []
    keys = [k for k in (records[0] if records else {}) if all(isinstance(r.get(k), (int, float)) for r in records)]
    return {"summary": measure.summary, "origin": measure.origin,
            "columns": [{"key": k, "label": label} for k, label in measure.columns],
            "values": clean(measure.load("values")(result)), "record_keys": keys,
            "records": [{k: r[k] for k in keys} for r in records], "conventions": getattr(result, "conventions", "")}
