"""From a corpus to token blocks of ``n`` positions, with the model's special tokens at fixed positions.

Documents are tokenized without special tokens and concatenated, with a separator
between documents; the stream is cut into consecutive blocks and the remainder
shorter than a block is dropped. What each block holds depends on the tokenizer:

* ``[CLS]`` and ``[SEP]`` (BERT, RoBERTa's ``<s>``/``</s>``, ALBERT, posviz runs):
  ``[CLS]`` at position 0, ``n - 2`` text tokens, ``[SEP]`` at position ``n - 1``;
  documents separated by ``[SEP]`` — the shape of a pre-training input;
* else a BOS token (GPT-2, LLaMA, BLOOM): BOS at position 0, ``n - 1`` text tokens;
  documents separated by EOS (or BOS);
* else (T5): ``n`` text tokens, documents separated by EOS.

Special tokens are kept and counted as positions: attention to them (the
``[CLS]``/BOS "sink" at position 0 in particular) is part of what is measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from posviz.errors import PosvizError


@dataclass(frozen=True)
class TokenBlocks:
    """Blocks of token ids and what their fixed positions hold.

    Attributes
    ----------
    ids
        ``(blocks, n)`` int64 token ids.
    layout
        One line saying which special tokens sit where (for outputs).
    special_positions
        The positions that hold the same special token in every block (``[CLS]``, ``[SEP]``, BOS).
    """

    ids: np.ndarray
    layout: str
    special_positions: tuple[int, ...] = ()


def _special(tokenizer: Any) -> tuple[list[int], list[int], int | None, str]:
    """Prefix ids, suffix ids, separator id and a description of the layout."""
    cls, sep = getattr(tokenizer, "cls_token_id", None), getattr(tokenizer, "sep_token_id", None)
    bos, eos = getattr(tokenizer, "bos_token_id", None), getattr(tokenizer, "eos_token_id", None)
    if cls is not None and sep is not None:
        return [cls], [sep], sep, f"{tokenizer.cls_token} at position 0 and {tokenizer.sep_token} at position n-1"
    if bos is not None:
        return [bos], [], eos if eos is not None else bos, f"{tokenizer.bos_token} at position 0"
    return [], [], eos, "no special token at a fixed position"


def make_token_blocks(tokenizer: Any, texts: Sequence[str], seq_len: int, max_blocks: int | None = None) -> TokenBlocks:
    """Token blocks ``(blocks, seq_len)`` of ``texts`` (see the module docstring for the layout).

    Documents are tokenized in order only until ``max_blocks`` blocks are filled.

    Raises
    ------
    PosvizError
        The corpus does not fill one block, or ``seq_len`` leaves no room for text.
    """
    prefix, suffix, separator, layout = _special(tokenizer)
    body = seq_len - len(prefix) - len(suffix)
    if body < 1:
        raise PosvizError(f"--seq-len {seq_len} leaves no position for text", "use a longer --seq-len")
    need = None if max_blocks is None else max_blocks * body
    stream: list[int] = []
    chunk = 64
    for start in range(0, len(texts), chunk):
        batch = list(texts[start : start + chunk])
        for ids in tokenizer(batch, add_special_tokens=False, verbose=False)["input_ids"]:
            stream += ids
            if separator is not None:
                stream.append(separator)
        if need is not None and len(stream) >= need:
            break
    count = len(stream) // body if max_blocks is None else min(len(stream) // body, max_blocks)
    if count < 1:
        raise PosvizError(f"the corpus holds {len(stream)} tokens, fewer than one block of {body} text tokens",
                          "give a larger corpus or a shorter --seq-len")
    ids = np.empty((count, seq_len), dtype=np.int64)
    ids[:, : len(prefix)] = prefix
    ids[:, len(prefix) : len(prefix) + body] = np.asarray(stream[: count * body], dtype=np.int64).reshape(count, body)
    if suffix:
        ids[:, -len(suffix) :] = suffix
    fixed = (*range(len(prefix)), *range(seq_len - len(suffix), seq_len))
    return TokenBlocks(ids=ids, layout=layout, special_positions=fixed)
