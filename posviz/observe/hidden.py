"""``posviz.hidden(...)``: where position lives inside a model, layer by layer, from its hidden states on a corpus.

From a model and a corpus: load, cut the corpus into token blocks and run them once
(the text pass shared with ``posviz attention``, :mod:`posviz.observe.text_pass`;
:class:`~posviz.observe.hidden_pass.HiddenRequest` joins it), accumulate every
chosen layer's hidden states as streaming sums (:mod:`posviz.observe.hidden_sums`),
then per layer the positional vectors, their Toeplitzness, the positional share with
its null, their rank (:mod:`posviz.observe.hidden_statistics`) and linear position
probes on a sample of held-out blocks (:mod:`posviz.observe.probe`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from posviz.observe.hidden_result import FIELDS, HiddenResult
from posviz.train.corpus import DEMO_CORPUS

__all__ = ["FIELDS", "HiddenResult", "hidden"]

def hidden(
    model: str,
    *,
    corpus: str | Sequence[str] = DEMO_CORPUS,
    seq_len: int = 128,
    layers: str | Sequence[int] | None = "all",
    batch_size: int = 8,
    max_blocks: int | None = 256,
    device: str | None = None,
    device_map: str | None = None,
    tokenizer: str | None = None,
    token_blocks: np.ndarray | None = None,
    block_layout: str = "token blocks given",
    special_positions: Sequence[int] = (),
    probe_blocks: int = 64,
    probe_positions: int = 32,
    null_draws: int = 10,
    seed: int = 0,
    show_progress: bool = False,
) -> HiddenResult:
    """Run ``model`` over blocks of ``corpus`` and measure position in the hidden states of ``layers``.

    Parameters
    ----------
    model
        Model folder, hub id, packaged model, ``RUN`` or ``RUN@STEP``.
    corpus
        Corpus spec(s) as ``posviz train`` reads them: text files, folders, the demo
        corpus (:data:`~posviz.train.corpus.DEMO_CORPUS`) or a dataset id.
    seq_len
        Positions per block, special tokens included.
    layers
        ``"all"`` (default), ``"0,2,5-7"`` or a list of ints; 0 is the embedding output.
    batch_size
        Blocks per forward pass.
    max_blocks
        At most this many blocks (``None``: the whole corpus).
    device, device_map
        ``cpu``/``cuda``, or ``device_map="auto"`` (accelerate) for models larger than one device.
    tokenizer
        A tokenizer to use instead of the model's (or the run's).
    token_blocks
        Ready token ids ``(blocks, seq_len)`` instead of a corpus (``seq_len`` is then their width).
    block_layout, special_positions
        What sits where in ``token_blocks``; ``special_positions`` are left out.
    probe_blocks, probe_positions
        Size of the probes' sample: at most this many blocks, and positions per block.
    null_draws
        Row permutations of ``V`` for the spread of the Toeplitzness null.
    seed
        Seed of the null draws, the probe sample, its block split and its pairs.
    show_progress
        Draw a progress bar over blocks on stderr (when it is a terminal).

    Returns
    -------
    HiddenResult

    Raises
    ------
    PosvizError
        A corpus shorter than one block, a block longer than the model's position
        table, a layer that does not exist, a model that returns no hidden states.

    Examples
    --------
    >>> r = posviz.hidden("sentence-transformers/all-MiniLM-L6-v2", corpus="docs.txt", seq_len=64)  # doctest: +SKIP
    >>> r.to_frame()[["layer", "positional_share", "toeplitzness_offdiag", "probe_mae"]]  # doctest: +SKIP
    """
    from posviz.observe.hidden_pass import HiddenRequest
    from posviz.observe.text_pass import observe_text

    request = HiddenRequest(layers=layers, probe_blocks=probe_blocks, probe_positions=probe_positions,
                            null_draws=null_draws, seed=seed)
    return observe_text(model, [request], corpus=corpus, seq_len=seq_len, batch_size=batch_size, max_blocks=max_blocks,
                        device=device, device_map=device_map, tokenizer=tokenizer, token_blocks=token_blocks,
                        block_layout=block_layout, special_positions=special_positions,
                        show_progress=show_progress)["hidden"]
