"""Where each absolute-position architecture keeps what a head's position-only logits need.

One :class:`AttentionLayout` per ``(model_type, table)``: query/key projection
names, LayerNorms before attention, embedding mapping, scale rule, each mirroring
the Hugging Face implementation, so that a layer's query and key can be read
without the rest of the model. See ARCHITECTURE.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from posviz.errors import UnsupportedModelError
from posviz.read.families import config_value

ScaleRule = Literal["sqrt", "none", "gpt2"]


@dataclass(frozen=True)
class AttentionLayout:
    """Where an architecture keeps what the position-only logits of a layer need.

    Module names are tensor-name suffixes without ``.weight``/``.bias``; ``{layer}``
    is replaced by the layer's module index (see :meth:`module_index`). Each entry
    mirrors the Hugging Face implementation of the family.

    Attributes
    ----------
    layers, heads
        Config keys holding the number of layers and of heads (first present wins).
    query, key
        Query and key projections (``nn.Linear``: weight ``(out, in)``). For a
        fused projection ``key`` is ``None`` and ``query`` names the fused module.
    fused_conv1d
        GPT-2's ``c_attn``: a ``Conv1D`` whose weight is ``(in, 3 * out)``
        (transposed with respect to ``nn.Linear``); Q and K are its first two
        column blocks.
    bias
        Whether the projections carry biases (a config key may switch them off,
        see ``bias_flag``).
    bias_flag
        Config key that, when false, means the projections have no bias.
    input_norms
        LayerNorms the position input passes through before the projection, in
        order, for ``--ln ln``. Post-LN encoders: the embedding LayerNorm;
        pre-LN decoders: the layer's own input LayerNorm.
    pre_ln_flag
        Config key that switches ``input_norms[-1]`` off when false (OPT's
        ``do_layer_norm_before``: post-LN OPT models normalise after attention).
    eps_keys, eps_default
        LayerNorm epsilon: config keys, else the implementation's constant.
    mapping
        A linear map from the embedding size to the hidden size applied after
        the embedding LayerNorm (ALBERT ``embedding_hidden_mapping_in``, ELECTRA
        ``embeddings_project``); optional when ``mapping_optional``.
    token_type
        Token-type table whose row 0 ``--ln ln+type0`` adds before the LayerNorm.
    scale
        ``sqrt``: 1/sqrt(d_h); ``none``: no scaling (GPT-Neo computes
        ``Q K^T`` unscaled); ``gpt2``: 1/sqrt(d_h) if ``scale_attn_weights``, times
        1/(layer + 1) if ``scale_attn_by_inverse_layer_idx``.
    shared_groups
        ALBERT: layers share parameters by group (``num_hidden_groups``);
        ``{layer}`` is the group index and inner layer 0 is used.
    """

    layers: tuple[str, ...]
    heads: tuple[str, ...]
    query: str
    key: str | None
    fused_conv1d: bool = False
    bias: bool = True
    bias_flag: str | None = None
    input_norms: tuple[str, ...] = ()
    pre_ln_flag: str | None = None
    eps_keys: tuple[str, ...] = ("layer_norm_eps",)
    eps_default: float = 1e-12
    mapping: str | None = None
    mapping_optional: bool = False
    token_type: str | None = None
    scale: ScaleRule = "sqrt"
    shared_groups: bool = False

    def config_int(self, config: Mapping[str, Any], keys: tuple[str, ...], what: str) -> int:
        """First of ``keys`` present in ``config`` as an int."""
        value = config_value(config, keys)
        if value is None:
            raise UnsupportedModelError(f"config.json lacks the number of {what} ({' or '.join(keys)})")
        return int(value)

    def num_layers(self, config: Mapping[str, Any]) -> int:
        """Number of layers of the attention stack."""
        return self.config_int(config, self.layers, "layers")

    def num_heads(self, config: Mapping[str, Any]) -> int:
        """Number of attention heads per layer."""
        return self.config_int(config, self.heads, "attention heads")

    def eps(self, config: Mapping[str, Any]) -> float:
        """LayerNorm epsilon used by the implementation."""
        return float(config_value(config, self.eps_keys, self.eps_default))

    def module_index(self, config: Mapping[str, Any], layer: int) -> int:
        """Index that replaces ``{layer}`` in module names (ALBERT: the shared group)."""
        if not self.shared_groups:
            return layer
        groups = int(config.get("num_hidden_groups", 1))
        # AlbertTransformer: group_idx = int(i / (num_hidden_layers / num_hidden_groups))
        return int(layer / (self.num_layers(config) / groups))

    def has_bias(self, config: Mapping[str, Any]) -> bool:
        """Whether the Q/K projections have biases for this config."""
        return self.bias and (self.bias_flag is None or bool(config.get(self.bias_flag, True)))

    def norms(self, config: Mapping[str, Any]) -> tuple[str, ...]:
        """The LayerNorms applied for ``--ln ln`` under this config."""
        if self.pre_ln_flag is not None and not config.get(self.pre_ln_flag, True):
            return self.input_norms[:-1]
        return self.input_norms


_BERT_LIKE = AttentionLayout(
    layers=("num_hidden_layers",),
    heads=("num_attention_heads",),
    query="encoder.layer.{layer}.attention.self.query",
    key="encoder.layer.{layer}.attention.self.key",
    input_norms=("embeddings.LayerNorm",),
    token_type="embeddings.token_type_embeddings",
)

_OPT_LIKE = dict(layers=("num_hidden_layers",), heads=("num_attention_heads",), eps_keys=(), eps_default=1e-5)

#: Attention layouts keyed by ``(model_type, table label)``; the label is that of
#: :class:`PositionTable` (``positions`` for single-table models).
ATTENTION_LAYOUTS: dict[tuple[str, str], AttentionLayout] = {
    **{(t, "positions"): _BERT_LIKE for t in ("bert", "roberta", "xlm-roberta", "camembert", "longformer")},
    ("electra", "positions"): replace(_BERT_LIKE, mapping="embeddings_project", mapping_optional=True),
    # Pre-LN variants of BERT/RoBERTa: the layer's own LayerNorm comes last.
    ("megatron-bert", "positions"): replace(_BERT_LIKE, input_norms=("encoder.layer.{layer}.attention.ln",)),
    ("roberta-prelayernorm", "positions"): replace(
        _BERT_LIKE, input_norms=("embeddings.LayerNorm", "encoder.layer.{layer}.attention.LayerNorm")
    ),
    ("xlm-roberta-xl", "positions"): replace(
        _BERT_LIKE, input_norms=("encoder.layer.{layer}.attention.self_attn_layer_norm",)
    ),
    ("albert", "positions"): AttentionLayout(
        layers=("num_hidden_layers",),
        heads=("num_attention_heads",),
        query="encoder.albert_layer_groups.{layer}.albert_layers.0.attention.query",
        key="encoder.albert_layer_groups.{layer}.albert_layers.0.attention.key",
        input_norms=("embeddings.LayerNorm",),
        mapping="encoder.embedding_hidden_mapping_in",
        token_type="embeddings.token_type_embeddings",
        shared_groups=True,
    ),
    ("distilbert", "positions"): AttentionLayout(
        layers=("n_layers",),
        heads=("n_heads",),
        query="transformer.layer.{layer}.attention.q_lin",
        key="transformer.layer.{layer}.attention.k_lin",
        input_norms=("embeddings.LayerNorm",),
        eps_keys=(),  # DistilBERT hard-codes eps=1e-12
    ),
    ("gpt2", "positions"): AttentionLayout(
        layers=("n_layer", "num_hidden_layers"),
        heads=("n_head", "num_attention_heads"),
        query="h.{layer}.attn.c_attn",
        key=None,
        fused_conv1d=True,
        input_norms=("h.{layer}.ln_1",),
        eps_keys=("layer_norm_epsilon",),
        eps_default=1e-5,
        scale="gpt2",
    ),
    ("gpt_neo", "positions"): AttentionLayout(
        layers=("num_layers", "num_hidden_layers"),
        heads=("num_heads", "num_attention_heads"),
        query="h.{layer}.attn.attention.q_proj",
        key="h.{layer}.attn.attention.k_proj",
        bias=False,
        input_norms=("h.{layer}.ln_1",),
        eps_keys=("layer_norm_epsilon",),
        eps_default=1e-5,
        scale="none",
    ),
    ("opt", "positions"): AttentionLayout(
        **_OPT_LIKE,
        query="decoder.layers.{layer}.self_attn.q_proj",
        key="decoder.layers.{layer}.self_attn.k_proj",
        bias_flag="enable_bias",
        input_norms=("decoder.layers.{layer}.self_attn_layer_norm",),
        pre_ln_flag="do_layer_norm_before",
    ),
    **{
        ("bart", side): AttentionLayout(
            layers=(f"{side}_layers",),
            heads=(f"{side}_attention_heads",),
            query=f"{side}.layers.{{layer}}.self_attn.q_proj",
            key=f"{side}.layers.{{layer}}.self_attn.k_proj",
            input_norms=(f"{side}.layernorm_embedding",),
            eps_keys=(),
            eps_default=1e-5,
        )
        for side in ("encoder", "decoder")
    },
    **{
        ("mbart", side): AttentionLayout(
            layers=(f"{side}_layers",),
            heads=(f"{side}_attention_heads",),
            query=f"{side}.layers.{{layer}}.self_attn.q_proj",
            key=f"{side}.layers.{{layer}}.self_attn.k_proj",
            input_norms=(f"{side}.layernorm_embedding", f"{side}.layers.{{layer}}.self_attn_layer_norm"),
            eps_keys=(),
            eps_default=1e-5,
        )
        for side in ("encoder", "decoder")
    },
}


def attention_layout(config: Mapping[str, Any], table: str = "positions") -> AttentionLayout:
    """The per-head attention layout for a config (and position table).

    Raises
    ------
    UnsupportedModelError
        If posviz does not know where this model type keeps its Q/K projections.
    """
    model_type = str(config.get("model_type", ""))
    layout = ATTENTION_LAYOUTS.get((model_type, table))
    if layout is None:
        known = sorted({t for t, _ in ATTENTION_LAYOUTS})
        raise UnsupportedModelError(
            f"per-head attention maps are not available for model_type {model_type!r}",
            f"supported: {', '.join(known)}",
        )
    return layout
