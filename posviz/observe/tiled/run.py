"""Run a model over token blocks with its own fast attention and keep tiled statistics of the chosen layers.

:class:`TiledObserver` is the long-context path of ``posviz attention`` in a text pass
(:mod:`posviz.observe.text_pass`): the model keeps SDPA (or flash attention),
:class:`~posviz.observe.tiled.capture.TiledCapture` sees each chosen layer's queries and keys, and
the statistics come from O(n) sums per head. :func:`can_capture` says beforehand whether this transformers can
route attention through posviz at all (older releases: the eager path, with one warning).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from posviz.observe.tiled.capture import NotCapturable, TiledCapture, _interfaces
from posviz.observe.tiled.statistics import layer_statistics


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


class TiledObserver:
    """``posviz attention``'s observer in a text pass: the model keeps its own attention, posviz sums tiles.

    :class:`~posviz.observe.tiled.capture.TiledCapture` sees each chosen layer's queries and keys; after the first
    batch every chosen layer must have reached it, else :class:`NotCapturable` (the pass falls back to eager maps).
    Its result is an :class:`~posviz.observe.attention.AttentionResult` with the long-context statistics.
    """

    def __init__(self, model: Any, layers: Sequence[int], request: Any) -> None:
        from posviz.observe.accumulate import _takes_use_cache
        from posviz.observe.rope_bands import RopeBands

        self.model, self.layers, self.request = model, list(layers), request
        self.bands = RopeBands.attach(model, self.layers)
        self.capture = TiledCapture(model, self.layers, tile=request.tile, map_size=request.map_size)
        self.entered = False
        self.blocks = 0
        self.kwargs = {"use_cache": False} if _takes_use_cache(model) else {}

    def forward_kwargs(self) -> dict[str, Any]:
        return dict(self.kwargs)

    def before(self, ids: Any) -> None:
        if not self.entered:
            self.capture.__enter__()
            self.entered = True

    def after(self, ids: Any, out: Any) -> None:
        missing = [layer for layer in self.layers if layer not in self.capture.sums]
        if missing:
            raise NotCapturable(f"layers {missing} never reached the attention interface")
        self.blocks += int(ids.shape[0])

    def close(self) -> None:
        if self.entered:
            self.capture.__exit__(None, None, None)
            self.entered = False
        if self.bands is not None:
            self.bands.detach()

    def finish(self, run: Any) -> Any:
        """The :class:`~posviz.observe.attention.AttentionResult` of the pass."""
        from posviz.observe.attention_result import AttentionResult

        layers, supports = self.layers, self.capture.supports
        stats = {layer: layer_statistics(self.capture.sums[layer], supports[layer]) for layer in layers}
        return AttentionResult(
            model=run.loaded.label, layers=layers, heads=int(stats[layers[0]].toeplitzness.shape[0]), seq_len=run.seq_len,
            blocks=self.blocks, causal=all(supports[layer].causal for layer in layers), layout=run.layout, corpus=run.corpus,
            stats=stats, means={layer: stats[layer].mean_map for layer in layers},
            rope_bands=None if self.bands is None else self.bands.means(), method="tiled", sink_eps=self.request.sink_eps,
            windows={layer: s.window for layer, s in supports.items() if s.window is not None})
