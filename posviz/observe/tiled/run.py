"""Run a model over token blocks with its own fast attention and keep tiled statistics of the chosen layers.

:func:`tiled_statistics` is the long-context path of ``posviz attention``: the model keeps SDPA (or flash
attention), :class:`~posviz.observe.tiled.capture.TiledCapture` sees each chosen layer's queries and keys, and
the statistics come from O(n) sums per head. :func:`can_capture` says beforehand whether this transformers can
route attention through posviz at all (older releases: the eager path, with one warning).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from posviz.observe.tiled.capture import NotCapturable, TiledCapture, _interfaces
from posviz.observe.tiled.statistics import TiledHeadAttention, layer_statistics
from posviz.observe.tiled.support import Support


def can_capture() -> str | None:
    """None when the installed transformers has an attention interface to capture from; else why not."""
    try:
        _interfaces()
    except NotCapturable as e:
        return str(e)
    return None


def to_eager(model: Any) -> None:
    """Switch a model loaded with its default attention to eager attention (which hands out its probabilities)."""
    if getattr(model.config, "_attn_implementation", "eager") == "eager":
        return
    can = getattr(model, "_can_set_attn_implementation", None)
    if can is not None and can():
        model.set_attn_implementation("eager")
    else:  # a model that reads the choice at every forward pass (posviz's own, BLOOM)
        model.config._attn_implementation = "eager"


@dataclass(frozen=True)
class TiledRun:
    """What :func:`tiled_statistics` returns: per chosen layer, its statistics, support and mean map."""

    stats: dict[int, TiledHeadAttention]
    supports: dict[int, Support]
    maps: dict[int, np.ndarray]  # per layer, (heads, m, m): the mean attention, block-averaged when m < n
    blocks: int


def tiled_statistics(model: Any, ids: np.ndarray, layers: Sequence[int], *, batch_size: int, tile: int, map_size: int,
                     progress: Callable[[int], None] | None = None) -> TiledRun:
    """Run ``model`` over ``ids`` and score every head of ``layers`` from its queries and keys, tile by tile.

    Raises
    ------
    NotCapturable
        The model's attention cannot be captured (the caller falls back to eager maps).
    """
    from posviz.observe.accumulate import _takes_use_cache
    from posviz.observe.runner import run_batches

    kwargs = {"use_cache": False} if _takes_use_cache(model) else {}
    with TiledCapture(model, layers, tile=tile, map_size=map_size) as capture:
        blocks = run_batches(model, ids, batch_size, lambda x: model(x, **kwargs), progress=progress)
    missing = [layer for layer in layers if layer not in capture.sums]
    if missing:
        raise NotCapturable(f"layers {missing} never reached the attention interface")
    stats = {layer: layer_statistics(capture.sums[layer], capture.supports[layer]) for layer in layers}
    return TiledRun(stats=stats, supports=dict(capture.supports), maps={layer: stats[layer].mean_map for layer in layers},
                    blocks=blocks)

