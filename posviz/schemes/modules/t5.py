"""T5's learned relative bias: one scalar per head and bucket of ``k = j - i``.

Bucket ids come from :func:`posviz.schemes.t5.offset_buckets` (exact buckets
for short offsets, logarithmic ones up to ``max_distance``; the arithmetic of
transformers' T5 code), so the bias is exactly Toeplitz. An encoder uses T5's
bidirectional buckets; a causal model those of T5's decoder (every ``k > 0`` in
bucket 0, which the causal mask hides). Ids are precomputed up to
``max_positions`` and computed for longer sequences when asked (offsets past
``max_distance`` share the last buckets, so any length runs). See ARCHITECTURE.md.
"""

from __future__ import annotations

import torch
from torch import nn

from posviz.schemes import t5
from posviz.schemes.modules.offsets import OffsetScores


class T5Scores(OffsetScores):
    """T5 relative bias ``F[h, i, j] = w[bucket(j - i), h]``.

    Parameters
    ----------
    heads
        Number of attention heads.
    max_positions
        Longest sequence (bucket ids are precomputed up to it).
    num_buckets, max_distance
        T5 bucket settings.
    bidirectional
        T5's encoder buckets (``True``) or its decoder's (``False``, causal models).
    """

    def __init__(self, heads: int, max_positions: int, num_buckets: int = 32, max_distance: int = 128,
                 bidirectional: bool = True) -> None:
        super().__init__()
        self.heads = heads
        self.max_positions = max_positions
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.relative_attention_bias = nn.Embedding(num_buckets, heads)
        for name, value in self.derived_buffers().items():
            self.register_buffer(name, value, persistent=False)

    def derived_buffers(self) -> dict[str, torch.Tensor]:
        """Buffers computed from the configuration: ``offset_buckets``, ``(2 max_positions - 1,)``."""
        return {"offset_buckets": self._buckets(self.max_positions)}

    def _buckets(self, n: int) -> torch.Tensor:
        ids = t5.offset_buckets(n, bidirectional=self.bidirectional, num_buckets=self.num_buckets, max_distance=self.max_distance)
        return torch.from_numpy(ids)

    def offsets(self, n: int) -> torch.Tensor:
        """``f(k)`` for ``k = -(n-1) .. n-1``, shape ``(heads, 2n - 1)``."""
        m = self.max_positions
        if n <= m:
            ids = self.offset_buckets[m - n : m + n - 1]
        else:  # beyond the trained length: the ids of the actual length, cached (they never change)
            cache = self.__dict__.setdefault("_long_buckets", {})
            key = (n, self.offset_buckets.device)
            if key not in cache:
                cache.clear()
                with torch.inference_mode(False):  # a later training step saves the ids for backward (see offsets._index)
                    cache[key] = self._buckets(n).to(self.offset_buckets.device)
            ids = cache[key]
        return self.relative_attention_bias(ids).T  # (2n-1, heads) -> (heads, 2n-1)
