"""``posviz.attention(...)``: the attention a model produces on a corpus, per head, with its Toeplitzness.

From a model and a corpus: load (eager attention), cut the corpus into token
blocks, accumulate each chosen layer's attention as streaming sums, then score
every head (:mod:`posviz.observe.statistics`). The result holds one record per
(layer, head) and the arrays behind them (mean attention, offset profiles).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from posviz.observe.statistics import HeadAttention, layer_statistics
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
        Per layer, :class:`~posviz.observe.statistics.HeadAttention`.
    means
        Per layer, the mean attention ``Abar`` ``(heads, n, n)``.
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

    @property
    def conventions(self) -> str:
        """One line stating how the numbers were made."""
        mask = "causal: only j <= i counts" if self.causal else "bidirectional: all n^2 entries"
        return (f"{self.blocks} blocks of {self.seq_len} tokens from {self.corpus}; {self.layout}; {mask}; "
                "null: each row shuffled within its support (exact mean)")

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
                if self.rope_bands is not None:
                    r["query_band_norms"] = [float(v) for v in self.rope_bands[layer]["query"][h]]
                if profiles:
                    r["profile"] = [float(v) for v in s.profiles[h]]
                out.append(r)
        return out


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
    from posviz.util.progress import count_progress

    check_sizes(seq_len, batch_size, max_blocks)
    run = prepare_blocks(model, corpus=corpus, seq_len=seq_len, layers=layers, layer_count=lambda m: m.num_layers,
                         max_blocks=max_blocks, device=device, device_map=device_map, tokenizer=tokenizer,
                         token_blocks=token_blocks, block_layout=block_layout)
    loaded, chosen, ids, seq_len = run.loaded, run.layers, run.ids, run.seq_len
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
