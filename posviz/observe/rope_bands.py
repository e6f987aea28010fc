"""Mean query and key norm per RoPE frequency band (Barbero et al., ICLR 2025), read while the model runs.

For RoPE models in Hugging Face's LLaMA layout (LLaMA, Mistral, Qwen2, Gemma, ...:
``layers.L.self_attn.q_proj`` / ``k_proj``), forward hooks read each projection's
output before the rotation. Rotating a 2-D pair does not change its norm, so the
norm of band ``i`` — dims ``i`` and ``i + d_rot/2`` of a head (rotate-half pairing),
frequency ``theta_i = base**(-2i/d_rot)``, band 0 the highest frequency — is the
same before and after. The result is the mean over all tokens of all blocks, per
head and band: the data-side counterpart of ``posviz heads``' weight-based band usage.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

_PROJ = re.compile(r"(?:^|\.)layers\.(\d+)\.self_attn\.([qk])_proj$")


class RopeBands:
    """Forward hooks that sum per-band norms of queries and keys for some layers."""

    def __init__(self, model: Any, modules: dict[tuple[int, str], Any], head_dim: int, rotary_dim: int) -> None:
        self.head_dim, self.half = head_dim, rotary_dim // 2
        self._sums: dict[tuple[int, str], Any] = {}
        self._tokens: dict[tuple[int, str], int] = {}
        self._handles = [m.register_forward_hook(self._hook(key)) for key, m in modules.items()]

    @classmethod
    def attach(cls, model: Any, layers: Sequence[int]) -> RopeBands | None:
        """Hooks on the query/key projections of ``layers``, or ``None`` for a model that is not LLaMA-style RoPE."""
        config = model.config
        if getattr(config, "rope_theta", None) is None and getattr(config, "rope_parameters", None) is None:
            return None
        found = {}
        for name, module in model.named_modules():
            m = _PROJ.search(name)
            if m and int(m.group(1)) in layers:
                found[(int(m.group(1)), "query" if m.group(2) == "q" else "key")] = module
        if not found:
            return None
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        factor = getattr(config, "partial_rotary_factor", None) or 1.0
        return cls(model, found, int(head_dim), int(head_dim * factor))

    def _hook(self, key: tuple[int, str]):
        def hook(_module: Any, _inputs: Any, out: Any) -> None:
            import torch

            x = out.detach().to(torch.float64)
            x = x.reshape(*x.shape[:-1], -1, self.head_dim)  # (B, n, heads, d_h)
            norms = torch.sqrt(x[..., : self.half] ** 2 + x[..., self.half : 2 * self.half] ** 2)  # (B, n, heads, bands)
            total = norms.sum(dim=(0, 1))
            self._sums[key] = total if key not in self._sums else self._sums[key] + total
            self._tokens[key] = self._tokens.get(key, 0) + x.shape[0] * x.shape[1]

        return hook

    def reset(self) -> None:
        """Forget what the hooks have summed so far."""
        self._sums.clear()
        self._tokens.clear()

    def detach(self) -> None:
        """Remove the hooks."""
        for h in self._handles:
            h.remove()

    def means(self) -> dict[int, dict[str, np.ndarray]]:
        """Per layer, ``{"query": (heads, bands), "key": (kv_heads, bands)}``: mean norm per token."""
        out: dict[int, dict[str, np.ndarray]] = {}
        for (layer, which), total in self._sums.items():
            out.setdefault(layer, {})[which] = total.cpu().numpy() / self._tokens[(layer, which)]
        return out
