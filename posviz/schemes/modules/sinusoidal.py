"""The fixed sinusoidal table of Vaswani et al. (2017), added to the input like a learned E_P.

``PE[p, 2i] = sin(p / 10000^(2i/d))`` and ``PE[p, 2i+1] = cos(p / 10000^(2i/d))``
with ``d`` the embedding size (the width ALBERT's learned table has). The table
is not a parameter and not stored: it is computed (in float64, by
:func:`posviz.read.embeddings.sinusoidal_embeddings`, the function behind the
``sinusoidal:NxD`` control, then rounded to the model's dtype) for the actual
length, so the model runs at any ``n``, and the analysis recomputes the same E_P
from the config. See ARCHITECTURE.md.
"""

from __future__ import annotations

import torch
from torch import nn

from posviz.read.embeddings import sinusoidal_embeddings

#: The base of the wavelengths, as in the paper.
BASE = 10000.0


def sinusoidal_table(n: int, dim: int) -> torch.Tensor:
    """``(n, dim)`` float64 table of positions ``0 .. n-1``."""
    return torch.from_numpy(sinusoidal_embeddings(n, dim, BASE))


class SinusoidalPositions(nn.Module):
    """The fixed table for the first ``n`` positions (or given ``position_ids``); no parameters, no buffers.

    Tables are cached per length, device and dtype (they never need a gradient).

    Parameters
    ----------
    dim
        Embedding size.
    scale
        Factor of the table (the config's ``sinusoidal_scale``).
    """

    def __init__(self, dim: int, scale: float = 1.0) -> None:
        super().__init__()
        self.dim = dim
        self.scale = scale

    def table(self, n: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """``(n, dim)`` rows for positions ``0 .. n-1``."""
        key = (n, device, dtype)
        cache = self.__dict__.setdefault("_tables", {})
        if key not in cache:
            if len(cache) >= 8:  # a few lengths at a time (training, evaluation, extrapolation)
                cache.clear()
            with torch.inference_mode(False), torch.no_grad():
                cache[key] = (sinusoidal_table(n, self.dim) * self.scale).to(device=device, dtype=dtype)
        return cache[key]

    def forward(self, n: int, device: torch.device, dtype: torch.dtype,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """``(1, n, dim)`` for positions ``0 .. n-1``, or ``(B, n, dim)`` for ``position_ids`` ``(B, n)``."""
        if position_ids is None:
            return self.table(n, device, dtype)[None]
        return self.table(int(position_ids.max()) + 1, device, dtype)[position_ids]

    def extra_repr(self) -> str:
        return f"dim={self.dim}, base={BASE:g} (fixed)"
