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
from typing import Any

from posviz.observe.hidden_result import FIELDS, HiddenResult
from posviz.observe.text_input import TextInput

__all__ = ["FIELDS", "HiddenResult", "hidden"]


def hidden(
    model: str,
    *,
    layers: str | Sequence[int] | None = "all",
    probe_blocks: int = 64,
    probe_positions: int = 32,
    null_draws: int = 10,
    seed: int = 0,
    text: TextInput | None = None,
    **options: Any,
) -> HiddenResult:
    """Run ``model`` over blocks of ``corpus`` and measure position in the hidden states of ``layers``.

    Parameters
    ----------
    model
        Model folder, hub id, packaged model, ``RUN`` or ``RUN@STEP``.
    layers
        ``"all"`` (default), ``"0,2,5-7"`` or a list of ints; 0 is the embedding output.
    probe_blocks, probe_positions
        Size of the probes' sample: at most this many blocks, and positions per block.
    null_draws
        Row permutations of ``V`` for the spread of the Toeplitzness null.
    seed
        Seed of the null draws, the probe sample, its block split and its pairs.
    text, **options
        The text and how it runs (the corpus, ``seq_len``, ``batch_size``, ``max_blocks``, the device, the
        tokenizer, ready ``token_blocks``, ``show_progress``): a :class:`~posviz.observe.text_input.TextInput`, or its
        fields as keywords, as every text measure takes them.

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
    return observe_text(model, [request], text, **options)["hidden"]
