"""``posviz.attention(...)``: the attention a model produces on a corpus, per head, with its Toeplitzness.

From a model and a corpus: load, cut the corpus into token blocks, and score every head of the chosen layers.
By default the model keeps its own fast attention and posviz computes the statistics in tiles from the queries
and keys it forms (:mod:`posviz.observe.tiled`: memory O(n) per head, any length). Where those cannot be captured
(an architecture outside transformers' attention interface, an older transformers, a model trained by posviz),
and with ``exact_maps=True``, the model runs eager attention and each chosen layer's maps are summed whole
(:mod:`posviz.observe.accumulate`, :mod:`posviz.observe.statistics`). The result holds one record per
(layer, head) and the arrays behind them (mean attention, offset profiles).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from posviz.errors import OptionError
from posviz.observe.statistics import HeadAttention, layer_statistics
from posviz.observe.tiled.kernel import TILE
from posviz.observe.tiled.statistics import SINK_EPSILON, TiledHeadAttention
from posviz.observe.tiled.sums import MAP_SIZE
from posviz.train.corpus import DEMO_CORPUS


@dataclass(frozen=True)
class AttentionResult:
    """Attention statistics of the chosen layers of one model over one corpus.

    Attributes
    ----------
    model
        The model, as named in outputs.
    layers
        Layers scored, in the order requested.
    heads, seq_len, blocks
        Heads per layer, positions per block, blocks run.
    causal
        Whether the attention was causal (scored over ``j <= i`` only).
    layout
        Which special tokens sit at which positions of every block.
    corpus
        The corpus spec and the first 12 hex digits of its SHA-256.
    stats
        Per layer, :class:`~posviz.observe.statistics.HeadAttention` (eager maps) or
        :class:`~posviz.observe.tiled.statistics.TiledHeadAttention` (tiled: its fields and the long-context ones).
    means
        Per layer, the mean attention ``Abar`` ``(heads, n, n)``; on the tiled path beyond ``map_size`` positions,
        its block average ``(heads, m, m)``.
    rope_bands
        For RoPE models, per layer, ``{"query": (heads, bands), "key": (kv_heads, bands)}`` mean norms.
    """

    model: str
    layers: list[int]
    heads: int
    seq_len: int
    blocks: int
    causal: bool
    layout: str
    corpus: str
    stats: dict[int, HeadAttention]
    means: dict[int, np.ndarray] = field(repr=False)
    rope_bands: dict[int, dict[str, np.ndarray]] | None = field(default=None, repr=False)
    method: str = "eager maps"
    sink_eps: float = SINK_EPSILON
    windows: dict[int, int] = field(default_factory=dict)

    @property
    def tiled(self) -> bool:
        """Whether the statistics were computed in tiles from queries and keys (not from eager maps)."""
        return self.method == "tiled"

    @property
    def conventions(self) -> str:
        """One line stating how the numbers were made."""
        mask = "causal: only j <= i counts" if self.causal else "bidirectional: all n^2 entries"
        if self.windows:
            mask += f"; sliding window of {sorted(set(self.windows.values()))[0]} keys in layers {sorted(self.windows)}"
        line = (f"{self.blocks} blocks of {self.seq_len} tokens from {self.corpus}; {self.layout}; {mask}; "
                "null: each row shuffled within its support (exact mean)")
        if self.tiled:
            m = self.means[self.layers[0]].shape[-1]
            grid = "exact" if m == self.seq_len else f"on the {m} x {m} block-averaged mean map"
            line += (f"; tiled from queries and keys (the model kept its own attention), Toeplitzness {grid}; "
                     f"sink: mean attention to position 0 > {self.sink_eps:g}")
        return line

    def records(self, *, profiles: bool = False) -> list[dict[str, Any]]:
        """One plain dict per (layer, head), JSON-ready."""
        n = self.seq_len
        out = []
        for layer in self.layers:
            s = self.stats[layer]
            for h in range(self.heads):
                r: dict[str, Any] = {"model": self.model, "layer": layer, "head": h}
                for name in ("toeplitzness_offdiag", "toeplitzness", "null_mean_offdiag", "null_mean",
                             "excess_offdiag", "excess", "positional_share", "positional_share_null", "sink_mass"):
                    r[name] = float(np.atleast_1d(getattr(s, name))[h])
                r["profile_peak"] = int(s.profile_peak[h])
                r["profile_at_peak"] = float(s.profiles[h, n - 1 + int(s.profile_peak[h])])
                r.update(blocks=self.blocks, seq_len=n, causal=self.causal)
                if isinstance(s, TiledHeadAttention):
                    r.update(_long_context_fields(s, h, self.sink_eps))
                if self.rope_bands is not None:
                    r["query_band_norms"] = [float(v) for v in self.rope_bands[layer]["query"][h]]
                if profiles:
                    r["profile"] = [float(v) for v in s.profiles[h]]
                out.append(r)
        return out

    def to_frame(self) -> Any:
        """The records as a pandas DataFrame, one row per (layer, head)."""
        import pandas as pd

        return pd.DataFrame(self.records())


def _long_context_fields(s: TiledHeadAttention, h: int, eps: float) -> dict[str, Any]:
    """The long-context statistics of head ``h`` (tiled path), JSON-ready."""
    starts, received = s.received_profile()
    return {
        "entropy": float(s.entropy[h]), "entropy_normalised": float(s.entropy_normalised[h]), "max_weight": float(s.max_weight[h]),
        "sink": bool(s.sink_mass[h] > eps), "sink_rate": s.sink_rate(eps), "sink_rate_eps": eps,
        "span50": float(s.span50[h]), "span90": float(s.span90[h]),
        "span50_quantiles": [float(v) for v in s.span50_quantiles[h]], "span90_quantiles": [float(v) for v in s.span90_quantiles[h]],
        "received_by_position": [float(v) for v in received[h]], "received_positions": [int(v) for v in starts],
        "distance_edges": [int(v) for v in s.distance_edges], "distance_mass": [float(v) for v in s.distance_mass[h]],
        "map_exact": s.map_exact,
    }


def attention(
    model: str,
    *,
    corpus: str | Sequence[str] = DEMO_CORPUS,
    seq_len: int = 128,
    layers: str | Sequence[int] | None = None,
    batch_size: int = 8,
    max_blocks: int | None = 256,
    device: str | None = None,
    device_map: str | None = None,
    tokenizer: str | None = None,
    token_blocks: np.ndarray | None = None,
    block_layout: str = "token blocks given",
    show_progress: bool = False,
    exact_maps: bool = False,
    tile: int = TILE,
    map_size: int = MAP_SIZE,
    sink_eps: float = SINK_EPSILON,
) -> AttentionResult:
    """Run ``model`` over blocks of ``corpus`` and score the attention of every head of ``layers``.

    Parameters
    ----------
    model
        Model folder, hub id, packaged model, ``RUN`` or ``RUN@STEP``.
    corpus
        Corpus spec(s) as ``posviz train`` reads them: a text file, a folder,
        the demo corpus (the default, :data:`~posviz.train.corpus.DEMO_CORPUS`) or a dataset id.
    seq_len
        Positions per block, special tokens included.
    layers
        ``"all"``, ``"0,2,5-7"`` or a list of ints (default: layer 0).
    batch_size
        Blocks per forward pass.
    max_blocks
        At most this many blocks (``None``: the whole corpus).
    device, device_map
        ``cpu``/``cuda``, or ``device_map="auto"`` (accelerate) for models larger than one device.
    tokenizer
        A tokenizer to use instead of the model's (or the run's).
    token_blocks
        Ready token ids ``(blocks, seq_len)`` instead of a corpus (``seq_len`` is then their width).
    block_layout
        What sits where in ``token_blocks`` (for the conventions line).
    show_progress
        Draw a progress bar over blocks on stderr (when it is a terminal).
    exact_maps
        Sum each chosen layer's whole eager maps (memory grows with n²) instead of the default tiles.
    tile, map_size
        Queries and keys per tile; positions up to which each head's mean map is kept exactly (block-averaged beyond).
    sink_eps
        A head is a sink when its mean attention to position 0 exceeds this (Gu et al., ICLR 2025: 0.3).

    Returns
    -------
    AttentionResult

    Raises
    ------
    PosvizError
        An empty corpus, a sequence longer than the model's positions, a layer that
        does not exist, a model without attention weights.
    """
    from posviz.observe.accumulate import accumulate
    from posviz.observe.runner import check_sizes, prepare_blocks
    from posviz.observe.tiled.run import can_capture
    from posviz.util.progress import count_progress

    check_sizes(seq_len, batch_size, max_blocks)
    _check_tiling(tile, map_size, sink_eps)
    why_not = None if exact_maps else can_capture()
    run = prepare_blocks(model, corpus=corpus, seq_len=seq_len, layers=layers, layer_count=lambda m: m.num_layers,
                         max_blocks=max_blocks, device=device, device_map=device_map, tokenizer=tokenizer,
                         token_blocks=token_blocks, block_layout=block_layout,
                         attn_implementation="eager" if exact_maps or why_not else None)
    loaded, chosen, ids, seq_len = run.loaded, run.layers, run.ids, run.seq_len
    if not exact_maps:
        tiled = _try_tiled(run, batch_size, tile, map_size, sink_eps, show_progress, why_not)
        if tiled is not None:
            return tiled
    from posviz.observe.rope_bands import RopeBands

    bands = RopeBands.attach(loaded.model, chosen)
    try:
        with count_progress(len(ids), "blocks") as update:
            sums = accumulate(loaded.model, ids, chosen, batch_size=batch_size, progress=update if show_progress else None,
                              on_probed=None if bands is None else bands.reset)
    finally:
        if bands is not None:
            bands.detach()
    causal = sums.causal()
    per_layer = {layer: sums.layer(layer) for layer in chosen}  # numpy views of the sums, made once per layer
    stats = {layer: layer_statistics(per_layer[layer], causal) for layer in chosen}
    return AttentionResult(
        model=loaded.label, layers=chosen, heads=int(stats[chosen[0]].toeplitzness.shape[0]), seq_len=seq_len,
        blocks=sums.blocks, causal=causal, layout=run.layout, corpus=run.corpus, stats=stats,
        means={layer: per_layer[layer].mean for layer in chosen},
        rope_bands=None if bands is None else bands.means(),
    )


def _check_tiling(tile: int, map_size: int, sink_eps: float) -> None:
    if isinstance(tile, bool) or not isinstance(tile, int) or tile < 1:
        raise OptionError(f"--tile {tile!r} is not a positive integer", "use --tile 256 (queries and keys per tile)")
    if isinstance(map_size, bool) or not isinstance(map_size, int) or map_size < 2:
        raise OptionError(f"--map-size {map_size!r} is not an integer of at least 2")
    if not 0.0 <= sink_eps < 1.0:
        raise OptionError(f"--sink-eps {sink_eps} is outside [0, 1)", "Gu et al. use 0.3")


def _try_tiled(run: Any, batch_size: int, tile: int, map_size: int, sink_eps: float, show_progress: bool,
               why_not: str | None) -> AttentionResult | None:
    """The tiled path's result; None (after one warning, and with the model switched to eager) where it cannot run."""
    import warnings

    from posviz.observe.rope_bands import RopeBands
    from posviz.observe.tiled.capture import NotCapturable
    from posviz.observe.tiled.run import can_capture, tiled_statistics, to_eager
    from posviz.util.progress import count_progress

    loaded, chosen, ids = run.loaded, run.layers, run.ids
    model = loaded.model
    if why_not is None:
        bands = RopeBands.attach(model, chosen)
        try:
            with count_progress(len(ids), "blocks") as update:
                tiled = tiled_statistics(model, ids, chosen, batch_size=batch_size, tile=tile, map_size=map_size,
                                         progress=update if show_progress else None)
        except NotCapturable as e:
            why_not = str(e)
        else:
            return AttentionResult(
                model=loaded.label, layers=chosen, heads=int(tiled.stats[chosen[0]].toeplitzness.shape[0]), seq_len=run.seq_len,
                blocks=tiled.blocks, causal=all(s.causal for s in tiled.supports.values()), layout=run.layout, corpus=run.corpus,
                stats=tiled.stats, means=tiled.maps, rope_bands=None if bands is None else bands.means(), method="tiled",
                sink_eps=sink_eps, windows={layer: s.window for layer, s in tiled.supports.items() if s.window is not None})
        finally:
            if bands is not None:
                bands.detach()
    to_eager(model)
    if why_not is not None and can_capture() is None:  # an older transformers: eager, as always, without a warning
        warnings.warn(f"{loaded.label} ({type(model).__name__}): {why_not}; falling back to eager attention maps, "
                      "whose memory grows with n squared", stacklevel=3)
    _check_eager_fits(loaded, len(chosen), batch_size, run.seq_len, why_not)
    return None


def _check_eager_fits(loaded: Any, layers: int, batch_size: int, n: int, why_not: str | None) -> None:
    """Refuse (exit 2) a length whose eager maps cannot fit this machine's memory, naming the architecture."""
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
                          + (f", and its attention inputs cannot be captured ({why_not})" if why_not else ""),
                          "use a shorter --seq-len, fewer --layers or --batch-size 1")
