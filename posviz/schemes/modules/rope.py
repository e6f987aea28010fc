"""Rotary position embeddings (RoPE, Su et al., 2021) of q and k, rotate-half pairing (LLaMA, GPT-NeoX).

Each head's first ``d_rot`` dimensions form ``d_rot / 2`` bands: dims ``i`` and
``i + d_rot/2`` are band ``i`` and turn by ``p * theta_i`` at position ``p``,
``theta_i = base^(-2i / d_rot)`` (band 0: the highest frequency); the other
``head_dim - d_rot`` dimensions pass unrotated (partial rotary, GPT-NeoX's
``rotary_pct``). The frequencies come from :func:`posviz.schemes.rope.base_frequencies`,
the numpy math the analysis of LLaMA-style checkpoints uses, so a posviz run and
a LLaMA checkpoint are read by the same band code. Nothing is learned and no
table bounds the length: the angles are computed for the actual ``n``.

Unlike the other schemes this is not an additive ``(heads, n, n)`` score: the
rotation acts on q and k before ``scaled_dot_product_attention``, whose fused
kernels stay usable. See ARCHITECTURE.md.
"""

from __future__ import annotations

import torch
from torch import nn

from posviz.schemes.rope import base_frequencies


class RotaryEmbedding(nn.Module):
    """The cos/sin tables of RoPE for ``n`` positions (no parameters).

    Parameters
    ----------
    rotary_dim
        Rotated dimensions per head ``d_rot`` (even).
    base
        ``rope_theta``.
    """

    def __init__(self, rotary_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        if rotary_dim < 2 or rotary_dim % 2:
            raise ValueError(f"rotary_dim must be even and at least 2, got {rotary_dim}")
        self.rotary_dim = rotary_dim
        self.base = float(base)
        for name, value in self.derived_buffers().items():
            self.register_buffer(name, value, persistent=False)

    def derived_buffers(self) -> dict[str, torch.Tensor]:
        """Buffers computed from the configuration: ``inv_freq``, ``(d_rot / 2,)`` float32 (as transformers keeps it)."""
        return {"inv_freq": torch.from_numpy(base_frequencies(self.base, self.rotary_dim)).float()}

    def forward(self, n: int, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos`` and ``sin``, each ``(n, d_rot)``: band ``i``'s angle ``p * theta_i`` in columns ``i`` and ``i + d_rot/2``.

        The angles are float32 whatever autocast says (transformers' rotary
        embeddings do the same): positions times frequencies lose precision in
        half precision long before ``n`` is large. ``dtype`` is the dtype returned.
        """
        inv_freq = self.inv_freq.float()
        positions = torch.arange(n, device=inv_freq.device, dtype=torch.float32)
        angles = torch.outer(positions, inv_freq)  # (n, d_rot/2)
        angles = torch.cat([angles, angles], dim=-1)  # (n, d_rot): band i at columns i and i + d_rot/2
        cos, sin = angles.cos(), angles.sin()
        return (cos, sin) if dtype is None else (cos.to(dtype), sin.to(dtype))

    def extra_repr(self) -> str:
        return f"rotary_dim={self.rotary_dim}, base={self.base:g}"


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``(x1, x2) -> (-x2, x1)`` over the last dimension's two halves (band ``i``: dims ``i`` and ``i + d/2``)."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first ``d_rot`` dimensions of ``x`` ``(..., n, head_dim)`` by position; the rest pass unchanged.

    ``cos`` and ``sin`` are ``(n, d_rot)`` (:meth:`RotaryEmbedding.forward`).
    """
    d_rot = cos.shape[-1]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    if d_rot == x.shape[-1]:
        return x * cos + rotate_half(x) * sin
    rot, rest = x[..., :d_rot], x[..., d_rot:]
    return torch.cat([rot * cos + rotate_half(rot) * sin, rest], dim=-1)
