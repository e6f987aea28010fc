"""Run a model over token blocks and accumulate each chosen layer's attention as streaming sums.

Per chosen layer only the sums of :class:`~posviz.observe.statistics.LayerSums` are
kept (``sum_b A_b``, per-row sums of squares and of squared row sums), in float64 on
the device where that layer's attention is produced (several devices under
``device_map="auto"``). A batch's attention maps are dropped as soon as they are
added, so memory is the model, one batch's attention maps (what Hugging Face's
``output_attentions=True`` holds) and one ``(heads, n, n)`` float64 sum per chosen
layer, whatever the corpus size.

Attention probabilities come from Hugging Face's ``output_attentions=True`` (eager
attention), or, for models trained by ``posviz train``, from their
``attention_probs`` modules (:mod:`posviz.models.modeling_posviz`), in call order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from posviz.errors import UnsupportedModelError
from posviz.observe.statistics import LayerSums


class AttentionSums:
    """Float64 running sums of the attention of some layers (created at the first batch, on its device)."""

    def __init__(self, layers: Sequence[int]) -> None:
        self.layers = list(layers)
        self.blocks = 0
        self._sums: dict[int, list[Any]] = {}

    def add(self, layer: int, probs: Any) -> None:
        """Add one batch of one layer: ``probs`` of shape ``(batch, heads, n, n)``."""
        import torch

        a = probs.detach().to(torch.float64)
        row_sum = a.sum(dim=-1)  # (B, H, n)
        parts = (a.sum(dim=0), (a * a).sum(dim=(0, 3)), (row_sum * row_sum).sum(dim=0))
        if layer not in self._sums:
            self._sums[layer] = list(parts)
        else:
            for acc, part in zip(self._sums[layer], parts, strict=True):
                acc += part

    def layer(self, layer: int) -> LayerSums:
        """The sums of one layer, as numpy arrays."""
        total, row_sq, row_sum_sq = (t.cpu().numpy() for t in self._sums[layer])
        return LayerSums(blocks=self.blocks, total=total, row_sq=row_sq, row_sum_sq=row_sum_sq)

    def causal(self) -> bool:
        """True when every chosen layer puts exactly zero attention above the diagonal (a causal mask).

        Softmax gives exact zeros only where a mask put minus infinity, so this
        recognises causal attention from the model's behaviour, whatever its class.
        """
        import torch

        for total, _, _ in self._sums.values():
            upper = torch.triu(total, diagonal=1)
            if bool((upper != 0).any()):
                return False
        return True


def _posviz_probe(model: Any) -> list[Any] | None:
    """The ``attention_probs`` modules of a posviz model (switched to returning probabilities), else ``None``."""
    mods = [m for name, m in model.named_modules() if name.endswith("attention.attention_probs")]
    return mods or None


def attention_batches(model: Any, batches: Iterable[Any], on_batch: Callable[[list[Any]], None]) -> None:
    """Run ``model`` on each batch of input ids and hand every layer's attention (in layer order) to ``on_batch``.

    Raises
    ------
    UnsupportedModelError
        The model returns no attention weights (an attention implementation
        without them, such as SDPA-only code).
    """
    import torch

    probes = _posviz_probe(model)
    captured: list[Any] = []
    handles = [m.register_forward_hook(lambda _m, _i, out: captured.append(out)) for m in probes or []]
    first = next(model.parameters()).device
    kwargs = {"use_cache": False} if getattr(model.config, "use_cache", None) is not None else {}
    try:
        with torch.inference_mode():
            for ids in batches:
                ids = ids.to(first)
                captured.clear()
                out = model(input_ids=ids, attention_mask=torch.ones_like(ids), output_attentions=probes is None, **kwargs)
                maps = list(captured) if probes else list(getattr(out, "attentions", None) or [])
                del out
                if not maps or any(a is None for a in maps):
                    raise UnsupportedModelError(
                        f"{type(model).__name__} returned no attention weights",
                        "posviz loads models with attn_implementation='eager'; this architecture does not expose "
                        "its attention probabilities",
                    )
                on_batch(maps)
                maps.clear()
                captured.clear()
    finally:
        for h in handles:
            h.remove()


def accumulate(model: Any, blocks: np.ndarray, layers: Sequence[int], *, batch_size: int = 8,
               progress: Callable[[int], None] | None = None) -> AttentionSums:
    """Streaming attention sums of ``layers`` over ``blocks`` ``(num_blocks, n)`` of token ids.

    Parameters
    ----------
    model
        A loaded model in eval mode (eager attention).
    blocks
        Token ids, one block per row.
    layers
        Layer indices to keep (others are discarded as soon as they are produced).
    batch_size
        Blocks per forward pass.
    progress
        Called with the number of blocks done after each batch.

    Raises
    ------
    UnsupportedModelError
        No attention weights, or a layer beyond those the model produced.
    """
    import torch

    sums = AttentionSums(layers)
    chunks = (torch.as_tensor(blocks[i : i + batch_size]) for i in range(0, len(blocks), batch_size))

    def on_batch(maps: list[Any]) -> None:
        if max(layers) >= len(maps):
            raise UnsupportedModelError(f"the model produced attention for {len(maps)} layers, not layer {max(layers)}")
        for layer in layers:
            sums.add(layer, maps[layer])
        sums.blocks += int(maps[0].shape[0])
        if progress is not None:
            progress(sums.blocks)

    attention_batches(model, chunks, on_batch)
    return sums
