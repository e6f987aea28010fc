"""Batches for training: the blocks dataset, the seeded MLM collator, the held-out set masked once; causal-LM labels.

Masking is transformers' :class:`~transformers.DataCollatorForLanguageModeling`
(15% of the tokens; of those 80% ``[MASK]``, 10% random, 10% kept). posviz
seeds it per batch so that a resumed run masks exactly as an uninterrupted one,
and masks the held-out set once so that every evaluation of every run scores
the same tokens. A causal-LM run (``--objective causal``) needs no randomness:
its labels are the input ids (what ``DataCollatorForLanguageModeling(mlm=False)``
gives), shifted inside the model (see ARCHITECTURE.md).
"""

from __future__ import annotations

import hashlib
from typing import Any

MLM_PROBABILITY = 0.15
EVAL_MASK_SEED = 1234


class Blocks:
    """A map-style dataset of token blocks: fixed labels (held-out set) or the block index (training).

    Parameters
    ----------
    input_ids
        Token ids, ``(num_blocks, seq_len)`` (a tensor).
    labels
        Labels of a pre-masked set (``-100`` where not masked), same shape; ``None``
        for training blocks, whose items carry their index for the collator's seed.
    """

    def __init__(self, input_ids, labels=None) -> None:
        self.input_ids = input_ids
        self.labels = labels

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self.labels is not None:
            return {"input_ids": self.input_ids[i], "labels": self.labels[i]}
        return {"input_ids": self.input_ids[i], "index": i}


def batch_seed(seed: int, indices: list[int]) -> int:
    """A 63-bit seed for masking one batch, from the run seed and the batch's block indices."""
    import numpy as np

    digest = hashlib.blake2b(np.asarray([seed, *indices], dtype=np.int64).tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


class MlmCollator:
    """Masks training batches with ``DataCollatorForLanguageModeling``; held-out batches pass through.

    Each training batch is masked under its own seed, derived from the run seed
    and the batch's block indices (:func:`batch_seed`), inside
    ``torch.random.fork_rng`` so the global RNG is never touched. Masking is
    therefore dynamic (blocks are reshuffled every epoch) yet reproducible after
    ``--resume``, whatever order Trainer restores RNG states and prefetches
    batches in.

    Parameters
    ----------
    tokenizer
        The run's tokenizer (its ``[MASK]`` id and vocabulary size).
    seed
        The run seed.
    mlm_probability
        Share of tokens selected for prediction.
    """

    def __init__(self, tokenizer: Any, seed: int = 0, mlm_probability: float = MLM_PROBABILITY) -> None:
        from transformers import DataCollatorForLanguageModeling

        self.mlm = DataCollatorForLanguageModeling(tokenizer, mlm_probability=mlm_probability)
        self.seed = seed

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        if "labels" in examples[0]:
            return {k: torch.stack([e[k] for e in examples]) for k in ("input_ids", "labels")}
        indices = [int(e["index"]) for e in examples]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(batch_seed(self.seed, indices))
            return self.mlm([{"input_ids": e["input_ids"]} for e in examples])


def mask_once(tokenizer: Any, blocks, seed: int = EVAL_MASK_SEED) -> Blocks:
    """Mask blocks once under a fixed seed (the held-out set; the global RNG is left untouched)."""
    import torch

    ids = torch.as_tensor(blocks)
    batch = MlmCollator(tokenizer, seed)([{"input_ids": b, "index": i} for i, b in enumerate(ids)])
    return Blocks(batch["input_ids"], batch["labels"])


def causal_labels(input_ids, pad_token_id: int | None):
    """Labels of a causal-LM batch ``(B, n)``: the input ids, ``-100`` on padding and at position 0.

    Position 0 ([CLS]) is never a next-token target (the model scores ``logits[:, i]``
    against ``labels[:, i + 1]``); marking it ``-100`` makes the count of scored
    tokens the same whether ``Trainer`` counts ``labels`` or ``labels[:, 1:]``
    (transformers versions differ), so the loss under gradient accumulation does not
    depend on the version.
    """
    labels = input_ids.clone()
    if pad_token_id is not None:
        labels[input_ids == pad_token_id] = -100
    labels[:, 0] = -100
    return labels


class CausalCollator:
    """Next-token batches: ``input_ids`` and their :func:`causal_labels`; held-out batches pass through.

    Parameters
    ----------
    tokenizer
        The run's tokenizer (its padding id).
    """

    def __init__(self, tokenizer: Any) -> None:
        self.pad_token_id = tokenizer.pad_token_id

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        ids = torch.stack([e["input_ids"] for e in examples])
        if "labels" in examples[0]:
            return {"input_ids": ids, "labels": torch.stack([e["labels"] for e in examples])}
        return {"input_ids": ids, "labels": causal_labels(ids, self.pad_token_id)}


def causal_eval_set(tokenizer: Any, blocks) -> Blocks:
    """The held-out blocks of a causal-LM run with their :func:`causal_labels` (every next token is scored)."""
    import torch

    ids = torch.as_tensor(blocks)
    return Blocks(ids, causal_labels(ids, tokenizer.pad_token_id))
