"""Attention statistics at long context: computed in query x key tiles from the queries and keys a model forms.

The model keeps its own fast attention (SDPA, flash); no ``n x n`` map of a layer is ever held. Bottom to top:
the support rule (:mod:`~posviz.observe.tiled.support`), the running sums (:mod:`~posviz.observe.tiled.sums`),
the two-pass tile kernel (:mod:`~posviz.observe.tiled.kernel`) and the statistics
(:mod:`~posviz.observe.tiled.statistics`). Definitions: docs/definitions.md.
"""

from __future__ import annotations

from posviz.util.lazy import lazy_exports

_EXPORTS = {
    "AttentionInputs": "posviz.observe.tiled.kernel",
    "accumulate": "posviz.observe.tiled.kernel",
    "Support": "posviz.observe.tiled.support",
    "TiledSums": "posviz.observe.tiled.sums",
    "TiledHeadAttention": "posviz.observe.tiled.statistics",
    "layer_statistics": "posviz.observe.tiled.statistics",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
