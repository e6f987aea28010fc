"""Layer-by-layer stacks computed once per distinct matrix: the container of the table-free schemes.

T5, ALiBi, RoPE, DeBERTa and models trained by ``posviz train`` describe each
layer by a key, a way to make its stack and its conventions;
:class:`CachedHeads` builds each distinct stack once (shared schemes: once for
all layers) and scores it once. See ARCHITECTURE.md.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from posviz.extract.base import check_layer
from posviz.positional_scores import PositionalScores

if TYPE_CHECKING:
    from posviz.toeplitz.result import ToeplitzScore

#: ``layer -> (key, make, conventions)``: layers with equal keys share one stack, ``make()`` builds it.
LayerPlan = Callable[[int], tuple[Hashable, Callable[[], PositionalScores], dict[str, Any]]]


@dataclass
class CachedHeads:
    """Per-head positional matrices, layer by layer, each distinct stack built and scored once.

    Implements :class:`~posviz.extract.base.HeadsSource`. The stack of
    ``layer(L)`` carries ``{**stack.meta, **metadata(), **conventions(L), "layer": L}``.

    Attributes
    ----------
    scheme
        The scheme in words.
    model, source
        Label and provenance line of the checkpoint.
    config
        Its ``config.json``.
    num_layers, num_heads, n
        Layers, heads per layer, positions.
    first_position
        Position (or relative position) of row 0.
    common
        ``family`` and, where the default does not fit, ``rows_note``.
    plan
        The :data:`LayerPlan` of the scheme.
    """

    scheme: str
    model: str
    source: str
    config: dict[str, Any]
    num_layers: int
    num_heads: int
    n: int
    first_position: int
    common: dict[str, Any]
    plan: LayerPlan = field(repr=False)
    _planned: dict[int, Any] = field(repr=False, default_factory=dict)
    _cache: dict[Any, Any] = field(repr=False, default_factory=dict)

    def check_layer(self, layer: int) -> int:
        """Validate a layer index."""
        return check_layer(layer, self.num_layers, self.model)

    def metadata(self) -> dict[str, Any]:
        """Model-level provenance."""
        first, last = self.first_position, self.first_position + self.n
        return {
            "model": self.model,
            "source": self.source,
            "family": self.common.get("family"),
            "model_type": self.config.get("model_type"),
            "scheme": self.scheme,
            "positions": self.n,
            "rows": [first, last],
            "rows_note": self.common.get("rows_note", f"positions {first}-{last - 1}"),
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
        }

    def _entry(self, layer: int) -> tuple[Hashable, PositionalScores, dict[str, Any]]:
        self.check_layer(layer)
        if layer not in self._planned:
            self._planned[layer] = self.plan(layer)
        key, make, conv = self._planned[layer]
        if key not in self._cache:
            self._cache[key] = make()
        return key, self._cache[key], conv

    def conventions(self, layer: int) -> dict[str, Any]:
        """The conventions used for ``layer``."""
        return self._entry(layer)[2]

    def layer(self, layer: int) -> PositionalScores:
        """All heads of one layer."""
        _, stack, conv = self._entry(layer)
        out = PositionalScores(stack.form, stack.n, stack.heads, stack.left, stack.right, stack.offsets, stack.dense)
        out.meta = {**stack.meta, **self.metadata(), **conv, "layer": layer}
        return out

    def score(self, layer: int, *, null_draws: int = 0, seed: int = 0, keep: bool = True) -> tuple[PositionalScores | None, ToeplitzScore]:
        """The layer's stack and per-head scores (computed once per distinct matrix; ``keep`` as in
        :meth:`posviz.extract.absolute.AbsoluteHeads.score`)."""
        from posviz.toeplitz.engine import score_layer

        key, stack, _ = self._entry(layer)
        skey = ("score", key, null_draws, seed)
        if skey not in self._cache:
            self._cache[skey] = score_layer(stack, null_draws=null_draws, seed=seed)
        return (self.layer(layer) if keep else None), self._cache[skey]
