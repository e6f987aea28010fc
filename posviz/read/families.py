"""Per-architecture facts: where each family stores its positions and which rows are real.

Tensor names are matched by suffix (at a ``.`` boundary) because checkpoints prefix
the bare model's names differently (``bert.``, ``roberta.``, ``transformer.``,
``model.``). Row offsets follow the Hugging Face implementations:
RoBERTa-style models number positions from ``padding_idx + 1``; OPT and BART
add a fixed offset of 2 (REFERENCE.md, "Where positions live").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from posviz.errors import UnsupportedModelError

Scheme = Literal["learned", "relative", "alibi", "rotary", "none"]


@dataclass(frozen=True)
class PositionTable:
    """One learned position table of a family.

    Attributes
    ----------
    label
        Name shown to users (``positions``, ``encoder``, ``decoder``).
    suffix
        Tensor-name suffix in the checkpoint.
    """

    label: str
    suffix: str


def _padding_offset(config: Mapping[str, Any]) -> int:
    # RobertaEmbeddings.create_position_ids_from_input_ids counts from padding_idx + 1.
    pad = config.get("pad_token_id")
    return (1 if pad is None else int(pad)) + 1


@dataclass(frozen=True)
class Family:
    """How one architecture family encodes position.

    Attributes
    ----------
    name
        Short family name.
    model_types
        Config ``model_type`` values that belong to the family.
    scheme
        ``learned`` (absolute table), ``relative``, ``alibi``, ``rotary`` or ``none``.
    tables
        Learned position tables, first is the default.
    first_row
        Number of stored rows before position 0, or a function of the config.
    note
        For families without learned absolute positions: what to use instead.
    extra
        Further facts; ``positional_scores`` names a ``module:function`` that
        returns a model's per-head :class:`~posviz.positional_scores.PositionalScores`.
    variant
        For model types whose layout depends on the config (``posviz-albert``'s
        ``position_scheme``): returns the family for one config.
    """

    name: str
    model_types: tuple[str, ...]
    scheme: Scheme
    tables: tuple[PositionTable, ...] = ()
    first_row: int | Callable[[Mapping[str, Any]], int] = 0
    note: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    variant: Callable[[Mapping[str, Any]], Family] | None = None

    def row_offset(self, config: Mapping[str, Any]) -> int:
        """Number of stored rows that precede position 0 for this config."""
        return self.first_row(config) if callable(self.first_row) else int(self.first_row)

    def table(self, label: str | None) -> PositionTable:
        """Return the table called ``label`` (default: the first)."""
        if not self.tables:
            raise no_learned_positions(self)
        if label is None:
            return self.tables[0]
        for t in self.tables:
            if t.label == label:
                return t
        labels = ", ".join(t.label for t in self.tables)
        raise UnsupportedModelError(f"{self.name} has no position table {label!r}", f"choose one of: {labels}")


_POS = (PositionTable("positions", "embeddings.position_embeddings.weight"),)

FAMILIES: tuple[Family, ...] = (
    Family("bert", ("bert", "megatron-bert", "electra", "albert", "distilbert"), "learned", _POS),
    Family(
        "roberta",
        ("roberta", "xlm-roberta", "camembert", "longformer", "roberta-prelayernorm", "xlm-roberta-xl"),
        "learned",
        _POS,
        first_row=_padding_offset,
    ),
    Family("gpt2", ("gpt2", "gpt_neo"), "learned", (PositionTable("positions", "wpe.weight"),)),
    Family("opt", ("opt",), "learned", (PositionTable("positions", "decoder.embed_positions.weight"),), first_row=2),
    Family(
        "bart",
        ("bart", "mbart"),
        "learned",
        (
            PositionTable("encoder", "encoder.embed_positions.weight"),
            PositionTable("decoder", "decoder.embed_positions.weight"),
        ),
        first_row=2,
    ),
    Family(
        "t5",
        ("t5", "mt5", "umt5", "longt5"),
        "relative",
        note="T5 adds a learned relative bucket bias per head instead of absolute positions",
    ),
    Family(
        "deberta",
        ("deberta", "deberta-v2"),
        "relative",
        note="DeBERTa uses relative position embeddings (encoder.rel_embeddings)",
    ),
    Family("alibi", ("bloom", "mpt"), "alibi", note="ALiBi adds a fixed linear distance bias per head"),
    Family(
        "rotary",
        ("llama", "mistral", "mixtral", "gpt_neox", "gptj", "qwen2", "qwen3", "gemma", "gemma2", "phi", "phi3", "falcon", "olmo", "stablelm"),
        "rotary",
        note="rotary position embeddings (RoPE) rotate queries and keys; there is no position table",
    ),
)


# Models built by `posviz train` (posviz.models): where positions live depends on
# position_scheme. The TUPE table has one extra row before position 0 (the
# [CLS]->others vector of the untie), like RoBERTa's padding rows.
_POSVIZ_EXTRA = {"positional_scores": "posviz.models.position_terms:positional_scores"}
_POSVIZ_NOTES = {
    "none": "position_scheme 'none' has no positional information",
    "tisa": "TISA adds a learned translation-invariant score f(j - i) per head instead of absolute positions",
    "t5": "this model adds a learned T5 relative bucket bias per head instead of absolute positions",
    "alibi": "this model adds a fixed linear distance bias per head (ALiBi) instead of absolute positions",
}


def _posviz_albert(config: Mapping[str, Any]) -> Family:
    scheme = str(config.get("position_scheme", "absolute"))
    name = f"posviz-albert ({scheme})"
    types = ("posviz-albert",)
    if scheme in ("absolute", "absolute+tisa"):
        return Family(name, types, "learned", _POS, extra=_POSVIZ_EXTRA)
    if scheme in ("tupe-a", "tupe-r"):
        table = PositionTable("positions", "encoder.position_scores.0.position_embeddings.weight")
        return Family(name, types, "learned", (table,), first_row=1, extra=_POSVIZ_EXTRA,
                      note="TUPE's position table enters attention through the untied positional term")
    kind: Scheme = "none" if scheme == "none" else "alibi" if scheme == "alibi" else "relative"
    return Family(name, types, kind, note=_POSVIZ_NOTES.get(scheme, f"position_scheme {scheme!r}"), extra=_POSVIZ_EXTRA)


FAMILIES += (Family("posviz-albert", ("posviz-albert",), "learned", _POS, extra=_POSVIZ_EXTRA, variant=_posviz_albert),)

_BY_TYPE: dict[str, Family] = {t: f for f in FAMILIES for t in f.model_types}


def supported_model_types(scheme: Scheme | None = "learned") -> list[str]:
    """Model types known to posviz (optionally only those with the given scheme)."""
    return sorted(t for f in FAMILIES for t in f.model_types if scheme is None or f.scheme == scheme)


def family_for_config(config: Mapping[str, Any]) -> Family:
    """Return the family for a Hugging Face config dict.

    Raises
    ------
    UnsupportedModelError
        If the config has no ``model_type`` or an unknown one.
    """
    model_type = config.get("model_type")
    if not model_type:
        raise UnsupportedModelError("config.json has no model_type", "is this a Hugging Face model folder?")
    fam = _BY_TYPE.get(str(model_type))
    if fam is None:
        raise UnsupportedModelError(
            f"unknown model_type {model_type!r}",
            f"supported with learned positions: {', '.join(supported_model_types())}",
        )
    return fam.variant(config) if fam.variant is not None else fam


def family_from_tensor_names(names: Iterable[str]) -> Family | None:
    """Guess the family of a bare weight file (no config) from its tensor names."""
    names = list(names)
    for fam in FAMILIES:
        for t in fam.tables:
            if any(suffix_matches(n, t.suffix) for n in names):
                return fam
    return None


def suffix_matches(name: str, suffix: str) -> bool:
    """True if ``name`` is ``suffix`` or ends with ``.`` + ``suffix``."""
    return name == suffix or name.endswith("." + suffix)


def no_learned_positions(fam: Family) -> UnsupportedModelError:
    """The error for a model without learned absolute positions, pointing to what applies."""
    return UnsupportedModelError(
        f"{fam.name} models have no learned absolute position embeddings: {fam.note}",
        "use `posviz heads MODEL` for its per-head positional matrices",
    )


# ---------------------------------------------------------------------------
# Per-head attention layout of the absolute-position families (``posviz heads``)
# ---------------------------------------------------------------------------

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
        for k in keys:
            if config.get(k) is not None:
                return int(config[k])
        raise UnsupportedModelError(f"config.json lacks the number of {what} ({' or '.join(keys)})")

    def num_layers(self, config: Mapping[str, Any]) -> int:
        """Number of layers of the attention stack."""
        return self.config_int(config, self.layers, "layers")

    def num_heads(self, config: Mapping[str, Any]) -> int:
        """Number of attention heads per layer."""
        return self.config_int(config, self.heads, "attention heads")

    def eps(self, config: Mapping[str, Any]) -> float:
        """LayerNorm epsilon used by the implementation."""
        for k in self.eps_keys:
            if config.get(k) is not None:
                return float(config[k])
        return self.eps_default

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
