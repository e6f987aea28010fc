"""Hugging Face models with a choice of positional scheme (absolute, TISA, TUPE, T5, ALiBi).

Importing this package registers ``model_type="posviz-albert"`` with ``AutoConfig``,
``AutoModel``, ``AutoModelForMaskedLM`` and ``AutoModelForSequenceClassification``, so
``AutoModelForMaskedLM.from_pretrained`` (or the classification class, with a new head)
loads saved runs without ``trust_remote_code``.
"""

from __future__ import annotations

from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification

from posviz.models.classification import PosvizForSequenceClassification
from posviz.models.configuration_posviz import SCHEMES, SIZES, PosvizAlbertConfig
from posviz.models.modeling_posviz import PosvizForMaskedLM, PosvizModel, PosvizPreTrainedModel
from posviz.models.position_terms import position_table, positional_scores

AutoConfig.register(PosvizAlbertConfig.model_type, PosvizAlbertConfig, exist_ok=True)
AutoModel.register(PosvizAlbertConfig, PosvizModel, exist_ok=True)
AutoModelForMaskedLM.register(PosvizAlbertConfig, PosvizForMaskedLM, exist_ok=True)
AutoModelForSequenceClassification.register(PosvizAlbertConfig, PosvizForSequenceClassification, exist_ok=True)

__all__ = [
    "SCHEMES",
    "SIZES",
    "PosvizAlbertConfig",
    "PosvizForMaskedLM",
    "PosvizForSequenceClassification",
    "PosvizModel",
    "PosvizPreTrainedModel",
    "position_table",
    "positional_scores",
]
