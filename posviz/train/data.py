"""From corpus to datasets: token blocks, the held-out split, the data fingerprint.

A run's data is built in three steps, put together by :func:`prepare_run_data`
(see ARCHITECTURE.md):

1. :func:`tokenize_corpus`: the corpus (:mod:`posviz.train.corpus`) and the
   tokenizer (:mod:`posviz.train.tokenizer`: the run folder's own, the one given,
   or one trained on the corpus), then fixed-length blocks starting with ``[CLS]``
   (:func:`make_blocks`);
2. :func:`split_blocks`: a held-out set chosen with a fixed seed (:data:`SPLIT_SEED`,
   not the run's ``--seed``, so runs share one evaluation set) and masked once
   (causal-LM runs: labelled for next-token prediction)
   (:func:`posviz.train.collate.mask_once`); the rest is the training set, or the
   share ``--train-fraction`` of it (:func:`training_subset`);
3. :func:`fingerprint`: a hash of the blocks, recorded in ``run.json`` with the
   corpus's own hash (:func:`posviz.train.corpus.corpus_identity`), so that
   ``--resume`` refuses a changed corpus or tokenizer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from posviz.errors import PosvizError

if TYPE_CHECKING:
    from posviz.train.collate import Blocks
    from posviz.train.options import TrainOptions

SPLIT_SEED = 0  # held-out split and its masking do not depend on --seed: runs share one eval set
SUBSET_SEED = 1  # --train-fraction's subset does not depend on --seed either: seeds differ by initialisation and order only


class RunData(NamedTuple):
    """A run's tokenizer, its training and held-out sets, and the contents of ``run.json``."""

    tokenizer: Any
    train_set: Blocks
    eval_set: Blocks
    info: dict[str, Any]


def prepare_run_data(options: TrainOptions, *, resume: bool, main: bool = True, world_size: int = 1) -> RunData:
    """The data of a run; the main process also writes the run folder's first files.

    The main process builds the tokenizer and the blocks (:func:`tokenize_corpus`),
    checks that a resumed run's data did not change, and writes ``run.json`` and
    ``tokenizer/`` (:func:`posviz.train.run_folder.start_run_folder`). The other
    processes of a ``torchrun`` launch run this afterwards
    (:func:`posviz.train.processes.main_first`): they read the main process's
    tokenizer and check that they built the same blocks.

    Parameters
    ----------
    options
        The run's options.
    resume
        The run continues from a checkpoint.
    main
        This is the main process (the only one that writes).
    world_size
        Number of processes; recorded in ``run.json`` with the global batch size.
    """
    from posviz.train import run_folder as folder

    tokenizer, blocks, corpus = tokenize_corpus(options, options.out / folder.TOKENIZER_DIR)
    train_set, eval_set = split_blocks(tokenizer, blocks, options.max_eval_blocks, options.train_fraction, options.objective)
    info = {**options.to_json(), **corpus, "data_fingerprint": fingerprint(blocks), "train_blocks": len(train_set),
            "eval_blocks": len(eval_set), "world_size": world_size, "global_batch_size": world_size * options.batch_size}
    if resume or not main:
        folder.check_same_data(options.out, info)
    if main:
        if resume:
            folder.warn_changed_processes(options.out, world_size)
        folder.start_run_folder(options.out, info, tokenizer)  # all checks passed: the first files of the run
    return RunData(tokenizer, train_set, eval_set, info)


def tokenize_corpus(options: TrainOptions, tokenizer_dir: Path) -> tuple[Any, Any, dict[str, Any]]:
    """The run's tokenizer, its token blocks ``(num_blocks, seq_len)`` and what the corpus was.

    The third item is :func:`posviz.train.corpus.corpus_identity` of the text read
    (its SHA-256, number of documents and size), recorded in ``run.json``.

    Parameters
    ----------
    options
        The run's options (corpus, tokenizer, vocabulary size, block length).
    tokenizer_dir
        The run folder's tokenizer; used when it exists (a resumed run), so that
        the blocks are those the run started with.

    Raises
    ------
    PosvizError
        If the corpus fills fewer than 4 blocks.
    """
    from posviz.train.corpus import corpus_identity, load_corpus
    from posviz.train.tokenizer import load_tokenizer, train_tokenizer

    texts = load_corpus(options.corpus)
    if tokenizer_dir.is_dir():
        tokenizer = load_tokenizer(str(tokenizer_dir))
    elif options.tokenizer:
        tokenizer = load_tokenizer(options.tokenizer)
    else:
        tokenizer = train_tokenizer(texts, options.vocab_size, options.seq_len)
    blocks = make_blocks(tokenizer, texts, options.seq_len)
    if len(blocks) < 4:
        raise PosvizError(
            f"the corpus is too small: {len(blocks)} block(s) of {options.seq_len} tokens",
            "add text or lower --seq-len",
        )
    return tokenizer, blocks, corpus_identity(texts)


def split_blocks(tokenizer: Any, blocks, max_eval_blocks: int, train_fraction: float = 1.0,
                 objective: str = "mlm") -> tuple[Blocks, Blocks]:
    """Training and held-out sets: 5% of the blocks (at most ``max_eval_blocks``) held out, masked once.

    ``train_fraction`` below 1 keeps that share of the training blocks
    (:func:`training_subset`); the held-out set does not change with it. For
    ``objective="causal"`` the same held-out blocks are labelled for next-token
    prediction instead of masked (:func:`posviz.train.collate.causal_eval_set`).

    Returns
    -------
    train_set, eval_set
        Both keep the blocks' corpus order; the held-out set carries its labels.
    """
    import numpy as np
    import torch

    from posviz.train.collate import Blocks, causal_eval_set, mask_once

    order = np.random.default_rng(SPLIT_SEED).permutation(len(blocks))
    n_eval = min(max_eval_blocks, max(1, len(blocks) // 20))
    held_out = blocks[np.sort(order[:n_eval])]
    eval_set = causal_eval_set(tokenizer, held_out) if objective == "causal" else mask_once(tokenizer, held_out)
    train_rows = np.sort(order[n_eval:])
    train_set = Blocks(torch.as_tensor(blocks[train_rows[training_subset(len(train_rows), train_fraction)]]))
    return train_set, eval_set


def training_subset(n: int, fraction: float):
    """Indices (sorted) of the share ``fraction`` of ``n`` training blocks, at least one.

    A fixed random order (:data:`SUBSET_SEED`) cut at ``ceil(fraction * n)``: the same
    for every run seed, and a smaller fraction's subset lies inside a larger one's.
    """
    import math

    import numpy as np

    order = np.random.default_rng(SUBSET_SEED).permutation(n)
    return np.sort(order[: max(1, math.ceil(fraction * n))])


def fingerprint(blocks) -> str:
    """A short hash of the token blocks (changes with the corpus or the tokenizer)."""
    return hashlib.sha256(blocks.tobytes()).hexdigest()[:16]


def make_blocks(tokenizer: Any, texts: Sequence[str], seq_len: int):
    """Token blocks ``(num_blocks, seq_len)``: ``[CLS]`` + ``seq_len - 2`` tokens + ``[SEP]``.

    Documents are tokenized without special tokens and concatenated with
    ``[SEP]`` between them; the remainder shorter than a block is dropped. Every
    block starts with ``[CLS]`` at position 0 (TUPE's untie relies on it).
    """
    import numpy as np

    ids = tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]
    sep, cls = tokenizer.sep_token_id, tokenizer.cls_token_id
    lengths = np.array([len(x) + 1 for x in ids], dtype=np.int64)
    stream = np.empty(int(lengths.sum()), dtype=np.int64)
    pos = 0
    for x in ids:
        stream[pos : pos + len(x)] = x
        stream[pos + len(x)] = sep
        pos += len(x) + 1
    body = seq_len - 2
    count = len(stream) // body
    blocks = np.empty((count, seq_len), dtype=np.int64)
    blocks[:, 0] = cls
    blocks[:, 1:-1] = stream[: count * body].reshape(count, body)
    blocks[:, -1] = sep
    return blocks
