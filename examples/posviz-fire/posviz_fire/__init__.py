"""FIRE, functional interpolation for relative positions (Li et al., 2023, "Functional Interpolation for Relative
Positions Improves Long Context Transformers"), as a posviz scheme from outside posviz.

Every head's attention logit gets ``b(i, j) = f(psi(|i - j|) / psi(max(L, i)))`` for query ``i`` and key ``j``:
``psi(x) = log(c x + 1)``, ``f`` a small MLP (1 -> 32 -> heads, ReLU), ``c > 0`` and the threshold ``L > 0``
learned. Dividing by ``psi`` of the query's position maps every distance into [0, 1] at any length (the
"interpolation"); below the threshold ``L`` the distances stay unnormalised by the position. The paper's models are
causal (``i >= j``); under a bidirectional mask this module uses ``|i - j|``, so both directions share ``f``.

Not translation invariant (the normaliser depends on ``i``), so it has no ``offsets``: the analysis reads its dense
scores. Installed, ``posviz train --scheme fire`` trains with it (pyproject.toml registers it under the
``posviz.schemes`` entry-point group).
"""

from __future__ import annotations

import math

import torch
from torch import nn

#: Hidden width of the MLP, and the initial c and L (the threshold, in positions).
HIDDEN = 32
C_INIT = 0.1
L_INIT = 16.0


class FireScores(nn.Module):
    """FIRE's bias ``(heads, n, n)`` for a posviz model config (its ``num_attention_heads``)."""

    def __init__(self, config) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(1, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, config.num_attention_heads))
        # c and L must stay positive: learned through their logarithms
        self.log_c = nn.Parameter(torch.tensor(math.log(C_INIT)))
        self.log_threshold = nn.Parameter(torch.tensor(math.log(L_INIT)))

    def reset_parameters(self) -> None:
        """posviz calls this when a model is built from scratch."""
        for layer in (self.mlp[0], self.mlp[2]):
            layer.reset_parameters()
        with torch.no_grad():
            self.log_c.fill_(math.log(C_INIT))
            self.log_threshold.fill_(math.log(L_INIT))

    def forward(self, n: int) -> torch.Tensor:
        """``F[h, i, j] = f_h(psi(|i - j|) / psi(max(L, i)))``, shape ``(heads, n, n)``."""
        c, threshold = self.log_c.exp(), self.log_threshold.exp()
        position = torch.arange(n, device=c.device, dtype=c.dtype)
        distance = (position[:, None] - position[None, :]).abs()
        normaliser = torch.log(c * torch.maximum(threshold, position) + 1)[:, None]
        x = torch.log(c * distance + 1) / normaliser
        return self.mlp(x[..., None]).permute(2, 0, 1)
