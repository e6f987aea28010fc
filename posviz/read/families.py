"""Per-architecture facts: where each family stores its positions and which rows are real.

Tensor names are matched by suffix (at a ``.`` boundary) because checkpoints prefix
the bare model's names differently (``bert.``, ``roberta.``, ``transformer.``,
``model.``). Row offsets follow the Hugging Face implementations:
RoBERTa-style models number positions from ``padding_idx + 1``; OPT and BART
add a fixed offset of 2 (REFERENCE.md, "Where positions live"). Where each
family keeps its attention projections: :mod:`posviz.read.layouts`. See
ARCHITECTURE.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from posviz.errors import UnsupportedModelError

Scheme = Literal["learned", "relative", "alibi", "rotary", "none"]

#: ``model_type`` of the models that ``posviz train`` builds.
POSVIZ_MODEL_TYPE = "posviz-albert"

#: Config keys that hold the number of layers and of heads, across families.
LAYER_KEYS: tuple[str, ...] = ("num_hidden_layers", "n_layer", "n_layers", "num_layers")
HEAD_KEYS: tuple[str, ...] = ("num_attention_heads", "n_head", "n_heads", "num_heads")


def config_value(config: Mapping[str, Any] | Any, keys: Iterable[str], default: Any = None) -> Any:
    """The value of the first of ``keys`` present (and not ``None``) in ``config``, else ``default``.

    ``config`` is a config dict or a ``PretrainedConfig`` (read by attribute): families name one setting differently.
    """
    get = config.get if isinstance(config, Mapping) else (lambda k: getattr(config, k, None))
    for k in keys:
        if get(k) is not None:
            return get(k)
    return default


@dataclass(frozen=True)
class PositionTable:
    """One learned position table of a family.

    Attributes
    ----------
    label
        Name shown to users (``positions``, ``encoder``, ``decoder``).
    suffix
        Tensor-name suffix in the checkpoint.
    fixed
        For a table that is not stored but computed from the config (``sinusoidal``:
        posviz models of that scheme), its kind; ``suffix`` is then only a label.
    """

    label: str
    suffix: str
    fixed: str | None = None


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
        ("llama", "mistral", "mixtral", "gpt_neox", "gptj", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi", "phi3",
         "falcon", "olmo", "olmo2", "stablelm"),
        "rotary",
        note="rotary position embeddings (RoPE) rotate queries and keys; there is no position table",
    ),
)


# Models built by `posviz train`: where positions live depends on position_scheme.
# The TUPE table has one extra row before position 0 (the [CLS]->others vector of
# the untie), like RoBERTa's padding rows.
_POSVIZ_NOTES = {
    "none": "position_scheme 'none' has no positional information",
    "tisa": "TISA adds a learned translation-invariant score f(j - i) per head instead of absolute positions",
    "t5": "this model adds a learned T5 relative bucket bias per head instead of absolute positions",
    "alibi": "this model adds a fixed linear distance bias per head (ALiBi) instead of absolute positions",
    "rope": "this model rotates queries and keys (RoPE) instead of adding absolute positions",
}

#: The fixed table of ``position_scheme="sinusoidal"``: computed from the config, never stored.
_SINUSOIDAL = (PositionTable("positions", "embeddings.position_embeddings.weight", fixed="sinusoidal"),)


def _posviz_albert(config: Mapping[str, Any]) -> Family:
    scheme = str(config.get("position_scheme", "absolute"))
    name = f"posviz-albert ({scheme})"
    types = (POSVIZ_MODEL_TYPE,)
    if scheme in ("absolute", "absolute+tisa"):
        return Family(name, types, "learned", _POS)
    if scheme == "sinusoidal":
        return Family(name, types, "learned", _SINUSOIDAL)
    if scheme == "rope":
        return Family(name, types, "rotary", note=_POSVIZ_NOTES["rope"])
    if scheme in ("tupe-a", "tupe-r"):
        table = PositionTable("positions", "encoder.position_scores.0.position_embeddings.weight")
        return Family(name, types, "learned", (table,), first_row=1,
                      note="TUPE's position table enters attention through the untied positional term")
    kind: Scheme = "none" if scheme == "none" else "alibi" if scheme == "alibi" else "relative"
    return Family(name, types, kind, note=_POSVIZ_NOTES.get(scheme, f"position_scheme {scheme!r}"))


FAMILIES += (Family(POSVIZ_MODEL_TYPE, (POSVIZ_MODEL_TYPE,), "learned", _POS, variant=_posviz_albert),)

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
