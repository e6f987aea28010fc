"""Checkpoint series measured on text: attention and hidden states along training, on one pass per checkpoint.

``posviz trajectory --measure attention``, ``--measure hidden`` and ``--measure attention,hidden``. Every
checkpoint runs over the same token blocks: the corpus is tokenized once, with the first checkpoint's tokenizer (a
run's ``tokenizer/``, or the model's), so that a change along the series is the model's, not the data's. Each
checkpoint is loaded once and runs one pass over the blocks for every measure asked for
(:func:`posviz.observe.text_pass.observe_text`).

* ``attention``: one row per checkpoint: the means over the chosen layers' heads of the fields of ``posviz
  attention`` (Toeplitzness of the mean attention with its row-shuffle null, positional share with its null; on the
  tiled path also the normalised entropy, the spans holding 50 % and 90 % of a query's attention, and the sink
  rate), their spread over heads, and every head's value.
* ``hidden``: one row per (checkpoint, layer): the fields of ``posviz hidden`` (positional share and its null,
  Toeplitzness of ``P_l = V_l V_lᵀ`` and its null, rank, probes), with the series named ``SERIES · layer L`` so
  that each layer is one line of the figure.

Under ``torchrun`` the checkpoints are shared out across the processes (process r takes checkpoints r, r + W, ...);
each process measures its own on the same blocks, and every process receives every row
(:func:`posviz.train.collectives.all_gather_objects`), so the merged table equals the single-process one. The
command's main process writes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from posviz.series.points import SeriesPoint


def on_one_pass(name: str) -> bool:
    """Whether the measure called ``name`` can take part in one pass over text: a registered measure with a text-pass
    ``request`` (``attention``, ``hidden``, ``state-norms``, another package's)."""
    from posviz.measures import get_measure

    return get_measure(name).request is not None


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


def text_series_rows(points: Sequence[SeriesPoint], measures: Sequence[str], *, corpus: str | Sequence[str], seq_len: int,
                     layers: str = "all", max_blocks: int | None = 64, batch_size: int = 8,
                     seed: int = 0) -> dict[str, list[dict[str, Any]]]:
    """Rows of each of ``measures``, from one pass per checkpoint on one set of blocks.

    Parameters
    ----------
    points
        From :func:`posviz.series.points.series_points` or ``revision_points``.
    measures
        Measures of the registry with a text-pass ``request`` (``attention``, ``hidden``, ``state-norms``, another
        package's): their own ``rows`` of each checkpoint, else one row of the series point (``series``, ``step``)
        and the measure's ``values``.
    corpus, seq_len, max_blocks, batch_size, seed
        As :func:`posviz.observe.attention.attention` and :func:`posviz.observe.hidden.hidden`.
    layers
        ``attention``: layers whose heads are averaged; ``hidden``: layers measured (0 is the embedding output).
    """
    from posviz.measures import SeriesOptions, get_measure
    from posviz.observe.text_pass import observe_text
    from posviz.train.processes import process_rank, world_size
    from posviz.util.progress import progress

    specs = [corpus] if isinstance(corpus, str) else list(corpus)
    blocks, corpus_sha256 = series_blocks(points, specs, seq_len, max_blocks)
    options = SeriesOptions(corpus=", ".join(specs), seq_len=seq_len, layers=layers, seed=seed)  # what a request reads
    chosen = {name: get_measure(name) for name in measures}
    rank, world = process_rank(), world_size()
    mine = list(points)[rank::world]
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in measures}
    where = {"corpus": ", ".join(specs), "corpus_sha256": corpus_sha256}
    for p in (progress(mine, "checkpoint") if rank == 0 else mine):
        requests = [m.load("request")(options) for m in chosen.values()]
        done = observe_text(p.spec, requests, token_blocks=blocks.ids, block_layout=blocks.layout,
                            special_positions=blocks.special_positions, batch_size=batch_size)
        for name, m in chosen.items():
            rows[name] += checkpoint_rows(m, done[name], p, where)
    if world > 1:
        rows = {name: _gathered(part) for name, part in rows.items()}
    for part in rows.values():  # by step, then series (a hidden row's run), then layer where rows are per layer
        part.sort(key=lambda r: (r["step"], r.get("run", r["series"]), r.get("layer", -1)))
    return rows


def checkpoint_rows(measure: Any, result: Any, p: SeriesPoint, where: dict[str, str]) -> list[dict[str, Any]]:
    """The rows of one checkpoint: the measure's own ``rows``, else one row of its ``values``."""
    if measure.rows:
        return measure.load("rows")(result, p, where)
    return [{"series": p.series, "step": p.step, "source": p.spec, "measure": measure.name, **where,
             **measure.load("values")(result)}]


def attention_series_rows(points: Sequence[SeriesPoint], *, corpus: str, seq_len: int, layers: str = "all",
                          max_blocks: int | None = 64, batch_size: int = 8) -> list[dict[str, Any]]:
    """``--measure attention``: one row per checkpoint, sorted by step then series (:func:`text_series_rows`)."""
    return text_series_rows(points, ["attention"], corpus=corpus, seq_len=seq_len, layers=layers, max_blocks=max_blocks,
                            batch_size=batch_size)["attention"]


def hidden_series_rows(points: Sequence[SeriesPoint], *, corpus: str | Sequence[str], seq_len: int, layers: str = "all",
                       max_blocks: int | None = 64, batch_size: int = 8, seed: int = 0) -> list[dict[str, Any]]:
    """``--measure hidden``: one row per checkpoint and layer, sorted by step then series (:func:`text_series_rows`)."""
    return text_series_rows(points, ["hidden"], corpus=corpus, seq_len=seq_len, layers=layers, max_blocks=max_blocks,
                            batch_size=batch_size, seed=seed)["hidden"]


def _gathered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every process's rows, in every process (a gloo group started here if none is)."""
    import torch.distributed as dist

    from posviz.train.collectives import all_gather_objects

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    return [row for part in all_gather_objects(rows) for row in part]
