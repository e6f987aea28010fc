"""The Attention and Hidden-states tabs' numbers: ``posviz attention`` and ``posviz hidden`` on a corpus.

Both come from one text pass over the same token blocks (:func:`posviz.observe.text_pass.observe_text`:
the model loaded once, each batch run once); the page gets
their records (one per layer and head, one per layer) for sortable tables and small
plots, the per-head offset profiles of the mean attention, and each measure's
conventions line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from posviz.explorer.arrays import encode_array


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


def corpus_view(model: str, corpus: str, *, seq_len: int = 128, max_blocks: int = 32, layers: str = "all",
                progress: bool = False, measures: Sequence[str] = ()) -> dict[str, Any]:
    """What the Attention and Hidden-states tabs show for one model on one corpus.

    Parameters
    ----------
    model
        Model folder, hub id, packaged model or run.
    corpus
        A corpus spec as ``posviz attention`` reads it.
    seq_len, max_blocks
        Positions per block and blocks run (the same blocks for both measures).
    layers
        Layers of ``posviz attention`` (``all`` or a list); ``posviz hidden`` scores every hidden state.
    progress
        Progress bars on stderr.
    measures
        Other measures of the registry with a text-pass request (the Measures tab), on the same pass.

    Returns
    -------
    dict
        ``attention`` (records, profiles per layer, conventions), ``hidden`` (records, conventions) and ``measures``.
    """
    from posviz.measures import SeriesOptions, get_measure
    from posviz.observe.attention_pass import AttentionRequest
    from posviz.observe.hidden_pass import HiddenRequest
    from posviz.observe.text_pass import observe_text

    settings = SeriesOptions(corpus=corpus, seq_len=seq_len, max_blocks=max_blocks)
    others = [get_measure(name).load("request")(settings) for name in measures]
    done = observe_text(model, [AttentionRequest(layers=layers), HiddenRequest(layers="all"), *others], corpus=corpus,
                        seq_len=seq_len, max_blocks=max_blocks, show_progress=progress)
    return corpus_view_of(done["attention"], done["hidden"], {name: done[name] for name in measures})


def corpus_view_of(a: Any, h: Any, others: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The tabs' numbers from an :class:`~posviz.observe.attention.AttentionResult`, a :class:`~posviz.observe.hidden.HiddenResult`
    and the results of other measures by name (:func:`measure_view`)."""
    return {
        "model": a.model,
        "attention": {
            "records": clean(a.records()),
            "layers": list(a.layers),
            "heads": a.heads,
            "seq_len": a.seq_len,
            "causal": a.causal,
            "profiles": {str(layer): encode_array(a.stats[layer].profiles) for layer in a.layers},
            "conventions": a.conventions,
        },
        "hidden": {"records": clean(h.records()), "layers": list(h.layers), "conventions": h.conventions},
        "measures": {name: measure_view(name, result) for name, result in (others or {}).items()},
    }


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
