"""``posviz attention`` as a participant of a text pass: its options, its two observers, its fallback.

By default the model keeps its own fast attention and :class:`~posviz.observe.tiled.run.TiledObserver`
computes the statistics in tiles from the queries and keys it forms. With ``exact_maps``, on an older
transformers without an attention interface, when a pass finds the inputs not capturable (one warning), or when
another measure of the pass reads whole eager maps (:attr:`~posviz.observe.runner.BlockRun.eager_for`: the model then
runs eager attention for all of them), the model runs eager attention and :class:`~posviz.observe.accumulate.EagerObserver` sums each chosen
layer's whole maps. Both end in an :class:`~posviz.observe.attention.AttentionResult`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from posviz.errors import OptionError
from posviz.observe.tiled.kernel import TILE
from posviz.observe.tiled.statistics import SINK_EPSILON
from posviz.observe.tiled.sums import MAP_SIZE


@dataclass
class AttentionRequest:
    """The attention statistics of every head of ``layers``, in a text pass.

    Attributes
    ----------
    layers
        ``"all"``, ``"0,2,5-7"``, a list of ints, or ``None`` (layer 0).
    exact_maps
        Sum each chosen layer's whole eager maps (memory grows with n²) instead of tiles.
    tile, map_size, sink_eps
        As :func:`posviz.attention`.
    """

    layers: str | Sequence[int] | None = None
    exact_maps: bool = False
    tile: int = TILE
    map_size: int = MAP_SIZE
    sink_eps: float = SINK_EPSILON
    name: str = field(default="attention", init=False)
    why_not: str | None = field(default=None, init=False)  # why the tiles cannot be used; None: they can
    eager: bool = field(default=False, init=False)

    def check(self) -> None:
        """Refuse a bad tile, map size or sink threshold (one line)."""
        if isinstance(self.tile, bool) or not isinstance(self.tile, int) or self.tile < 1:
            raise OptionError(f"--tile {self.tile!r} is not a positive integer", "use --tile 256 (queries and keys per tile)")
        if isinstance(self.map_size, bool) or not isinstance(self.map_size, int) or self.map_size < 2:
            raise OptionError(f"--map-size {self.map_size!r} is not an integer of at least 2")
        if not 0.0 <= self.sink_eps < 1.0:
            raise OptionError(f"--sink-eps {self.sink_eps} is outside [0, 1)", "Gu et al. use 0.3")
        from posviz.observe.tiled.choice import kernel_choice

        kernel_choice()  # a bad $POSVIZ_TILED_KERNEL before any model is loaded

    def needs_eager(self) -> bool:
        """Eager attention from the start: with ``exact_maps``, or a transformers without an attention interface."""
        from posviz.observe.tiled.run import can_capture

        self.why_not = None if self.exact_maps else can_capture()
        self.eager = self.exact_maps or self.why_not is not None
        return self.eager

    def layer_count(self, loaded: Any) -> int:
        """Attention layers of the model."""
        return int(loaded.num_layers)

    def observer(self, run: Any, layers: list[int], batch_size: int) -> Any:
        """Tiles from the queries and keys, or eager maps summed whole."""
        if self.eager or run.eager_for:
            if self.why_not is not None:  # an older transformers: eager, as always, without a warning
                check_eager_fits(run.loaded, len(layers), run.seq_len, f"its attention inputs cannot be captured ({self.why_not})",
                                 batch_size)
            elif not self.eager:  # the model runs eager for other measures: their maps are summed, the tiles see nothing
                check_eager_fits(run.loaded, len(layers), run.seq_len,
                                 f"the pass runs eager attention for {', '.join(run.eager_for)}, which read(s) whole maps", batch_size)
            from posviz.observe.accumulate import EagerObserver

            return EagerObserver(run.loaded.model, layers, self)
        from posviz.observe.tiled.run import TiledObserver

        return TiledObserver(run.loaded.model, layers, self)

    def fall_back(self, run: Any, layers: list[int], batch_size: int, why: str) -> None:
        """After a pass found the attention inputs not capturable: eager attention, with one warning."""
        import warnings

        from posviz.observe.tiled.run import to_eager

        to_eager(run.loaded.model)
        self.eager = True
        warnings.warn(f"{run.loaded.label} ({type(run.loaded.model).__name__}): {why}; falling back to eager attention "
                      "maps, whose memory grows with n squared", stacklevel=4)
        check_eager_fits(run.loaded, len(layers), run.seq_len, f"its attention inputs cannot be captured ({why})", batch_size)


def check_eager_fits(loaded: Any, layers: int, n: int, why_eager: str | None, batch_size: int = 1) -> None:
    """Refuse (exit 2) a length whose eager maps cannot fit this machine's memory, naming the architecture and
    ``why_eager`` (a clause: why the model runs eager attention)."""
    import os

    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return
    heads = loaded.num_heads
    need = heads * n * n * (4 * batch_size + 8 * layers + 8)  # one batch's maps, a float64 sum per layer, a head's copy
    if need > memory:
        raise OptionError(f"{type(loaded.model).__name__} ({loaded.label}): eager attention maps of {n} positions need about "
                          f"{need / 2**30:.0f} GiB, more than this machine's {memory / 2**30:.0f} GiB"
                          + (f"; {why_eager}" if why_eager else ""),
                          "use a shorter --seq-len, fewer --layers or --batch-size 1")
