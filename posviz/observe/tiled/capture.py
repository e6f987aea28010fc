"""Capture each layer's queries and keys as a Hugging Face model forms them, while it runs its own fast attention.

Models whose attention goes through transformers' ``AttentionInterface`` (LLaMA, Mistral, Qwen, Gemma, GPT-2,
GPT-NeoX, OPT, BERT, RoBERTa, ALBERT, … in transformers 5) hand every layer's attention inputs to one function:
queries and keys with position applied (RoPE rotated, whatever its ``rope_type`` and scaling, partial rotary
included), keys before grouped-query expansion, the scale, the mask, the sliding window and the logit cap. Inside
:class:`TiledCapture` that function is posviz's: it calls the model's own SDPA attention and adds the layer's tiles
to its :class:`~posviz.observe.tiled.sums.TiledSums` (after the call where the compiled CPU kernel takes the
log-sum-exp the call computed, :mod:`~posviz.observe.tiled.normalisers`; before it otherwise), so the model's
outputs are unchanged and no ``n x n`` map is formed by posviz.

posviz's own models (every scheme: TISA, TUPE, T5, ALiBi, RoPE, …) run SDPA in their attention modules
(:class:`posviz.models.modeling_posviz.PosvizAttention`); a forward pre-hook on each sees its inputs (the hidden
states, the additive term that holds the positional scores, RoPE's angles) and forms the queries and keys as the
module does, with the module's own projections, rotation and scale, while the module runs unchanged.

A model that does not use the interface (older transformers, BLOOM, DeBERTa, Falcon) raises
:class:`NotCapturable` on entry; so does a mask that is not a plain causal or bidirectional (windowed) support
(padding), at the layer that receives it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from posviz.observe.tiled.choice import choose_kernel
from posviz.observe.tiled.kernel import TILE, AttentionInputs, accumulate
from posviz.observe.tiled.normalisers import keeping_normalisers
from posviz.observe.tiled.sums import MAP_SIZE, TiledSums
from posviz.observe.tiled.support import Support

#: The name under which posviz's attention function and its mask function are registered with transformers.
IMPLEMENTATION = "posviz_tiled"
_ACTIVE: list[TiledCapture] = []


class NotCapturable(Exception):
    """The model's attention inputs cannot be captured (the reason is the message)."""


def _interfaces() -> tuple[Any, Any, Any, Any]:
    """transformers' attention and mask interfaces, its SDPA attention and SDPA mask, or NotCapturable."""
    try:
        from transformers import AttentionInterface
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError as e:
        import transformers

        raise NotCapturable(f"transformers {transformers.__version__} has no attention interface to capture from ({e})") from None
    return AttentionInterface, AttentionMaskInterface, sdpa_attention_forward, sdpa_mask


class TiledCapture:
    """While entered, ``model`` computes its attention through posviz, which keeps tiled sums of ``layers``.

    Parameters
    ----------
    model
        A Hugging Face model whose attention uses transformers' ``AttentionInterface``.
    layers
        The layers (in call order, 0-based) to keep sums of; None for all.
    tile, map_size
        As in :func:`~posviz.observe.tiled.kernel.accumulate`.
    normalisers
        Keep each captured layer's log-sum-exp as the model's own attention computes it, where that is PyTorch's CPU
        flash kernel (:mod:`~posviz.observe.tiled.normalisers`), so that the compiled CPU kernel takes one pass
        instead of two; False: it always computes its own.

    Attributes
    ----------
    sums, supports
        Per layer, its sums and the support its attention had (set by the first block).
    calls
        Attention calls seen (every layer of every forward pass).
    one_pass
        The layers whose sums took the model's own normalisers (``normalisers``) in every block so far.
    """

    def __init__(self, model: Any, layers: Sequence[int] | None = None, *, tile: int = TILE, map_size: int = MAP_SIZE,
                 normalisers: bool = True) -> None:
        self.model = model
        self.normalisers = normalisers
        self.layers = None if layers is None else set(layers)
        self.tile = tile
        self.map_size = map_size
        self.sums: dict[int, TiledSums] = {}
        self.supports: dict[int, Support] = {}
        self.calls = 0
        self._one_pass: dict[int, bool] = {}
        self._layer = 0
        self._previous: str | None = None
        self._hooks: list[Any] = []

    def __enter__(self) -> TiledCapture:
        own = _posviz_attention_modules(self.model)
        if own:  # posviz's own models: pre-hooks on their attention modules; the modules run as they are
            self._hooks = [m.register_forward_pre_hook(self._posviz_attend, with_kwargs=True) for m in own]
            self._hooks.append(self.model.register_forward_pre_hook(lambda *_: self._new_pass()))
            _ACTIVE.append(self)
            return self
        attention, masks, sdpa, sdpa_mask = _interfaces()
        can = getattr(self.model, "_can_set_attn_implementation", None)
        if can is None or not can():
            raise NotCapturable(f"{type(self.model).__name__} does not route its attention through transformers' AttentionInterface")
        attention.register(IMPLEMENTATION, _dispatch)
        masks.register(IMPLEMENTATION, sdpa_mask)
        self._sdpa = sdpa
        self._previous = self.model.config._attn_implementation
        self.model.set_attn_implementation(IMPLEMENTATION)
        self._hooks = [self.model.register_forward_pre_hook(lambda *_: self._new_pass())]
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _ACTIVE.remove(self)
        for hook in self._hooks:
            hook.remove()
        if self._previous is not None:
            self.model.set_attn_implementation(self._previous)

    def _new_pass(self) -> None:
        self._layer = 0

    def attend(self, module: Any, query: Any, key: Any, value: Any, mask: Any, **kwargs: Any) -> Any:
        """The model's attention, after adding the layer's tiles to its sums."""
        layer = self._next_layer()
        if layer is None:
            return self._sdpa(module, query, key, value, mask, **kwargs)
        support = _support(module, query, key, mask, kwargs)
        scale = kwargs.get("scaling")
        inputs = AttentionInputs(query, key, query.shape[-1] ** -0.5 if scale is None else float(scale), support,
                                 bias=_bias(kwargs.get("position_bias")), softcap=kwargs.get("softcap"))
        kernel = choose_kernel(inputs)
        # the compiled CPU kernel saves a pass with the model's own log-sum-exp (kept by the flash kernel: no window)
        if not (self.normalisers and kernel == "native" and inputs.support.window is None):
            self._add(layer, inputs, kernel)
            return self._sdpa(module, query, key, value, mask, **kwargs)
        with keeping_normalisers() as kept:  # the model's attention first, keeping its log-sum-exp
            out = self._sdpa(module, query, key, value, mask, **kwargs)
        self._add(layer, _with_normalisers(inputs, kept), kernel)
        return out

    def _posviz_attend(self, module: Any, args: tuple, kwargs: dict) -> None:
        """Pre-hook of a posviz attention module: its queries and keys as it forms them, added to the layer's sums."""
        layer = self._next_layer()
        if layer is None:
            return
        hidden, bias = args[0], args[1] if len(args) > 1 else kwargs.get("attention_bias")
        query, key = module.queries_keys(hidden, kwargs.get("rotary"))  # as PosvizAttention.forward forms them
        support = Support(hidden.shape[1], bool(getattr(module.config, "is_causal", False)))
        if bias is not None and not _opens_every_key(bias):
            raise NotCapturable("the attention mask is not a plain causal or bidirectional support (padded blocks?)")
        self._add(layer, AttentionInputs(query, key, float(module.scaling), support, bias=_bias(bias)))

    def _next_layer(self) -> int | None:
        """Count one attention call; the layer it computes when its sums are kept, else None."""
        layer = self._layer
        self._layer += 1
        self.calls += 1
        return layer if self.layers is None or layer in self.layers else None

    @property
    def one_pass(self) -> set[int]:
        """The layers whose sums took the model's own normalisers (``normalisers``) in every block so far."""
        return {layer for layer, every in self._one_pass.items() if every}

    def _add(self, layer: int, inputs: AttentionInputs, kernel: str | None = None) -> None:
        if self.supports.setdefault(layer, inputs.support) != inputs.support:
            raise NotCapturable(f"layer {layer}: blocks of different supports ({self.supports[layer]} and {inputs.support})")
        self.sums[layer] = accumulate(inputs, self.sums.get(layer), tile=self.tile, map_size=self.map_size, kernel=kernel)
        self._one_pass[layer] = self._one_pass.get(layer, True) and inputs.lse is not None


def _dispatch(module: Any, query: Any, key: Any, value: Any, mask: Any, **kwargs: Any) -> Any:
    if not _ACTIVE:
        raise RuntimeError(f"the attention implementation {IMPLEMENTATION!r} runs only inside posviz's TiledCapture")
    return _ACTIVE[-1].attend(module, query, key, value, mask, **kwargs)


def _with_normalisers(inputs: AttentionInputs, kept: list) -> AttentionInputs:
    """``inputs`` with the log-sum-exp of the one attention call kept, where it was made for exactly this support and
    scale; else ``inputs`` as they were (the kernel computes its own)."""
    import math

    if len(kept) != 1 or kept[0] is None:
        return inputs
    got = kept[0]
    scale = inputs.query.shape[-1] ** -0.5 if got.scale is None else got.scale
    if got.causal != inputs.support.causal or not math.isclose(scale, inputs.scale, rel_tol=1e-7):
        return inputs
    if tuple(got.lse.shape) != tuple(inputs.query.shape[:3]):
        return inputs
    return dataclasses.replace(inputs, lse=got.lse)


def _support(module: Any, query: Any, key: Any, mask: Any, kwargs: dict) -> Support:
    """The support of this call: causal or not, its sliding window; a mask, when given, must be exactly that."""
    n = query.shape[-2]
    if key.shape[-2] != n or (mask is not None and mask.shape[-1] != n):
        raise NotCapturable("queries and keys of different lengths (a cache or cross-attention)")
    causal = kwargs.get("is_causal")
    causal = bool(getattr(module, "is_causal", False) if causal is None else causal)
    window = kwargs.get("sliding_window")
    window = int(window) if window is not None and int(window) < n else None
    if mask is None:
        return Support(n, causal, window)
    for candidate in dict.fromkeys([Support(n, causal, window), Support(n, True, window), Support(n, False, window)]):
        if _mask_is(mask, candidate):
            return candidate
    raise NotCapturable("the attention mask is not a plain causal or bidirectional support (padded blocks?)")


def _mask_is(mask: Any, support: Support, rows: int = 1024) -> bool:
    """Whether a transformers mask (bool: True attends; float: 0 attends) keeps exactly ``support``, a slab at a time."""
    import torch

    n = support.n
    for i0 in range(0, n, rows):
        i1 = min(n, i0 + rows)
        part = mask[..., i0:i1, :]
        keeps = part if part.dtype == torch.bool else part == 0
        want = torch.as_tensor(support.tile(i0, i1, 0, n), device=part.device)
        if not bool((keeps == want).all()):
            return False
    return True


def _posviz_attention_modules(model: Any) -> list[Any]:
    """The attention modules of a posviz model (each once: ALBERT-style layer groups share them), else []."""
    if not type(model).__module__.startswith("posviz."):
        return []
    seen: dict[int, Any] = {}
    for name, m in model.named_modules():
        if name.endswith("attention") and hasattr(m, "attention_probs") and hasattr(m, "scaling"):
            seen.setdefault(id(m), m)
    return list(seen.values())


def _opens_every_key(bias: Any) -> bool:
    """Whether an additive term (positional scores, with the causal mask folded in) leaves every key open to the last
    query, which sees every key under either support: padding would close some key to every query."""
    import torch

    low = torch.finfo(bias.dtype).min / 2
    return bool((bias[..., -1, :] > low).all())


def _bias(position_bias: Any) -> Any:
    """A bias function slicing a ``(batch or 1, heads, n, n)`` position bias (T5), or None."""
    if position_bias is None:
        return None

    def bias(b: int, i0: int, i1: int, j0: int, j1: int) -> Any:
        return position_bias[b if position_bias.shape[0] > 1 else 0, :, i0:i1, j0:j1]

    return bias
