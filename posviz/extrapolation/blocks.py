"""The same text at every length: a fixed token budget, cut into blocks (or sliding windows) of each length.

The corpus is tokenized once per tokenizer by the block maker every text measure
shares (:func:`posviz.observe.corpus_blocks.make_token_blocks`), at the **longest**
length asked for and at most ``max_blocks`` blocks of it. Their text tokens, in order,
are the **budget**: the first ``N`` text tokens of the corpus, ``N = blocks × (L_max −
special tokens)``. Every length cuts that same stream, with the same special tokens
at the same places as ``posviz attention`` (``[CLS]`` at 0 and ``[SEP]`` at ``n − 1``,
or BOS at 0):

* non-overlapping blocks (default): ``⌊N / b⌋`` blocks of ``b = n − specials`` text
  tokens each; the last ``N mod b`` tokens (fewer than one block) are left out, so a
  shorter length covers the same text less at most ``b − 1`` tokens at its end;
* sliding windows of stride ``S`` (Press et al., 2022): windows start every ``S``
  text tokens; the first scores all its text, each later one only its last ``S``
  tokens (which it sees with ``b − S`` tokens of context), so every token of the
  covered text is scored once.

What is scored, per window:

* causal models: every scored text token at a position ``t ≥ 1``, predicted from the
  logits at ``t − 1`` (a token at position 0 has nothing to be predicted from);
* masked LMs: ``round(mask_rate × m)`` (at least one) of the window's ``m`` scored text
  tokens, replaced by the mask token and predicted there. The positions are drawn by
  ``numpy.random.default_rng([seed, n, S, w])`` for window ``w`` (``S = 0`` for
  non-overlapping blocks): they depend on the seed, the length and the window, not on
  the model, so every model with the same tokenizer layout is scored on the same
  masked positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from posviz.errors import OptionError, PosvizError


@dataclass(frozen=True)
class TextBudget:
    """The text every length is cut from: the first ``N`` text tokens of the corpus, and the special tokens around them.

    Attributes
    ----------
    tokens
        ``(N,)`` int64 text token ids (documents separated as the block maker does).
    prefix, suffix
        Special token ids before and after each block's text (``[CLS]`` / ``[SEP]``, BOS).
    layout
        One line saying which special tokens sit where.
    longest, blocks
        The longest length and the number of its blocks that make the budget.
    """

    tokens: np.ndarray
    prefix: tuple[int, ...]
    suffix: tuple[int, ...]
    layout: str
    longest: int
    blocks: int

    def body(self, length: int) -> int:
        """Text tokens in a block of ``length`` positions."""
        return length - len(self.prefix) - len(self.suffix)


def text_budget(tokenizer: Any, texts: Sequence[str], longest: int, max_blocks: int | None) -> TextBudget:
    """The first text tokens of ``texts``: at most ``max_blocks`` blocks of ``longest`` positions.

    Raises
    ------
    OptionError
        The corpus does not fill one block of the longest length.
    """
    from posviz.observe.corpus_blocks import make_token_blocks

    try:
        made = make_token_blocks(tokenizer, texts, longest, max_blocks)
    except PosvizError as e:
        raise OptionError(f"the corpus is too short for the longest length {longest}: {e.message}",
                          "give a larger corpus or shorter --lengths") from None
    special = set(made.special_positions)
    head = next(i for i in range(longest + 1) if i not in special)
    tail = next(i for i in range(longest + 1) if longest - 1 - i not in special)
    ids = made.ids
    return TextBudget(tokens=ids[:, head : longest - tail].reshape(-1).copy(), prefix=tuple(int(x) for x in ids[0, :head]),
                      suffix=tuple(int(x) for x in ids[0, longest - tail :]), layout=made.layout, longest=longest,
                      blocks=len(ids))


@dataclass(frozen=True)
class LengthBlocks:
    """What the model runs on at one length, and which tokens are scored.

    Attributes
    ----------
    inputs
        ``(windows, n)`` token ids given to the model (scored tokens masked for a masked LM).
    targets
        ``(windows, n)`` the original token ids.
    scored
        ``(windows, n)`` bool: the positions whose token counts in the loss.
    text_tokens
        Text tokens of the budget that the windows cover (from the start).
    stride
        ``None`` for non-overlapping blocks, else the sliding-window stride.
    """

    inputs: np.ndarray
    targets: np.ndarray
    scored: np.ndarray
    text_tokens: int
    stride: int | None

    @property
    def tokens(self) -> int:
        """Tokens scored."""
        return int(self.scored.sum())


def length_blocks(budget: TextBudget, length: int, *, objective: str | None, stride: int | None = None,
                  mask_rate: float = 0.15, mask_id: int | None = None, seed: int = 0) -> LengthBlocks:
    """Cut the budget into windows of ``length`` positions and choose the scored tokens (module docstring).

    Parameters
    ----------
    budget
        From :func:`text_budget`.
    length
        Positions per window, special tokens included.
    objective
        ``causal``, ``masked`` or ``None`` (nothing scored).
    stride
        ``None``: non-overlapping blocks; else sliding windows, each scoring its last ``stride`` text tokens.
    mask_rate, mask_id, seed
        Masked LMs: the share of scored text tokens masked, the mask token, the seed.

    Raises
    ------
    OptionError
        No room for text at this length, a stride longer than a window's text, or a
        budget shorter than one window.
    """
    b, pre = budget.body(length), len(budget.prefix)
    if b < 1:
        raise OptionError(f"length {length} leaves no position for text after the special tokens", "use longer --lengths")
    if stride is not None and not 1 <= stride <= b:
        raise OptionError(f"--stride {stride} must be between 1 and the {b} text tokens of a window of length {length}",
                          "use a smaller --stride or longer --lengths")
    n_text = len(budget.tokens)
    starts = np.arange(n_text // b) * b if stride is None else np.arange(0, n_text - b + 1, stride)
    if len(starts) == 0:
        raise OptionError(f"the token budget ({n_text} tokens) is shorter than one window of length {length}")
    windows = len(starts)
    targets = np.empty((windows, length), dtype=np.int64)
    targets[:, :pre] = budget.prefix
    targets[:, pre : pre + b] = budget.tokens[starts[:, None] + np.arange(b)[None, :]]
    if budget.suffix:
        targets[:, pre + b :] = budget.suffix
    new = np.zeros((windows, length), dtype=bool)  # text tokens each window is the one to score
    new[:, pre : pre + b] = True
    if stride is not None and windows > 1:
        new[1:, pre : pre + b - stride] = False
    inputs = targets.copy()
    if objective == "causal":
        scored = new.copy()
        scored[:, 0] = False
    elif objective == "masked":
        scored = _mask_positions(new, length, stride, mask_rate, seed)
        inputs[scored] = mask_id
    else:
        scored = np.zeros_like(new)
    return LengthBlocks(inputs=inputs, targets=targets, scored=scored, text_tokens=int(starts[-1] + b), stride=stride)


def _mask_positions(candidates: np.ndarray, length: int, stride: int | None, rate: float, seed: int) -> np.ndarray:
    """Per window, ``round(rate × m)`` (at least one) of its ``m`` candidate positions, drawn from its own seeded generator."""
    chosen = np.zeros_like(candidates)
    for w, row in enumerate(candidates):
        where = np.flatnonzero(row)
        k = max(1, int(round(rate * len(where))))
        rng = np.random.default_rng([seed, length, stride or 0, w])
        chosen[w, rng.choice(where, size=k, replace=False)] = True
    return chosen


def protocol(objective: str | None, stride: int | None, mask_rate: float, seed: int) -> str:
    """One line stating how the loss is computed."""
    windows = ("non-overlapping blocks" if stride is None else
               f"sliding windows of stride {stride}, each scoring its last {stride} text tokens (the first: all)")
    if objective == "causal":
        return f"causal: mean next-token NLL over every scored text token (nats); {windows}"
    if objective == "masked":
        return (f"masked LM: {mask_rate:.0%} of the scored text tokens of each window replaced by the mask token "
                f"(positions from seed {seed}, the length and the window; the same for every model), mean NLL over them "
                f"(nats); {windows}")
    return f"no loss: attention on the unmasked windows; {windows}"
