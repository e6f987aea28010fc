"""``extrapolate`` as a point of a series: one checkpoint's held-out loss at ``n``, ``2n`` and ``4n`` positions.

``posviz trajectory RUN --measure extrapolate --seq-len N`` follows, along training, how the loss past a length
grows against the loss at it (when a scheme's length generalisation appears or breaks); ``posviz measure
extrapolate MODEL`` gives the same numbers for one model. Each point is one :func:`posviz.extrapolate` call on the
same text (the corpus cut into the same windows for every checkpoint), its attention statistics kept to layer 0.
A length a model cannot run (past a learned position table) is NaN, as ``posviz extrapolate`` records it.
"""

from __future__ import annotations

import math
from typing import Any

#: The lengths of a point, as multiples of ``--seq-len``.
FACTORS = (1, 2, 4)


def point(source: str, options: Any) -> dict[str, float]:
    """The loss of ``source`` at ``seq_len`` × :data:`FACTORS` positions (nats; NaN where it cannot run), and how much
    it grows from ``n`` to ``2n``.

    Parameters
    ----------
    source
        A checkpoint folder, ``RUN@STEP`` or hub id.
    options
        :class:`~posviz.measures.contract.SeriesOptions`: ``corpus`` (default: the packaged corpus), ``seq_len`` (n),
        ``max_blocks`` (windows of the longest length that make the text budget) and ``seed`` (masked LMs' masks).
    """
    from posviz.extrapolation.extrapolate import extrapolate
    from posviz.train.corpus import DEMO_CORPUS

    n = options.seq_len
    result = extrapolate(source, corpus=options.corpus or DEMO_CORPUS, lengths=[n * f for f in FACTORS], layers=[0],
                         max_blocks=options.max_blocks, seed=options.seed)
    loss = {r["length"]: (math.nan if r["loss"] is None else float(r["loss"])) for r in result.records()
            if r["variant"] == "unscaled"}
    values = {f"loss_{f}x": loss[n * f] for f in FACTORS}
    values["growth_2x"] = values["loss_2x"] - values["loss_1x"]
    return values
