"""The row normalisers of the model's own attention, kept as it computes them on the CPU.

The compiled CPU kernel (:mod:`~posviz.observe.tiled.native`) needs each query's log-sum-exp before it can turn
logits into weights; without it the kernel computes it itself in a first pass over the logits and keeps a tile of
exponentials for a second. PyTorch's CPU flash attention, which ``scaled_dot_product_attention`` runs on the CPU
for a layer without a mask (causal or not), computes that log-sum-exp for its own output and hands it out from
``aten._scaled_dot_product_flash_attention_for_cpu``. :func:`keeping_normalisers` runs one attention call of the
model with ``torch.nn.functional.scaled_dot_product_attention`` standing in for itself: where PyTorch would choose
that flash kernel, the stand-in calls the same kernel with the same arguments (the model's output is the same,
bit for bit) and keeps its log-sum-exp; anywhere else it calls PyTorch's own function and keeps nothing.

The statistics then take one pass (13-20 % less time an entry; benchmarks/README.md, section 16).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


def flash_choice() -> int:
    """The value ``torch._fused_sdp_choice`` gives for the flash kernel: ``SDPBackend.FLASH_ATTENTION``, 1 where
    ``torch.nn.attention`` is absent (PyTorch 2.2, which has no CPU flash operator to call either)."""
    try:
        from torch.nn.attention import SDPBackend
    except ImportError:
        return 1
    return int(SDPBackend.FLASH_ATTENTION)


@dataclass
class Normalisers:
    """What one kept attention call computed with: its log-sum-exp and the call's own arguments.

    Attributes
    ----------
    lse
        ``(batch, heads, n)`` float32: ``log sum_j exp(scale q_i . k_j)`` over the keys query ``i`` sees.
    causal
        The call's ``is_causal``.
    scale
        The call's ``scale`` (None: ``1 / sqrt(head_dim)``).
    """

    lse: Any
    causal: bool
    scale: float | None


def flash_cpu() -> Any:
    """PyTorch's CPU flash attention operator, or None where this PyTorch has none (2.2 and older)."""
    import torch

    return getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


@contextmanager
def keeping_normalisers() -> Iterator[list[Normalisers | None]]:
    """While entered, this thread's calls of ``torch.nn.functional.scaled_dot_product_attention`` keep their
    normalisers where PyTorch runs them with its CPU flash kernel.

    Yields
    ------
    list
        One entry per call in this thread: its :class:`Normalisers`, or None where the call took another kernel (a
        mask, dropout, gradients, a device other than the CPU) and kept nothing.
    """
    import torch
    import torch.nn.functional as F

    original, op, kept, me = F.scaled_dot_product_attention, flash_cpu(), [], threading.get_ident()
    flash = flash_choice()

    def stand_in(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0, is_causal: bool = False,
                 scale: float | None = None, enable_gqa: bool = False) -> Any:
        extra: dict[str, Any] = {"scale": scale, **({"enable_gqa": True} if enable_gqa else {})}  # PyTorch < 2.5: no GQA
        if threading.get_ident() != me:  # another thread's attention: not ours to keep
            return original(query, key, value, attn_mask, dropout_p, is_causal, **extra)
        if (op is None or attn_mask is not None or dropout_p != 0.0 or query.device.type != "cpu"
                or (torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)))
                or torch._fused_sdp_choice(query, key, value, None, 0.0, is_causal, **extra) != flash):
            kept.append(None)
            return original(query, key, value, attn_mask, dropout_p, is_causal, **extra)
        # the call scaled_dot_product_attention makes on the CPU for its flash kernel (no mask, no dropout)
        out, lse = op(query, key, value, 0.0, is_causal, scale=scale)
        kept.append(Normalisers(lse, bool(is_causal), scale))
        return out

    F.scaled_dot_product_attention = stand_in
    try:
        yield kept
    finally:
        F.scaled_dot_product_attention = original
