"""What ``posviz attention`` returns: :class:`AttentionResult`, its records and its conventions line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from posviz.observe.statistics import HeadAttention
from posviz.observe.tiled.statistics import SINK_EPSILON, TiledHeadAttention


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
