"""T5's learned relative bias: one scalar per head and bucket of ``k = j - i``.

Bucket ids come from :func:`posviz.schemes.t5.offset_buckets` (bidirectional:
exact buckets for short offsets, logarithmic ones up to ``max_distance``; the
arithmetic of transformers' T5 code), so the bias is exactly Toeplitz. See
ARCHITECTURE.md.
"""

from __future__ import annotations

import torch
from torch import nn

from posviz.models.schemes.offsets import OffsetScores
from posviz.schemes import t5


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
    """

    def __init__(self, heads: int, max_positions: int, num_buckets: int = 32, max_distance: int = 128) -> None:
        super().__init__()
        self.heads = heads
        self.max_positions = max_positions
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.relative_attention_bias = nn.Embedding(num_buckets, heads)
        for name, value in self.derived_buffers().items():
            self.register_buffer(name, value, persistent=False)

    def derived_buffers(self) -> dict[str, torch.Tensor]:
        """Buffers computed from the configuration: ``offset_buckets``, ``(2 max_positions - 1,)``."""
        ids = t5.offset_buckets(self.max_positions, num_buckets=self.num_buckets, max_distance=self.max_distance)
        return {"offset_buckets": torch.from_numpy(ids)}

    def offsets(self, n: int) -> torch.Tensor:
        """``f(k)`` for ``k = -(n-1) .. n-1``, shape ``(heads, 2n - 1)``."""
        m = self.max_positions
        return self.relative_attention_bias(self.offset_buckets[m - n : m + n - 1]).T  # (2n-1, heads) -> (heads, 2n-1)
