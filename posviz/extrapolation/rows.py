"""Per-query attention entropy and largest weight, accumulated as float64 sums beside ``posviz attention``'s sums.

For one head, block ``b`` and query ``i``, with ``a_ij`` the attention row:

* entropy ``H_i = −Σ_j a_ij log a_ij`` in nats (Wang et al., 2024), ``0 log 0 = 0``, so the
  zeros a causal mask puts above the diagonal add nothing;
* normalised entropy ``H_i / log k_i``, ``k_i`` the keys query ``i`` sees (``i + 1`` for a
  causal model, ``n`` otherwise): 1 for uniform attention, 0 for one key;
* largest weight ``max_j a_ij``.

Each is summed over blocks per (head, query), so a layer keeps two ``(heads, n)``
arrays whatever the number of blocks. A head's number is the mean over blocks and
over the queries ``1 … n − 1`` (query 0 of a causal model sees only itself; the same
queries as the sink mass of :mod:`posviz.observe.statistics`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class RowStatistics:
    """Entropy and largest weight of every head of one layer.

    Attributes
    ----------
    entropy, entropy_normalised, max_weight
        ``(heads,)``: means over blocks and queries ``1 … n − 1``.
    entropy_by_query
        ``(heads, n)``: the mean entropy of each query position over blocks.
    """

    entropy: np.ndarray
    entropy_normalised: np.ndarray
    max_weight: np.ndarray
    entropy_by_query: np.ndarray


class RowSums:
    """Float64 sums over blocks of each (head, query)'s attention entropy and largest weight, per layer."""

    def __init__(self, layers: Sequence[int]) -> None:
        self.layers = list(layers)
        self._sums: dict[int, list[Any]] = {}

    def add(self, layer: int, probs: Any) -> None:
        """Add one batch of one layer: ``probs`` of shape ``(batch, heads, n, n)``."""
        import torch

        p = probs.detach()
        if p.dtype not in (torch.float32, torch.float64):  # half precision: entropy terms in float32
            p = p.float()
        if layer not in self._sums:
            self._sums[layer] = [p.new_zeros(p.shape[1:3], dtype=torch.float64), p.new_zeros(p.shape[1:3], dtype=torch.float64)]
        entropy, largest = self._sums[layer]
        tiny = torch.finfo(p.dtype).tiny
        # one head at a time (its temporary is then reused memory); log of the weights raised to the smallest normal
        # number: a masked zero then adds 0 * log(tiny) = 0 exactly, and log never meets 0, which is several times
        # slower than an ordinary argument on CPU (as is torch.special.entr, which handles it)
        for h in range(p.shape[1]):
            x = p[:, h]
            entropy[h] -= x.clamp_min(tiny).log_().mul_(x).sum(dim=-1).to(torch.float64).sum(dim=0)
        largest += p.amax(dim=-1).to(torch.float64).sum(dim=0)

    def layer(self, layer: int, blocks: int, causal: bool) -> RowStatistics:
        """The statistics of one layer over ``blocks`` blocks (``causal``: query ``i`` sees ``i + 1`` keys)."""
        entropy, largest = (t.cpu().numpy() / blocks for t in self._sums[layer])
        n = entropy.shape[-1]
        if n < 2:
            nan = np.full(entropy.shape[0], np.nan)
            return RowStatistics(nan, nan, largest[:, 0], entropy)
        keys = np.arange(1, n) + 1 if causal else np.full(n - 1, n)
        return RowStatistics(entropy=entropy[:, 1:].mean(axis=1), entropy_normalised=(entropy[:, 1:] / np.log(keys)).mean(axis=1),
                             max_weight=largest[:, 1:].mean(axis=1), entropy_by_query=entropy)
