"""How long a block a model can take, and how long it was trained on: read from its config.

* **Declared length** (:func:`max_positions`): ``max_position_embeddings`` (or
  ``n_positions``) less RoBERTa-style padding rows; ``None`` for encoder-decoders,
  whose relative buckets declare nothing.
* **Table length** (:func:`table_length`): the positions of a learned absolute
  table (BERT 512, GPT-2 1024, posviz ``absolute``/``tupe`` runs: their
  ``--seq-len``). A longer block would index past the table, so it is refused.
  ``None`` for relative, ALiBi, rotary, sinusoidal and position-free schemes,
  which run at any length.
* **Training length** (:func:`training_length`): ``original_max_position_embeddings``
  of a model that already scales its RoPE, else the declared length, which is a
  posviz run's ``--seq-len``. Blocks past it describe extrapolation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posviz.errors import UnsupportedModelError
from posviz.read.families import config_value

#: Families whose learned table numbers positions from ``padding_idx + 1``.
_PADDING_OFFSET = {"roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "longformer", "data2vec-text"}


def max_positions(config: Any) -> int | None:
    """The declared length of a ``PretrainedConfig``, less padding rows; ``None`` when it declares none."""
    limit = config_value(config, ("max_position_embeddings", "n_positions"))
    if limit is None or getattr(config, "is_encoder_decoder", False):
        return None
    if config.model_type in _PADDING_OFFSET:
        limit -= (getattr(config, "pad_token_id", None) or 0) + 1
    return int(limit)


def is_rope(config: Mapping[str, Any]) -> bool:
    """True when a config dict describes a model whose attention uses transformers' rotary embeddings.

    Known families by ``model_type`` (:mod:`posviz.read.families`); an unknown type
    by the RoPE settings in its config. Models trained by ``posviz train`` are never
    counted: their positional modules do not read transformers' scaling settings.
    """
    from posviz.read.families import POSVIZ_MODEL_TYPE, family_for_config

    if config.get("model_type") == POSVIZ_MODEL_TYPE:
        return False
    try:
        return family_for_config(config).scheme == "rotary"
    except UnsupportedModelError:
        return any(config.get(k) is not None for k in ("rope_theta", "rope_parameters", "rope_scaling"))


def table_length(config: Mapping[str, Any], declared: int | None) -> int | None:
    """Positions of the model's learned absolute table, or ``None`` when it has none.

    Parameters
    ----------
    config
        The model's config as a dict.
    declared
        Its declared length less padding rows (:func:`max_positions`).

    Returns
    -------
    int or None
        ``declared`` for a learned table; ``None`` for schemes that run at any
        length. A model type posviz does not know counts as having a table of the
        declared length unless its config has RoPE settings.
    """
    from posviz.read.families import family_for_config

    try:
        family = family_for_config(config)
    except UnsupportedModelError:
        return None if is_rope(config) else declared
    if family.scheme != "learned" or (family.tables and all(t.fixed for t in family.tables)):
        return None  # no table, or one computed from the config for any length (posviz's sinusoidal scheme)
    return declared


def training_length(config: Mapping[str, Any], declared: int | None) -> int | None:
    """The length the model was trained at (module docstring); ``None`` when nothing says."""
    from posviz.schemes.rope import original_length

    original = original_length(config)
    return declared if original is None else original
