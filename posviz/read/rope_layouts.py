"""Where each rotary (RoPE) architecture keeps what a head's band usage and probe profile need.

One :class:`RopeLayout` per ``model_type``: query/key projections (separate, or fused
as GPT-NeoX's per-head ``[q, k, v]`` or Phi-3's ``[Q; K; V]`` row blocks), the layer's
input norm, QK norms, the token embedding, the pairing of rotated dimensions and the
logit scale, each mirroring the Hugging Face implementation. Models trained by
``posviz train --scheme rope`` (``posviz-albert``) get theirs from the config
(:func:`posviz_layout`): ALBERT's layer groups share one set of weights. See ARCHITECTURE.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from posviz.errors import UnsupportedModelError
from posviz.read.families import HEAD_KEYS, POSVIZ_MODEL_TYPE, config_value

#: ``rms``: ``x / rms(x) * w``; ``rms1p``: Gemma's ``* (1 + w)``; ``layer``: LayerNorm (weight, bias);
#: ``layer_plain``: LayerNorm without parameters (OLMo).
NormKind = Literal["rms", "rms1p", "layer", "layer_plain"]


@dataclass(frozen=True)
class RopeLayout:
    """Tensor-name suffixes (without ``.weight``/``.bias``; ``{layer}`` is the layer) and conventions.

    Attributes
    ----------
    query, key
        Projections; for a fused projection ``key`` is ``None`` and ``fused`` says how.
    fused
        ``neox``: rows ``[h*3d, h*3d+d)`` are head ``h``'s query, the next ``d`` its key;
        ``blocks``: ``[Q (H d); K (H_kv d); V]`` row blocks (Phi-3).
    input_norm, norm
        The norm in front of attention and its kind (``None``: post-norm OLMo 2, attention sees the raw stream).
    eps_keys, eps_default
        Norm epsilon.
    q_norm, k_norm, qk_norm_width
        QK norms (OLMo 2 ``full``: over all heads; Qwen3/Gemma 3 ``head``: per head), ``None`` if absent.
    embed
        Token embedding matrix.
    embed_scale
        Gemma multiplies embeddings by ``sqrt(hidden_size)`` before the first layer.
    pairing
        ``half`` or ``interleaved`` (:mod:`posviz.schemes.rope_bands`).
    scale_key
        Config key of ``query_pre_attn_scalar`` (logit scale ``value^-1/2``), else ``1/sqrt(d_h)``.
    refuse
        Config key that, when true, makes the layout unsupported (with the reason).
    layer_index
        The tensor index of each layer where layers share weights (ALBERT's layer
        groups: ``{layer}`` in the names is the group); empty: layer ``L`` is ``L``.
    """

    query: str
    key: str | None
    input_norm: str | None
    norm: NormKind | None
    eps_keys: tuple[str, ...] = ("rms_norm_eps",)
    eps_default: float = 1e-6
    fused: Literal["neox", "blocks"] | None = None
    q_norm: str | None = None
    k_norm: str | None = None
    qk_norm_width: Literal["head", "full"] = "head"
    embed: str = "embed_tokens"
    embed_scale: bool = False
    pairing: Literal["half", "interleaved"] = "half"
    scale_key: str | None = None
    refuse: tuple[str, str] | None = None
    layer_index: tuple[int, ...] = ()

    def eps(self, config: Mapping[str, Any]) -> float:
        """Norm epsilon used by the implementation."""
        return float(config_value(config, self.eps_keys, self.eps_default))

    def name(self, module: str, layer: int) -> str:
        """A module suffix for one layer."""
        return module.format(layer=self.layer_index[layer] if self.layer_index else layer)


_LLAMA = RopeLayout("layers.{layer}.self_attn.q_proj", "layers.{layer}.self_attn.k_proj",
                    "layers.{layer}.input_layernorm", "rms")
_GEMMA = replace(_LLAMA, norm="rms1p", embed_scale=True)
_QK = dict(q_norm="layers.{layer}.self_attn.q_norm", k_norm="layers.{layer}.self_attn.k_norm")

#: Rotary layouts by ``model_type``.
ROPE_LAYOUTS: dict[str, RopeLayout] = {
    **{t: _LLAMA for t in ("llama", "mistral", "mixtral", "qwen2")},
    "qwen3": replace(_LLAMA, **_QK),
    "olmo": replace(_LLAMA, norm="layer_plain", eps_keys=(), eps_default=1e-5),
    "olmo2": replace(_LLAMA, input_norm=None, norm=None, qk_norm_width="full", **_QK),
    "gemma": _GEMMA,
    "gemma2": replace(_GEMMA, scale_key="query_pre_attn_scalar"),
    "gemma3_text": replace(_GEMMA, scale_key="query_pre_attn_scalar", **_QK),
    "phi": replace(_LLAMA, norm="layer", eps_keys=("layer_norm_eps",), eps_default=1e-5,
                   refuse=("qk_layernorm", "Phi's per-head q/k LayerNorms (qk_layernorm) are not folded in")),
    "phi3": replace(_LLAMA, query="layers.{layer}.self_attn.qkv_proj", key=None, fused="blocks"),
    "stablelm": replace(_LLAMA, norm="layer", eps_keys=("layer_norm_eps",), eps_default=1e-5,
                        refuse=("qk_layernorm", "StableLM's per-head q/k LayerNorms (qk_layernorm) are not folded in")),
    "gpt_neox": RopeLayout("layers.{layer}.attention.query_key_value", None, "layers.{layer}.input_layernorm", "layer",
                           eps_keys=("layer_norm_eps",), eps_default=1e-5, fused="neox", embed="embed_in"),
    "gptj": RopeLayout("h.{layer}.attn.q_proj", "h.{layer}.attn.k_proj", "h.{layer}.ln_1", "layer",
                       eps_keys=("layer_norm_epsilon",), eps_default=1e-5, embed="wte", pairing="interleaved"),
}


def posviz_layout(config: Mapping[str, Any]) -> RopeLayout:
    """The layout of a ``posviz train --scheme rope`` model (ALBERT-style, post-LayerNorm).

    Attention sees the previous layer's output (already layer-normalised, as OLMo 2's
    post-norm layers do), so no input norm is folded in; layer ``L`` uses the
    weights of group ``int(L / (layers / groups))``. The token embedding is
    ``embedding_size`` wide and reaches the first layer through the embedding
    LayerNorm and ``embedding_hidden_mapping_in`` (the probe follows that path:
    :mod:`posviz.extract.posviz_trained`).
    """
    layers, groups = int(config["num_hidden_layers"]), int(config.get("num_hidden_groups", 1))
    att = "encoder.albert_layer_groups.{layer}.albert_layers.0.attention."
    return RopeLayout(att + "query", att + "key", None, None, eps_keys=("layer_norm_eps",), eps_default=1e-12,
                      embed="embeddings.word_embeddings", pairing="half",
                      layer_index=tuple(int(L / (layers / groups)) for L in range(layers)))


def rope_layout(config: Mapping[str, Any]) -> RopeLayout:
    """The rotary layout of a config.

    Raises
    ------
    UnsupportedModelError
        An unknown ``model_type`` (or a variant posviz does not fold in), with the way out.
    """
    model_type = str(config.get("model_type", ""))
    if model_type == POSVIZ_MODEL_TYPE and config.get("position_scheme") == "rope":
        return posviz_layout(config)
    layout = ROPE_LAYOUTS.get(model_type)
    hint = "`--probe content-free` shows the weight-free kernel sum_b cos(k theta_b) instead"
    if layout is None:
        raise UnsupportedModelError(
            f"per-head RoPE bands are not available for model_type {model_type!r} "
            f"(known: {', '.join(sorted(ROPE_LAYOUTS))})", hint)
    if layout.refuse and config.get(layout.refuse[0]):
        raise UnsupportedModelError(f"{model_type}: {layout.refuse[1]}", hint)
    return layout


def kv_heads(config: Mapping[str, Any]) -> int:
    """Key/value heads (GQA/MQA ``num_key_value_heads``; the query heads when absent)."""
    heads = config_value(config, HEAD_KEYS)
    return int(config_value(config, ("num_key_value_heads", "multi_query_group_num"), heads))
