"""Hugging Face models with a choice of positional scheme (absolute, TISA, TUPE, T5, ALiBi, RoPE, sinusoidal).

Importing this package registers ``model_type="posviz-albert"`` with ``AutoConfig``,
``AutoModel``, ``AutoModelForMaskedLM``, ``AutoModelForCausalLM`` and
``AutoModelForSequenceClassification``, so ``AutoModelForMaskedLM.from_pretrained``
(``AutoModelForCausalLM`` for a causal run, or the classification class, with a new
head) loads saved runs without ``trust_remote_code``.
"""

from __future__ import annotations

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
)

from posviz.models.causal_lm import PosvizForCausalLM
from posviz.models.classification import PosvizForSequenceClassification
from posviz.models.configuration_posviz import SCHEMES, SIZES, PosvizAlbertConfig, size_dimensions
from posviz.models.modeling_posviz import PosvizForMaskedLM, PosvizModel, PosvizPreTrainedModel
from posviz.models.position_terms import position_table, positional_scores

AutoConfig.register(PosvizAlbertConfig.model_type, PosvizAlbertConfig, exist_ok=True)
AutoModel.register(PosvizAlbertConfig, PosvizModel, exist_ok=True)
AutoModelForMaskedLM.register(PosvizAlbertConfig, PosvizForMaskedLM, exist_ok=True)
AutoModelForCausalLM.register(PosvizAlbertConfig, PosvizForCausalLM, exist_ok=True)
AutoModelForSequenceClassification.register(PosvizAlbertConfig, PosvizForSequenceClassification, exist_ok=True)

__all__ = [
    "SCHEMES",
    "SIZES",
    "size_dimensions",
    "PosvizAlbertConfig",
    "PosvizForCausalLM",
    "PosvizForMaskedLM",
    "PosvizForSequenceClassification",
    "PosvizModel",
    "PosvizPreTrainedModel",
    "position_table",
    "positional_scores",
]
