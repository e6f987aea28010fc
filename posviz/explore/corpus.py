"""The Attention and Hidden-states tabs' numbers: ``posviz attention`` and ``posviz hidden`` on a corpus.

Both come from one text pass over the same token blocks (:func:`posviz.observe.text_pass.observe_text`:
the model loaded once, each batch run once); the page gets
their records (one per layer and head, one per layer) for sortable tables and small
plots, the per-head offset profiles of the mean attention, and each measure's
conventions line.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posviz.explore.arrays import encode_array


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
                progress: bool = False) -> dict[str, Any]:
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

    Returns
    -------
    dict
        ``attention`` (records, profiles per layer, conventions) and ``hidden`` (records, conventions).
    """
    from posviz.observe.attention_pass import AttentionRequest
    from posviz.observe.hidden_pass import HiddenRequest
    from posviz.observe.text_pass import observe_text

    both = observe_text(model, [AttentionRequest(layers=layers), HiddenRequest(layers="all")], corpus=corpus,
                        seq_len=seq_len, max_blocks=max_blocks, show_progress=progress)
    return corpus_view_of(both["attention"], both["hidden"])


def corpus_view_of(a: Any, h: Any) -> dict[str, Any]:
    """The tabs' numbers from an :class:`~posviz.observe.api.AttentionResult` and a :class:`~posviz.observe.hidden.HiddenResult`."""
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
    }
