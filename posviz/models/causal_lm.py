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

    #: The forward pass is the masked LM's (logits ``(batch, n, vocab)``; position ``i`` predicts token ``i + 1``),
    #: returning this, with :meth:`lm_loss` as its loss: ``labels`` are the input ids themselves (``-100`` where not
    #: scored, e.g. padding), shifted here.
    output_class = CausalLMOutput
    lm_loss = staticmethod(next_token_loss)
