"""Run a model over token blocks and accumulate each chosen layer's attention as streaming sums.

Per chosen layer only the sums of :class:`~posviz.observe.statistics.LayerSums` are
kept (``sum_b A_b``, per-row sums of squares and of squared row sums), in float64 on
the device where that layer's attention is produced (several devices under
``device_map="auto"``). Each layer's attention maps are added as soon as the layer
has produced them and are then dropped (:class:`_Capture`), so memory is the model,
one layer's maps of one batch, and one ``(heads, n, n)`` float64 sum per chosen
layer, whatever the corpus size and the number of layers.

Attention probabilities come from Hugging Face's ``output_attentions=True`` (eager
attention), or, for models trained by ``posviz train``, from their
``attention_probs`` modules (:mod:`posviz.models.modeling_posviz`), in call order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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

        a = probs.detach()
        if layer not in self._sums:
            heads, n = a.shape[1], a.shape[-1]
            self._sums[layer] = [a.new_zeros((heads, n, n), dtype=torch.float64),
                                 a.new_zeros((heads, n), dtype=torch.float64), a.new_zeros((heads, n), dtype=torch.float64)]
        total, row_sq, row_sum_sq = self._sums[layer]
        # One head at a time: a float64 copy of the whole batch's maps cost as much as the layer's attention itself
        # (fresh pages for every batch); a head's copy is reused memory, and the sums are the same, float64 throughout.
        for h in range(a.shape[1]):
            x = a[:, h].to(torch.float64)  # (B, n, n)
            row_sum = x.sum(dim=-1)
            total[h] += x.sum(dim=0)
            row_sq[h] += (x * x).sum(dim=(0, 2))
            row_sum_sq[h] += (row_sum * row_sum).sum(dim=0)

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


def _no_weights(model: Any) -> UnsupportedModelError:
    return UnsupportedModelError(
        f"{type(model).__name__} returned no attention weights",
        "posviz loads models with attn_implementation='eager'; this architecture does not expose its attention probabilities",
    )


#: Tokens of the one-block probe that finds where a Hugging Face model emits its attention maps.
PROBE_TOKENS = 16


def _takes_use_cache(model: Any) -> bool:
    """True when the forward pass keeps a cache to turn off: the config has ``use_cache`` and ``forward`` takes it.

    In transformers 4.x ``BertForMaskedLM.forward`` refuses the keyword although
    ``BertConfig`` has the field; such a model keeps no cache anyway.
    """
    import inspect

    if getattr(model.config, "use_cache", None) is None:
        return False
    params = inspect.signature(model.forward).parameters
    return "use_cache" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


class _Capture:
    """Hands each layer's attention probabilities to a callback, as soon as each layer has produced them.

    * posviz models: forward hooks on their ``attention_probs`` modules (eager path).
    * Hugging Face models: ``output_attentions=True``. A one-block probe of
      :data:`PROBE_TOKENS` tokens, run before the first batch, finds by identity with
      ``outputs.attentions`` the innermost module of each layer whose output tuple
      carries the probabilities; in every batch a hook on it takes them
      and puts ``None`` in their place, so no layer's ``n x n`` maps outlive the
      layer. A model where that cannot be found keeps Hugging Face's behaviour (all
      layers of one batch held until the forward pass ends).
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self.probes = _posviz_probe(model)
        self.sites: dict[Any, int] | None = None  # module -> index in its output tuple; {} when not found
        self.layers = 0
        self.count = 0
        self.deliver: Callable[[int, Any], None] = lambda layer, probs: None
        self.on_probed: Callable[[], None] = lambda: None
        self.handles = [m.register_forward_hook(self._probe_hook) for m in self.probes or []]
        self.kwargs = {"use_cache": False} if _takes_use_cache(model) else {}

    def _probe_hook(self, _module: Any, _inputs: Any, out: Any) -> None:
        self.deliver(self.count, out)
        self.count += 1

    def _strip_hook(self, module: Any, _inputs: Any, out: Any) -> Any:
        index = self.sites[module]
        probs = out[index] if isinstance(out, tuple) and len(out) > index else None
        if probs is None:
            return None
        self.deliver(self.count, probs)
        self.count += 1
        return out[:index] + (None,) + out[index + 1 :] if type(out) is tuple else None

    def _discover(self, ids: Any) -> None:
        """Before the first batch: find the modules that emit the maps, on a short probe of one block.

        The probe (the first :data:`PROBE_TOKENS` tokens of the first block) runs
        with every layer's maps held, as Hugging Face returns them; its maps are
        not delivered. So even the discovery holds only ``layers x heads x 16 x 16``
        values, and every real batch goes through the hooks.
        """
        import torch

        seen: dict[int, tuple[Any, int, Any]] = {}

        def record(module: Any, _inputs: Any, out: Any) -> None:
            if isinstance(out, tuple):
                for i, x in enumerate(out):
                    if torch.is_tensor(x) and x.dim() == 4:
                        seen.setdefault(id(x), (module, i, x))  # innermost first: hooks fire as forwards end

        temp = [m.register_forward_hook(record) for m in self.model.modules() if m is not self.model]
        try:
            out = self.model(input_ids=ids, attention_mask=torch.ones_like(ids), output_attentions=True, **self.kwargs)
        finally:
            for h in temp:
                h.remove()
        maps = list(getattr(out, "attentions", None) or [])
        del out
        if not maps or any(a is None for a in maps):
            raise _no_weights(self.model)
        sites: dict[Any, int] = {}
        for a in maps:
            found = seen.get(id(a))
            if found is None or sites.get(found[0], found[1]) != found[1]:
                sites = {}
                break
            sites[found[0]] = found[1]
        seen.clear()
        self.sites, self.layers = sites, len(maps)
        self.handles += [m.register_forward_hook(self._strip_hook) for m in sites]

    def before(self, ids: Any) -> None:
        """Before a forward pass over ``ids``: find the modules that emit the maps (first batch only)."""
        if self.probes is None and self.sites is None:
            self._discover(ids[:1, :PROBE_TOKENS])
            self.on_probed()  # the probe went through every module: observers that sum over tokens start again
        self.count = 0

    def forward_kwargs(self) -> dict[str, Any]:
        """What the forward pass is called with: every layer's maps asked for (Hugging Face models), no cache."""
        return {"output_attentions": self.probes is None, "attention_mask": True, **self.kwargs}

    def after(self, out: Any) -> None:
        """After the forward pass: deliver the maps Hugging Face held until the end (plain mode), check the count."""
        if self.probes is None and not self.sites:  # plain mode: Hugging Face holds every layer until here
            maps = list(getattr(out, "attentions", None) or [])
            if not maps or any(a is None for a in maps):
                raise _no_weights(self.model)
            for layer, a in enumerate(maps):
                self.deliver(layer, a)
            self.count = len(maps)
        if self.count == 0 or (self.sites and self.count != self.layers):
            raise _no_weights(self.model) if self.count == 0 else UnsupportedModelError(
                f"{type(self.model).__name__} produced attention for {self.count} layers in one batch and {self.layers} in another")

    def run(self, ids: Any) -> None:
        """One forward pass over ``ids``; every layer's probabilities go to ``self.deliver`` in layer order."""
        import torch

        self.before(ids)
        kwargs = self.forward_kwargs()
        kwargs["attention_mask"] = torch.ones_like(ids)
        out = self.model(input_ids=ids, **kwargs)
        self.after(out)
        del out

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def attention_batches(model: Any, blocks: np.ndarray, batch_size: int, on_layer: Callable[[int, Any], None],
                      on_batch: Callable[[int], None], on_probed: Callable[[], None] | None = None) -> None:
    """Run ``model`` on each batch of ``blocks``; ``on_layer(layer, probs)`` for every layer, then ``on_batch(size)``.

    Batches come from the shared block runner (:func:`posviz.observe.runner.run_batches`).
    ``probs`` has shape ``(batch, heads, n, n)``; layers come in order, each as soon
    as it has been computed where the model allows it (see :class:`_Capture`).
    ``on_probed()`` is called after the short probe pass that a Hugging Face model
    gets before its first batch (other hooks on the model saw that pass too).

    Raises
    ------
    UnsupportedModelError
        The model returns no attention weights (an attention implementation
        without them, such as SDPA-only code).
    """
    from posviz.observe.runner import run_batches

    capture = _Capture(model)
    capture.deliver = on_layer
    if on_probed is not None:
        capture.on_probed = on_probed

    def forward(ids: Any) -> None:
        capture.run(ids)
        on_batch(int(ids.shape[0]))

    try:
        run_batches(model, blocks, batch_size, forward)
    finally:
        capture.remove()


class EagerObserver:
    """``posviz attention``'s observer in a text pass on eager attention: every chosen layer's maps summed whole.

    Its result is an :class:`~posviz.observe.attention.AttentionResult` (with RoPE band norms for LLaMA-style models).
    """

    def __init__(self, model: Any, layers: Sequence[int], request: Any = None) -> None:
        from posviz.observe.rope_bands import RopeBands

        self.model, self.layers, self.request = model, list(layers), request
        self.sums = AttentionSums(layers)
        self.produced = 0
        self.bands = RopeBands.attach(model, self.layers) if request is not None else None
        self.capture = _Capture(model)
        self.capture.deliver = self._deliver
        if self.bands is not None:
            self.capture.on_probed = self.bands.reset

    def _deliver(self, layer: int, probs: Any) -> None:
        self.produced = max(self.produced, layer + 1)
        if layer in self.layers:
            self.sums.add(layer, probs)

    def forward_kwargs(self) -> dict[str, Any]:
        return self.capture.forward_kwargs()

    def before(self, ids: Any) -> None:
        self.capture.before(ids)

    def after(self, ids: Any, out: Any) -> None:
        self.capture.after(out)
        if max(self.layers) >= self.produced:
            raise UnsupportedModelError(f"the model produced attention for {self.produced} layers, not layer {max(self.layers)}")
        self.sums.blocks += int(ids.shape[0])

    def close(self) -> None:
        self.capture.remove()
        if self.bands is not None:
            self.bands.detach()

    def finish(self, run: Any) -> Any:
        """The :class:`~posviz.observe.attention.AttentionResult` of the pass."""
        from posviz.observe.attention_result import AttentionResult
        from posviz.observe.statistics import layer_statistics

        causal = self.sums.causal()
        per_layer = {layer: self.sums.layer(layer) for layer in self.layers}  # numpy views of the sums, made once per layer
        stats = {layer: layer_statistics(per_layer[layer], causal) for layer in self.layers}
        return AttentionResult(
            model=run.loaded.label, layers=self.layers, heads=int(stats[self.layers[0]].toeplitzness.shape[0]),
            seq_len=run.seq_len, blocks=self.sums.blocks, causal=causal, layout=run.layout, corpus=run.corpus, stats=stats,
            means={layer: per_layer[layer].mean for layer in self.layers},
            rope_bands=None if self.bands is None else self.bands.means(),
        )


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
    from posviz.observe.text_pass import run_pass

    observer = EagerObserver(model, layers)
    run_pass(model, blocks, [observer], batch_size=batch_size, progress=progress)
    return observer.sums
