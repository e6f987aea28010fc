"""ALiBi (Press et al., 2022), symmetric for an encoder: ``f_h(k) = -m_h * |k|``.

The slopes ``m_h`` come from :func:`posviz.schemes.alibi.slopes` (the same
numbers the analysis of BLOOM-style models uses); nothing is learned. Under the
causal mask of a causal model the keys a query sees have ``k <= 0``, where the
bias is ``-m_h (i - j)``: exactly Press et al.'s causal ALiBi. Any length runs
(the offsets are computed for the actual ``n``). See ARCHITECTURE.md.
"""

from __future__ import annotations

import torch

from posviz.schemes import alibi
from posviz.schemes.modules.offsets import OffsetScores


class AlibiScores(OffsetScores):
    """Symmetric ALiBi bias ``F[h, i, j] = -m_h |j - i|`` (no parameters).

    Parameters
    ----------
    heads
        Number of attention heads.
    """

    def __init__(self, heads: int) -> None:
        super().__init__()
        self.heads = heads
        for name, value in self.derived_buffers().items():
            self.register_buffer(name, value, persistent=False)

    def derived_buffers(self) -> dict[str, torch.Tensor]:
        """Buffers computed from the configuration: ``slopes``, ``(heads,)`` in the default dtype."""
        return {"slopes": torch.tensor(alibi.slopes(self.heads).tolist())}

    def offsets(self, n: int) -> torch.Tensor:
        """``f(k) = -m_h |k|`` for ``k = -(n-1) .. n-1``, shape ``(heads, 2n - 1)``.

        Evaluated by :func:`posviz.schemes.alibi.bias_offsets` (exact products, then
        rounded to the slopes' dtype: the same numbers as multiplying in that dtype)
        and cached per length, device and dtype.
        """
        key = (n, self.slopes.device, self.slopes.dtype)
        cache = self.__dict__.setdefault("_offsets", {})
        if key not in cache:
            f = alibi.bias_offsets(self.slopes.detach().cpu().double().numpy(), n)
            with torch.inference_mode(False):  # usable by a later training step too (see offsets._index)
                cache[key] = torch.from_numpy(f).to(device=self.slopes.device, dtype=self.slopes.dtype)
        return cache[key]
