"""TISA: translation-invariant self-attention (Wennberg & Henter, ACL 2021).

Each head adds ``F[i, j] = f(j - i)`` to its attention logits, with

    f(k) = sum_s a_s * exp(-|b_s| * (k - c_s)**2),    s = 1 .. S,

three parameters per kernel per head. The offset is ``k = j - i`` (key minus
query), so a kernel with ``c = +3`` makes query ``i`` favour key ``i + 3``. (The
authors' public code effectively evaluates ``f(i - j - 1)``; we keep the paper's
definition.)

Initialisation, with ``N(mean, sd)`` meaning a normal with that standard
deviation, as in the authors' public code (``normal_(std=...)``):
``c ~ N(0, 5)``, ``a ~ N(0.1, 0.01)``, ``b ~ N(0.1, 0.01)``. TISA is learned,
so its one implementation is this module; the analysis evaluates it too (see
ARCHITECTURE.md).
"""

from __future__ import annotations

import torch
from torch import nn

from posviz.schemes.modules.offsets import OffsetScores


class TisaScores(OffsetScores):
    """TISA positional scores for ``heads`` heads with ``kernels`` radial basis kernels each.

    Parameters
    ----------
    heads
        Number of attention heads.
    kernels
        Kernels ``S`` per head; the module has ``3 * S * heads`` parameters.

    Attributes
    ----------
    a, b, c
        ``(heads, kernels)`` amplitudes, sharpness and offsets.
    INIT
        ``name -> (mean, standard deviation)`` of each parameter's normal initialisation.
    """

    INIT: dict[str, tuple[float, float]] = {"a": (0.1, 0.01), "b": (0.1, 0.01), "c": (0.0, 5.0)}

    def __init__(self, heads: int, kernels: int = 5) -> None:
        super().__init__()
        self.heads = heads
        self.kernels = kernels
        self.a = nn.Parameter(torch.empty(heads, kernels))
        self.b = nn.Parameter(torch.empty(heads, kernels))
        self.c = nn.Parameter(torch.empty(heads, kernels))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Draw ``a, b ~ N(0.1, 0.01)`` and ``c ~ N(0, 5)`` (standard deviations; :attr:`INIT`)."""
        for name, (mean, std) in self.INIT.items():
            getattr(self, name).normal_(mean, std, generator=generator)

    def offsets(self, n: int) -> torch.Tensor:
        """``f(k)`` for ``k = -(n-1) .. n-1``, shape ``(heads, 2n - 1)``."""
        k = torch.arange(1 - n, n, device=self.a.device, dtype=self.a.dtype)
        d = k - self.c[..., None]  # (heads, kernels, 2n-1)
        return (self.a[..., None] * torch.exp(-self.b.abs()[..., None] * d * d)).sum(dim=1)  # (heads, 2n-1)

    def extra_repr(self) -> str:
        return f"heads={self.heads}, kernels={self.kernels}"
