"""The block runner every text measure shares: a model, its chosen layers and the corpus cut into token blocks.

Every text pass (:mod:`posviz.observe.text_pass`) starts here: :func:`load_blocks`
loads the model once (:mod:`~posviz.observe.loading`), checks the block length
against it and cuts the corpus into blocks once (:mod:`~posviz.observe.corpus_blocks`);
:func:`choose_layers` checks each measure's layers; :func:`run_batches` then feeds
the blocks to one forward pass per batch, without gradients, on the device of the
model's first parameters. What each measure keeps from a forward pass is its own
observer's business.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from posviz.errors import OptionError
from posviz.observe.loading import LoadedModel
from posviz.observe.text_input import TextInput


@dataclass(frozen=True)
class BlockRun:
    """A loaded model with its chosen layers and the token blocks it will run over.

    Attributes
    ----------
    loaded
        The model and its tokenizer.
    layers
        Chosen layers, sorted (empty when each measure chooses its own: :func:`choose_layers`).
    ids
        ``(blocks, n)`` int64 token ids.
    layout
        Which special tokens sit where (one line for outputs).
    corpus
        The corpus, as named in outputs: its spec and the first 12 hex digits of its SHA-256.
    special_positions
        Positions holding the same special token in every block.
    eager_for
        The measures of the pass that read whole eager attention maps, for which the model was loaded with eager
        attention (:func:`posviz.observe.text_pass.observe_text`); the other measures run on it as it is.
    """

    loaded: LoadedModel
    layers: list[int]
    ids: np.ndarray
    layout: str
    corpus: str
    special_positions: tuple[int, ...]
    eager_for: tuple[str, ...] = ()

    @property
    def seq_len(self) -> int:
        """Positions per block."""
        return int(self.ids.shape[1])


def load_blocks(model: str, text: TextInput, *, attn_implementation: str | None = "eager") -> BlockRun:
    """Load ``model`` once and cut ``corpus`` once into blocks of ``seq_len`` tokens (layers are chosen per measure).

    Parameters
    ----------
    model
        Model folder, hub id, packaged model, ``RUN`` or ``RUN@STEP``.
    text
        The corpus or token blocks, and the device and tokenizer to load with.
    attn_implementation
        As :func:`posviz.observe.loading.load_model` (``None``: the model's default,
        for measures that do not read attention probabilities).

    Raises
    ------
    PosvizError
        A block longer than the model's position table (naming its length), a corpus that does not fill one block.
    """
    from posviz.observe.loading import load_model

    corpus, seq_len, token_blocks = text.corpus, text.seq_len, text.token_blocks
    loaded = load_model(model, device=text.device, device_map=text.device_map, tokenizer=text.tokenizer,
                        with_tokenizer=token_blocks is None, attn_implementation=attn_implementation)
    if token_blocks is not None:
        seq_len = int(np.shape(token_blocks)[1])
    table, trained = loaded.table_positions, loaded.trained_positions
    if table is not None and seq_len > table:
        raise OptionError(f"--seq-len {seq_len} is longer than the {table} positions of {loaded.label}'s learned table",
                          f"use --seq-len {table} or less")
    if trained is not None and seq_len > trained:  # a scheme without a table runs, but past what it was trained on
        warnings.warn(f"--seq-len {seq_len} is past the {trained} positions {loaded.label} was trained at: the statistics "
                      "describe extrapolation (posviz extrapolate measures it)", stacklevel=3)
    if token_blocks is not None:
        ids = np.asarray(token_blocks, dtype=np.int64)
        return BlockRun(loaded, [], ids, text.block_layout, "given token blocks", tuple(sorted(set(text.special_positions))))
    from posviz.observe.corpus_blocks import make_token_blocks
    from posviz.train.corpus import corpus_identity, load_corpus

    specs = [corpus] if isinstance(corpus, str) else list(corpus)
    texts = load_corpus(specs)
    blocks = make_token_blocks(loaded.tokenizer, texts, seq_len, text.max_blocks)
    label = f"{', '.join(specs)} (sha256 {corpus_identity(texts)['corpus_sha256'][:12]})"
    return BlockRun(loaded, [], blocks.ids, blocks.layout, label, blocks.special_positions)


def choose_layers(loaded: LoadedModel, layers: str | Sequence[int] | None, count: int) -> list[int]:
    """The layers a measure scores, sorted: ``"all"``, ``"0,2,5-7"``, a list of ints, or ``None`` (layer 0).

    Raises
    ------
    OptionError
        A layer outside ``0 .. count - 1`` (``count``: the layers the measure sees in ``loaded``).
    """
    from posviz.scoring.layers import parse_layers

    chosen = sorted(set(layers)) if isinstance(layers, (list, tuple)) else parse_layers(None, layers, count, loaded.label)
    if not chosen or any(not 0 <= x < count for x in chosen):
        raise OptionError(f"{loaded.label} has layers 0-{count - 1}, not {chosen}")
    return chosen


def run_batches(model: Any, blocks: np.ndarray, batch_size: int, forward: Callable[[Any], None],
                progress: Callable[[int], None] | None = None) -> int:
    """Call ``forward(ids)`` on each batch of ``blocks``, without gradients; returns the number of blocks run.

    Parameters
    ----------
    model
        The loaded model (its first parameter's device receives the ids).
    blocks
        ``(blocks, n)`` token ids.
    batch_size
        Blocks per forward pass.
    forward
        Runs the model on one ``(batch, n)`` tensor of ids and keeps what its measure needs.
    progress
        Called with the number of blocks done after each batch.
    """
    import torch

    first = next(model.parameters()).device
    done = 0
    with torch.inference_mode():
        for start in range(0, len(blocks), batch_size):
            ids = torch.as_tensor(blocks[start : start + batch_size]).to(first)
            forward(ids)
            done += int(ids.shape[0])
            if progress is not None:
                progress(done)
    return done
