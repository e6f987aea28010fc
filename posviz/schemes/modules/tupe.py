"""TUPE: untied positional attention (Ke, He & Liu, ICLR 2021).

The input carries word embeddings only. Every head adds the positional term

    F[i, j] = (LN(p_i) U_Q)(LN(p_j) U_K)^T / sqrt(2 d_h)

to its content logits (which are also scaled by ``1/sqrt(2 d_h)``). ``U_Q``, ``U_K``
are biased projections shared by all layers, so the term is computed once per
forward. [CLS] is untied: row 0 ([CLS] attending to others) and column 0 (others
attending to [CLS]) are replaced by one value per head, each the score of an extra
position vector with itself. (The paper's theta_1 and theta_2 are free scalars per
head; posviz, like the authors' code, derives them from these two vectors.) TUPE-R adds a per-head T5 bucket bias ``b[bucket(j -
i)]`` (bidirectional), shared across layers, with two more buckets for
[CLS]→others and others→[CLS].

Table layout (the authors' code, so weights map across): ``position_embeddings``
has ``max_positions + 1`` rows; row 0 is the [CLS]→others vector and row ``i + 1``
is position ``i``. Position 0 is always [CLS], whose row and column are untied, so
row 1 serves only as the others→[CLS] vector. TUPE-R's buckets are those of
:mod:`posviz.schemes.t5`. TUPE is learned, so its one implementation is this
module; the analysis evaluates it too (see ARCHITECTURE.md).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from posviz.schemes import t5


class TupeScores(nn.Module):
    """TUPE-A (``relative=False``) or TUPE-R (``relative=True``) positional scores.

    Parameters
    ----------
    hidden_size
        Width of the position vectors and of ``U_Q``, ``U_K`` (the attention width).
    heads
        Number of attention heads.
    max_positions
        Longest sequence.
    layer_norm_eps
        Epsilon of the LayerNorm on the position table.
    relative
        Add the TUPE-R bucket bias.
    num_buckets, max_distance
        T5 bucket settings for TUPE-R (32 and 128, bidirectional, as in the TUPE authors' code).
    """

    def __init__(
        self,
        hidden_size: int,
        heads: int,
        max_positions: int,
        *,
        layer_norm_eps: float = 1e-12,
        relative: bool = False,
        num_buckets: int = 32,
        max_distance: int = 128,
    ) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = hidden_size // heads
        self.max_positions = max_positions
        self.scaling = (2 * self.head_dim) ** -0.5
        self.position_embeddings = nn.Embedding(max_positions + 1, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.query = nn.Linear(hidden_size, hidden_size)  # U_Q
        self.key = nn.Linear(hidden_size, hidden_size)  # U_K
        self.relative = relative
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        if relative:
            # num_buckets T5 buckets, then bucket num_buckets for others→[CLS];
            # bucket num_buckets // 2 (never produced by the bidirectional T5
            # function) serves [CLS]→others, as in the authors' code.
            self.relative_attention_bias = nn.Embedding(num_buckets + 1, heads)
        for name, value in self.derived_buffers().items():
            self.register_buffer(name, value, persistent=False)

    def derived_buffers(self) -> dict[str, torch.Tensor]:
        """Buffers computed from the configuration: TUPE-R's ``bucket_ids``, ``(max_positions, max_positions)``."""
        if not self.relative:
            return {}
        return {"bucket_ids": self.make_bucket_ids(self.max_positions, self.num_buckets, self.max_distance)}

    @staticmethod
    def make_bucket_ids(n: int, num_buckets: int = 32, max_distance: int = 128) -> torch.Tensor:
        """``(n, n)`` TUPE-R bucket of every (query, key) pair, [CLS] row and column untied."""
        pos = np.arange(n)
        ids = t5.relative_position_bucket(pos[None, :] - pos[:, None], num_buckets=num_buckets, max_distance=max_distance)
        ids[:, 0] = num_buckets  # others → [CLS]
        ids[0, :] = num_buckets // 2  # [CLS] → others (and [CLS] → itself)
        return torch.from_numpy(ids)

    def absolute_term(self, n: int) -> torch.Tensor:
        """The untied positional term alone, shape ``(heads, n, n)``."""
        p = self.LayerNorm(self.position_embeddings.weight[: n + 1])  # (n+1, hidden): [CLS] vector, positions 0..n-1
        q = self.query(p).view(n + 1, self.heads, self.head_dim).transpose(0, 1) * self.scaling  # (heads, n+1, d_h)
        k = self.key(p).view(n + 1, self.heads, self.head_dim).transpose(0, 1)
        cls_to_others = (q[:, 0] * k[:, 0]).sum(-1)  # (heads,)
        others_to_cls = (q[:, 1] * k[:, 1]).sum(-1)
        scores = q[:, 1:] @ k[:, 1:].transpose(1, 2)  # (heads, n, n): positions 0..n-1
        # Untie [CLS]: column 0 first, then row 0 (so [CLS]→[CLS] takes the row value).
        col = torch.arange(n, device=scores.device)
        scores = torch.where(col[None, None, :] == 0, others_to_cls[:, None, None], scores)
        scores = torch.where(col[None, :, None] == 0, cls_to_others[:, None, None], scores)
        return scores

    def relative_term(self, n: int) -> torch.Tensor:
        """The TUPE-R bucket bias alone, shape ``(heads, n, n)``."""
        return self.relative_attention_bias(self.bucket_ids[:n, :n]).permute(2, 0, 1)  # (n, n, heads) -> (heads, n, n)

    def forward(self, n: int) -> torch.Tensor:
        """``(heads, n, n)`` positional scores (absolute term, plus buckets for TUPE-R)."""
        if n > self.max_positions:
            raise ValueError(f"sequence length {n} exceeds max_position_embeddings {self.max_positions}")
        scores = self.absolute_term(n)
        if self.relative:
            scores = scores + self.relative_term(n)
        return scores
