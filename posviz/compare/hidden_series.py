"""Checkpoint series measured on text: where position lives, layer by layer, along training (``posviz trajectory --measure hidden``).

As for ``--measure attention`` (:mod:`posviz.compare.attention_series`), every
checkpoint runs over the same token blocks, tokenized once with the first
checkpoint's tokenizer, so that a change along the series is the model's. Each row
is one (checkpoint, layer): the fields of ``posviz hidden`` (positional share and its
null, Toeplitzness of ``P_l = V_l V_lᵀ`` and its null, rank, probes), with the series
named ``SERIES · layer L`` so that each layer is one line of the figure.

Under ``torchrun`` the checkpoints are shared out across the processes (process r
takes checkpoints r, r + W, ...); each process measures its own on the same blocks,
and every process receives every row (:func:`posviz.train.collectives.all_gather_objects`), so the merged table
equals the single-process one. The command's main process writes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from posviz.compare.attention_series import series_blocks
from posviz.compare.series import SeriesPoint


def hidden_series_rows(points: Sequence[SeriesPoint], *, corpus: str | Sequence[str], seq_len: int, layers: str = "all",
                       max_blocks: int | None = 64, batch_size: int = 8, probe_blocks: int = 64,
                       seed: int = 0) -> list[dict[str, Any]]:
    """One row per checkpoint and layer, sorted by step then series, measured on one fixed set of token blocks.

    Parameters
    ----------
    points
        From :func:`posviz.compare.series.series_points` or ``revision_points``.
    corpus, seq_len, max_blocks, batch_size, probe_blocks, seed
        As :func:`posviz.observe.hidden.hidden`.
    layers
        Layers to measure (``all``, ``0``, ``0,2-3``; 0 is the embedding output).
    """
    from posviz.observe.hidden import hidden
    from posviz.train.processes import process_rank, world_size
    from posviz.util.progress import progress

    specs = [corpus] if isinstance(corpus, str) else list(corpus)
    blocks, corpus_sha256 = series_blocks(points, specs, seq_len, max_blocks)
    rank, world = process_rank(), world_size()
    mine = list(points)[rank::world]
    rows = []
    for p in (progress(mine, "checkpoint") if rank == 0 else mine):
        result = hidden(p.spec, token_blocks=blocks.ids, block_layout=blocks.layout, special_positions=blocks.special_positions,
                        layers=layers, batch_size=batch_size, probe_blocks=probe_blocks, seed=seed)
        for rec in result.records():
            rows.append({**rec, "model": p.spec, "series": f"{p.series} · layer {rec['layer']}", "run": p.series,
                         "step": p.step, "measure": "hidden", "corpus": ", ".join(specs),
                         "corpus_sha256": corpus_sha256})
    if world > 1:
        rows = _gathered(rows)
    rows.sort(key=lambda r: (r["step"], r["run"], r["layer"]))
    return rows


def _gathered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every process's rows, in every process (a gloo group started here if none is)."""
    import torch.distributed as dist

    from posviz.train.collectives import all_gather_objects

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    return [row for part in all_gather_objects(rows) for row in part]
