"""Sequence classification and regression on top of the posviz encoder (ALBERT's [CLS] pooling).

``PosvizForSequenceClassification`` is ``AlbertForSequenceClassification`` for the
posviz encoder: the first token's last hidden state goes through ALBERT's pooler
(dense + tanh), dropout and a linear classifier. A causal model (a run trained
with ``--objective causal``) keeps its causal mask, under which the first token
sees only itself: it pools the last real (non-padding) token instead, the one
that has seen the whole input, as transformers' classifiers of causal LMs
(``GPT2ForSequenceClassification``) do. Parameter names are
transformers' ALBERT's (``albert.pooler``, ``classifier``), so an
``AlbertForSequenceClassification`` state dict loads unchanged (absolute scheme) and a checkpoint of
``posviz train`` (``PosvizForMaskedLM``: ``albert.*`` and ``predictions.*``) loads
with its embeddings, encoder and positional modules kept and only the new head
initialised. ``num_labels == 1`` is regression (mean squared error), as for STS-B.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import SequenceClassifierOutput

from posviz.models.configuration_posviz import PosvizAlbertConfig
from posviz.models.modeling_posviz import PosvizModel, PosvizPreTrainedModel


def pooled_token(hidden: torch.Tensor, attention_mask: torch.Tensor | None, config: PosvizAlbertConfig) -> torch.Tensor:
    """The hidden state ``(B, hidden)`` a classifier reads: [CLS] (position 0), or the last real token of a causal model."""
    if not getattr(config, "is_causal", False):
        return hidden[:, 0]
    n = hidden.shape[1]
    if attention_mask is None:
        return hidden[:, n - 1]
    # the highest position whose mask is 1 (whichever side the padding is on)
    last = (attention_mask.to(torch.long) * torch.arange(1, n + 1, device=hidden.device)).argmax(dim=-1)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


class PosvizForSequenceClassification(PosvizPreTrainedModel):
    """The encoder with ALBERT's pooler and a linear classifier on the [CLS] token.

    Parameters
    ----------
    config
        The encoder's configuration; ``num_labels`` (1: regression) and
        ``classifier_dropout_prob`` (default: ``hidden_dropout_prob``) size the head.
    """

    def __init__(self, config: PosvizAlbertConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.albert = PosvizModel(config)
        # inside the encoder, where ALBERT keeps them (albert.pooler.*); the masked LM has no pooler
        self.albert.pooler = nn.Linear(config.hidden_size, config.hidden_size)
        self.albert.pooler_activation = nn.Tanh()
        p = getattr(config, "classifier_dropout_prob", None)
        self.dropout = nn.Dropout(config.hidden_dropout_prob if p is None else p)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.albert.embeddings.word_embeddings

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        labels: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput:
        """Logits ``(batch, num_labels)``; the loss when ``labels`` are given.

        Cross-entropy over integer labels, or mean squared error when
        ``num_labels == 1`` (float labels).
        """
        hidden = self.albert(input_ids, attention_mask, token_type_ids, position_ids).last_hidden_state
        pooled = self.albert.pooler_activation(self.albert.pooler(pooled_token(hidden, attention_mask, self.config)))
        logits = self.classifier(self.dropout(pooled))  # (B, num_labels)
        loss = None
        if labels is not None:
            if self.num_labels == 1:
                loss = F.mse_loss(logits.squeeze(-1).float(), labels.float())
            else:
                loss = F.cross_entropy(logits.float(), labels.view(-1).long())
        return SequenceClassifierOutput(loss=loss, logits=logits)
