"""The posviz model as a causal language model: the same body and head, the next token as the target.

:class:`PosvizForCausalLM` is :class:`~posviz.models.modeling_posviz.PosvizForMaskedLM`
(its subclass) with the config's ``is_causal`` set (query ``i`` sees keys ``j <= i``) and the
labels shifted inside the model, as Hugging Face causal LMs do: the logits at
position ``i`` are scored against the token at ``i + 1``. Module and parameter
names are those of the masked LM (``albert.*``, ``predictions.*``, the decoder
tied to the word embeddings), so both classes load each other's checkpoints.
Under the causal mask ALiBi is Press et al.'s causal ALiBi, T5 uses its
decoder's unidirectional buckets, and scheme ``none`` is NoPE. See ARCHITECTURE.md.
"""

from __future__ import annotations

import torch
from transformers.modeling_outputs import CausalLMOutput

from posviz.models.configuration_posviz import PosvizAlbertConfig
from posviz.models.modeling_posviz import PosvizForMaskedLM, token_loss


def next_token_loss(
    logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None
) -> torch.Tensor:
    """Cross-entropy of ``logits[:, i]`` against ``labels[:, i + 1]``, over labels ``!= -100``
    (:func:`~posviz.models.modeling_posviz.token_loss` of the shifted pair)."""
    return token_loss(logits[:, :-1], labels[:, 1:], num_items_in_batch)


class PosvizForCausalLM(PosvizForMaskedLM):
    """The masked LM's body and head under a causal mask; loss is the next-token cross-entropy.

    Parameters
    ----------
    config
        Its ``is_causal`` is set to ``True`` (a config saved by this class says so).
    """

    def __init__(self, config: PosvizAlbertConfig) -> None:
        config.is_causal = True
        super().__init__(config)

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        labels: torch.LongTensor | None = None,
        return_dict: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        **kwargs,
    ) -> CausalLMOutput:
        """Logits ``(batch, n, vocab)`` (position ``i`` predicts token ``i + 1``), and the loss when ``labels`` are given.

        ``labels`` are the input ids themselves (``-100`` where not scored, e.g.
        padding); the shift happens here. ``num_items_in_batch``: see
        :func:`next_token_loss`.
        """
        hidden = self.albert(input_ids, attention_mask, token_type_ids, position_ids).last_hidden_state
        logits = self.predictions(hidden)  # (B, n, vocab)
        loss = None if labels is None else next_token_loss(logits, labels, num_items_in_batch)
        return CausalLMOutput(loss=loss, logits=logits)
