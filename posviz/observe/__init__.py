"""Running a model on text and accumulating statistics of its attention and hidden states (``posviz attention``, ``posviz hidden``).

Layers of this package, bottom to top: corpus blocks (:mod:`~posviz.observe.corpus_blocks`),
model loading (:mod:`~posviz.observe.loading`), the block runner both measures share
(:mod:`~posviz.observe.runner`); for attention, streaming sums (:mod:`~posviz.observe.accumulate`),
RoPE band norms (:mod:`~posviz.observe.rope_bands`), statistics (:mod:`~posviz.observe.statistics`)
and the entry point :func:`~posviz.observe.attention.attention`; for hidden states, streaming sums
(:mod:`~posviz.observe.hidden_sums`), statistics (:mod:`~posviz.observe.hidden_statistics`), probes
(:mod:`~posviz.observe.probe`) and the entry point :func:`~posviz.observe.hidden.hidden`. Both take part in one
text pass (:mod:`~posviz.observe.text_pass`: :func:`~posviz.observe.text_pass.observe_text` loads the model once and
feeds every requested measure from one forward call per batch); each measure's part is its request and observer
(:mod:`~posviz.observe.attention_pass`, :mod:`~posviz.observe.hidden_pass`).
Definitions: docs/definitions.md.
"""

from __future__ import annotations

from posviz.util.lazy import lazy_exports

_EXPORTS = {
    "attention": "posviz.observe.attention",
    "AttentionResult": "posviz.observe.attention_result",
    "layer_statistics": "posviz.observe.statistics",
    "LayerSums": "posviz.observe.statistics",
    "HeadAttention": "posviz.observe.statistics",
    "make_token_blocks": "posviz.observe.corpus_blocks",
    "load_model": "posviz.observe.loading",
    "hidden": "posviz.observe.hidden",
    "HiddenResult": "posviz.observe.hidden_result",
    "observe_text": "posviz.observe.text_pass",
    "TextPass": "posviz.observe.text_pass",
    "AttentionRequest": "posviz.observe.attention_pass",
    "HiddenRequest": "posviz.observe.hidden_pass",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
