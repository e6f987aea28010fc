"""What a model is scored on: read from its config.

* **Objective.** A ``posviz train`` run is causal exactly when its config says so
  (``objective == "causal"``, ``is_causal`` or ``is_decoder``), else a masked LM. A
  Hugging Face model is causal when its ``model_type`` has a causal-LM class and
  either no masked-LM class or ``is_decoder`` set (GPT-2, LLaMA, BLOOM; a BERT built
  as a decoder), a masked LM when it has a masked-LM class (BERT, RoBERTa, ALBERT),
  and has no language-model loss otherwise (encoder-decoders such as T5, whose
  encoder still runs for the attention statistics).
* **Table and training length** live with the other length rules in
  :mod:`posviz.observe.lengths`, shared with ``posviz attention`` and ``posviz hidden``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


def loss_plan(config: Mapping[str, Any], tokenizer: Any = None) -> tuple[str | None, str | None, str | None]:
    """``(objective, head to load, why there is no loss)`` for a model with this config dict and tokenizer (None:
    not known yet; a masked LM then plans for its mask token)."""
    kind = objective(config)
    model_type = str(config.get("model_type", ""))
    if kind is None:
        return None, None, f"no language-model objective for model_type {model_type!r} (encoder-decoder or encoder only)"
    if not head_class_known(model_type, kind):
        return kind, None, f"transformers has no {kind}-LM class for model_type {model_type!r}"
    if kind == "masked" and tokenizer is not None and getattr(tokenizer, "mask_token_id", None) is None:
        return kind, None, "the tokenizer has no mask token"
    return kind, HEADS[kind], None


def lm_head(config: Mapping[str, Any]) -> str | None:
    """The head :func:`posviz.observe.loading.load_model` loads for scoring a model with this config dict, or ``None``
    (no language-model objective, or no class for it): the ``head_for`` of a session that also scores logits
    (:func:`posviz.observe.shared_models.shared_models`)."""
    return loss_plan(config)[1]
