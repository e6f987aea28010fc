"""What a model is scored on, what limits its length, and how long it was trained: read from its config.

* **Objective.** A ``posviz train`` run is causal exactly when its config says so
  (``objective == "causal"``, ``is_causal`` or ``is_decoder``), else a masked LM. A
  Hugging Face model is causal when its ``model_type`` has a causal-LM class and
  either no masked-LM class or ``is_decoder`` set (GPT-2, LLaMA, BLOOM; a BERT built
  as a decoder), a masked LM when it has a masked-LM class (BERT, RoBERTa, ALBERT),
  and has no language-model loss otherwise (encoder-decoders such as T5, whose
  encoder still runs for the attention statistics).
* **Table length.** The positions of a learned absolute table (BERT 512, GPT-2
  1024, posviz ``absolute``/``tupe`` runs: their ``--seq-len``), less RoBERTa-style
  padding rows; ``None`` for relative, ALiBi, rotary and position-free schemes.
* **Training length.** ``original_max_position_embeddings`` of a model that already
  scales its RoPE, else the declared ``max_position_embeddings`` (``n_positions``)
  less padding rows, which is a posviz run's ``--seq-len``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posviz.errors import UnsupportedModelError

#: ``head`` of :func:`posviz.observe.loading.load_model` for each objective.
HEADS = {"causal": "causal-lm", "masked": "masked-lm"}


def _names(kind: str) -> Any:
    from transformers.models.auto import modeling_auto

    return getattr(modeling_auto, f"MODEL_FOR_{kind}_LM_MAPPING_NAMES")


def says_causal(config: Mapping[str, Any]) -> bool:
    """True when a config declares causal attention (``objective == "causal"``, ``is_causal`` or ``is_decoder``)."""
    return config.get("objective") == "causal" or bool(config.get("is_causal")) or bool(config.get("is_decoder"))


def objective(config: Mapping[str, Any]) -> str | None:
    """``causal``, ``masked`` or ``None`` (no language-model loss) for a config dict (module docstring)."""
    from posviz.read.families import POSVIZ_MODEL_TYPE

    model_type = str(config.get("model_type", ""))
    if model_type == POSVIZ_MODEL_TYPE:
        return "causal" if says_causal(config) else "masked"
    if config.get("is_encoder_decoder"):
        return None
    causal, masked = model_type in _names("CAUSAL"), model_type in _names("MASKED")
    if causal and (not masked or says_causal(config)):
        return "causal"
    return "masked" if masked else None


def table_length(config: Mapping[str, Any], declared: int | None) -> int | None:
    """Positions of the model's learned absolute table, or ``None`` when it has none.

    ``declared`` is the declared length less padding rows
    (:func:`posviz.observe.loading.max_positions`). A model type posviz does not
    know counts as having a table of that length unless its config has RoPE settings.
    """
    from posviz.extrapolate.scaling import is_rope
    from posviz.read.families import family_for_config

    try:
        family = family_for_config(config)
    except UnsupportedModelError:
        return None if is_rope(config) else declared
    if family.scheme != "learned" or (family.tables and all(t.fixed for t in family.tables)):
        return None  # no table, or one computed from the config for any length (posviz's sinusoidal scheme)
    return declared


def training_length(config: Mapping[str, Any], declared: int | None) -> int | None:
    """The length the model was trained at (module docstring)."""
    for key in ("rope_parameters", "rope_scaling"):
        params = config.get(key)
        if isinstance(params, Mapping) and params.get("original_max_position_embeddings"):
            return int(params["original_max_position_embeddings"])
    return declared


def untrained_head(model: Any, missing: tuple[str, ...]) -> list[str]:
    """The parameters of ``missing`` that hold no trained value (a tied copy of a loaded weight does)."""
    if not missing:
        return []
    by_id: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(name)
    missing_set = set(missing)
    tied = {n for names in by_id.values() if any(x not in missing_set for x in names) for n in names}
    return [n for n in missing if n not in tied]


def head_class_known(model_type: str, kind: str) -> bool:
    """True when transformers' Auto class of ``kind`` (``causal`` or ``masked``) has a class for ``model_type``.

    A posviz run is loaded with whatever ``posviz.models`` registers, so a causal run
    is scored as soon as a causal class is registered for its config.
    """
    import transformers
    from transformers import CONFIG_MAPPING

    import posviz.models  # noqa: F401  (registers posviz-trained models with the Auto classes)

    auto = getattr(transformers, "AutoModelForCausalLM" if kind == "causal" else "AutoModelForMaskedLM")
    try:
        config_class = CONFIG_MAPPING[model_type]
    except KeyError:
        return False
    return config_class in auto._model_mapping
