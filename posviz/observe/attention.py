"""``posviz.attention(...)``: the attention a model produces on a corpus, per head, with its Toeplitzness.

From a model and a corpus: load, cut the corpus into token blocks, and score every head of the chosen layers, in
one text pass (:mod:`posviz.observe.text_pass`; :class:`~posviz.observe.attention_pass.AttentionRequest` joins
the same pass as other text measures). By default the model keeps its own fast attention and posviz computes the statistics in tiles from the queries
and keys it forms (:mod:`posviz.observe.tiled`: memory O(n) per head, any length). Where those cannot be captured
(an architecture outside transformers' attention interface, an older transformers, a model trained by posviz),
and with ``exact_maps=True``, the model runs eager attention and each chosen layer's maps are summed whole
(:mod:`posviz.observe.accumulate`, :mod:`posviz.observe.statistics`). The result holds one record per
(layer, head) and the arrays behind them (mean attention, offset profiles).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from posviz.observe.attention_result import AttentionResult
from posviz.observe.text_input import TextInput
from posviz.observe.tiled.kernel import TILE
from posviz.observe.tiled.statistics import SINK_EPSILON
from posviz.observe.tiled.sums import MAP_SIZE

__all__ = ["AttentionResult", "attention"]


def attention(
    model: str,
    *,
    layers: str | Sequence[int] | None = None,
    exact_maps: bool = False,
    tile: int = TILE,
    map_size: int = MAP_SIZE,
    sink_eps: float = SINK_EPSILON,
    text: TextInput | None = None,
    **options: Any,
) -> AttentionResult:
    """Run ``model`` over blocks of ``corpus`` and score the attention of every head of ``layers``.

    Parameters
    ----------
    model
        Model folder, hub id, packaged model, ``RUN`` or ``RUN@STEP``.
    layers
        ``"all"``, ``"0,2,5-7"`` or a list of ints (default: layer 0).
    exact_maps
        Sum each chosen layer's whole eager maps (memory grows with n²) instead of the default tiles.
    tile, map_size
        Queries and keys per tile; positions up to which each head's mean map is kept exactly (block-averaged beyond).
    sink_eps
        A head is a sink when its mean attention to position 0 exceeds this (Gu et al., ICLR 2025: 0.3).
    text, **options
        The text and how it runs (the corpus, ``seq_len``, ``batch_size``, ``max_blocks``, the device, the
        tokenizer, ready ``token_blocks``, ``show_progress``): a :class:`~posviz.observe.text_input.TextInput`, or its
        fields as keywords, as every text measure takes them.

    Returns
    -------
    AttentionResult

    Raises
    ------
    PosvizError
        An empty corpus, a sequence longer than the model's positions, a layer that
        does not exist, a model without attention weights.
    """
    from posviz.observe.attention_pass import AttentionRequest
    from posviz.observe.text_pass import observe_text

    request = AttentionRequest(layers=layers, exact_maps=exact_maps, tile=tile, map_size=map_size, sink_eps=sink_eps)
    return observe_text(model, [request], text, **options)["attention"]
