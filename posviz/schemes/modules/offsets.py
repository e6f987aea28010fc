"""Torch side of translation-invariant schemes: ``f(k)`` expanded to ``F[i, j] = f(j - i)``.

The index table comes from :func:`posviz.schemes.offsets.offset_index` and is
cached per length and device, so a forward pass gathers without rebuilding it.
See ARCHITECTURE.md.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import nn

from posviz.schemes.offsets import offset_index


@lru_cache(maxsize=64)
def _index(n: int, device: torch.device) -> torch.Tensor:
    # a normal tensor even when first asked for under inference_mode (an evaluation): a later training step saves
    # the index for its backward pass, which an inference tensor refuses
    with torch.inference_mode(False):
        return torch.from_numpy(offset_index(n)).to(device)


def expand_offsets(f: torch.Tensor) -> torch.Tensor:
    """``(heads, 2n - 1)`` offset values -> ``(heads, n, n)`` with ``F[h, i, j] = f[h, j - i + n - 1]``."""
    n = (f.shape[-1] + 1) // 2
    return f[:, _index(n, f.device)]


class OffsetScores(nn.Module):
    """Base of the schemes that depend on ``k = j - i`` only: subclasses define ``offsets(n)``."""

    def offsets(self, n: int) -> torch.Tensor:
        """``f(k)`` for ``k = -(n-1) .. n-1``, shape ``(heads, 2n - 1)``."""
        raise NotImplementedError

    def forward(self, n: int) -> torch.Tensor:
        """``F[h, i, j] = f_h(j - i)``, shape ``(heads, n, n)``."""
        return expand_offsets(self.offsets(n))  # (heads, 2n-1) -> (heads, n, n)
