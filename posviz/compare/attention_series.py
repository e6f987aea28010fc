"""Checkpoint series measured on text: data-based Toeplitzness of attention along training (``posviz trajectory --measure attention``).

Every checkpoint runs over the same token blocks: the corpus is tokenized once,
with the first checkpoint's tokenizer (a run's ``tokenizer/``, or the model's), so
that a change along the series is the model's, not the data's. Each row is one
checkpoint: the means over the chosen layers' heads of the fields of ``posviz
attention`` (Toeplitzness of the mean attention with its row-shuffle null,
positional share with its null; on the tiled path also the normalised entropy, the spans holding 50 % and 90 %
of a query's attention, and the sink rate), their spread over heads, and every head's value.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from posviz.compare.series import SeriesPoint

#: Per-head fields averaged into a checkpoint's row.
FIELDS = ("toeplitzness_offdiag", "null_mean_offdiag", "toeplitzness", "null_mean", "positional_share",
          "positional_share_null", "sink_mass")
#: Per-head fields of the tiled path (transformers 5), averaged where the records have them; with ``sink_rate``, the
#: share of all the chosen heads whose sink mass exceeds the records' ``sink_rate_eps``.
LONG_CONTEXT_FIELDS = ("entropy_normalised", "span50", "span90")


def _tokenizer_for(spec: str) -> str | None:
    """A run's ``tokenizer/`` for one of its ``checkpoint-N`` folders (checkpoints do not hold one)."""
    folder = Path(spec)
    candidate = folder.parent / "tokenizer"
    return str(candidate) if folder.is_dir() and candidate.is_dir() else None


def series_blocks(points: Sequence[SeriesPoint], corpus: str | Sequence[str], seq_len: int,
                  max_blocks: int | None) -> tuple[Any, str]:
    """The one set of token blocks every checkpoint of a series runs over, and the corpus's SHA-256.

    The corpus is tokenized once, with the first checkpoint's tokenizer (a run's ``tokenizer/``
    for its checkpoints), so that every step sees the same blocks.
    """
    from posviz.observe.corpus_blocks import make_token_blocks
    from posviz.observe.loading import load_tokenizer
    from posviz.train.corpus import corpus_identity, load_corpus

    first = points[0].spec
    tok = load_tokenizer(first, _tokenizer_for(first))
    texts = load_corpus([corpus] if isinstance(corpus, str) else list(corpus))
    return make_token_blocks(tok, texts, seq_len, max_blocks), corpus_identity(texts)["corpus_sha256"]


def attention_series_rows(points: Sequence[SeriesPoint], *, corpus: str, seq_len: int, layers: str = "all",
                          max_blocks: int | None = 64, batch_size: int = 8) -> list[dict[str, Any]]:
    """One row per checkpoint, sorted by step then series, measured on one fixed set of token blocks.

    Parameters
    ----------
    points
        From :func:`posviz.compare.series.series_points` or ``revision_points``.
    corpus, seq_len, max_blocks, batch_size
        As :func:`posviz.observe.api.attention`.
    layers
        Layers whose heads are averaged (``all``, ``0``, ``0,2-3``).
    """
    from posviz.observe.api import attention
    from posviz.util.progress import progress

    blocks, corpus_sha256 = series_blocks(points, corpus, seq_len, max_blocks)
    rows = []
    for p in progress(list(points), "checkpoint"):
        result = attention(p.spec, token_blocks=blocks.ids, block_layout=blocks.layout, layers=layers,
                           batch_size=batch_size)
        records = result.records()
        row: dict[str, Any] = {"model": p.spec, "series": p.series, "step": p.step, "measure": "attention",
                               "corpus": corpus, "corpus_sha256": corpus_sha256, "positions": result.seq_len, "blocks": result.blocks,
                               "layers": ",".join(map(str, result.layers)), "heads": len(records), "causal": result.causal}
        for name in FIELDS + tuple(f for f in LONG_CONTEXT_FIELDS if f in records[0]):
            values = np.array([r[name] for r in records], dtype=float)
            row[name] = float(values.mean())
            row[f"{name}_sd_over_heads"] = float(values.std())
        if "sink" in records[0]:
            row["sink_rate"] = float(np.mean([r["sink"] for r in records]))
            row["sink_rate_eps"] = records[0]["sink_rate_eps"]
        for name, null in (("toeplitzness_offdiag", "null_mean_offdiag"), ("toeplitzness", "null_mean")):
            suffix = name.removeprefix("toeplitzness")
            row["excess" + suffix] = (row[name] - row[null]) / (1 - row[null]) if row[null] < 1 else float("nan")
        for r in records:
            row[f"toeplitzness_offdiag_l{r['layer']}_h{r['head']}"] = r["toeplitzness_offdiag"]
        rows.append(row)
    rows.sort(key=lambda r: (r["step"], r["series"]))
    return rows
