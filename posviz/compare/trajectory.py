"""``posviz.trajectory(...)``: a measure along a checkpoint series, sorted by step, with the series checks.

The library function behind ``posviz trajectory``: the series is resolved (:mod:`posviz.compare.series`), the measure
chosen (``auto``: RoPE band usage for RoPE models, else the Toeplitzness of E_P), every checkpoint measured, and the
rows marked by the series checks (:mod:`posviz.compare.integrity`: a checkpoint repeating another's content, or
breaking from both neighbours) before they are returned. The command renders them.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from posviz.errors import OptionError

MEASURES = ("auto", "toeplitzness", "bands", "attention", "hidden")


@dataclass(frozen=True)
class TrajectoryResult:
    """The rows of one measure along one or more checkpoint series.

    Attributes
    ----------
    measure
        ``toeplitzness``, ``bands``, ``attention`` or ``hidden`` (``auto`` resolved).
    rows
        One dict per checkpoint (``bands``: per checkpoint, layer and head), with ``series`` and ``step``, and the
        series checks' ``duplicate_of``, ``suspect`` and ``reason``.
    summary
        ``bands`` only: per checkpoint, the band usage summarised over heads (what the table and figure show).
    cache_hits
        ``toeplitzness`` only: scores read from the posviz score cache rather than computed.
    missing
        Checkpoints left out because they cannot be had offline (``allow_missing``).
    """

    measure: str
    rows: list[dict[str, Any]]
    summary: list[dict[str, Any]] | None = None
    cache_hits: int = 0
    missing: list[str] = field(default_factory=list)

    def to_frame(self) -> Any:
        """The rows as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.rows)


def trajectory(
    sources: str | Sequence[str],
    *,
    measure: str = "auto",
    revisions: Sequence[str] | None = None,
    steps: Sequence[int] | None = None,
    corpus: str | None = None,
    seq_len: int = 128,
    max_blocks: int = 64,
    layers: str | None = None,
    probe: str | None = None,
    positions: str | None = None,
    table: str | None = None,
    normalize: str = "none",
    null_draws: int = 10,
    seed: int = 0,
    allow_missing: bool = False,
    cache: bool = True,
) -> TrajectoryResult:
    """A measure along checkpoint series: run folders, ``RUN@STEP``, step-named hub ids, or one id's ``revisions``.

    Parameters
    ----------
    sources
        Run folders (every kept checkpoint), ``RUN@STEP`` and/or hub ids whose name carries the step; with
        ``revisions``, one hub id.
    measure
        ``toeplitzness`` (of P = E_P E_Pᵀ), ``bands`` (RoPE band usage per head), ``attention`` or ``hidden`` (on
        ``corpus``, the same token blocks for every checkpoint), or ``auto``.
    revisions, steps
        Revisions of the one hub id; steps of the ids or revisions, in order (for names without a step).
    corpus, seq_len, max_blocks
        ``attention`` and ``hidden``: the fixed corpus (default: the packaged one), positions per block, blocks.
    layers, probe
        ``bands``: layers and content probe (as ``posviz heads``); ``attention`` and ``hidden``: layers measured.
    positions, table, normalize, null_draws, seed, cache
        ``toeplitzness``: as ``posviz toeplitzness`` (``cache``: read and write the posviz score cache); ``seed`` is
        also the probes' seed of ``hidden``.
    allow_missing
        Go on without checkpoints that cannot be had offline (listed in ``missing``).

    Raises
    ------
    PosvizError
        Bad sources or options (``layers`` or ``probe`` with ``toeplitzness``).

    Examples
    --------
    >>> r = posviz.trajectory("runs/abs", measure="attention", seq_len=64)  # doctest: +SKIP
    >>> r.to_frame()[["step", "toeplitzness_offdiag"]]  # doctest: +SKIP
    """
    from posviz.compare.band_series import measure_for
    from posviz.compare.series import revision_points, series_points
    from posviz.train.corpus import DEMO_CORPUS

    if measure not in MEASURES:
        raise OptionError(f"unknown measure {measure!r}", f"choose one of {', '.join(MEASURES)}")
    specs = [sources] if isinstance(sources, str) else list(sources)
    points = revision_points(specs, list(revisions), steps) if revisions is not None else series_points(specs, steps)
    chosen = measure if measure != "auto" else measure_for(points[0].spec)
    if chosen == "bands":
        return _bands(points, layers=layers, probe=probe, positions=positions)
    if chosen in ("attention", "hidden"):
        return _on_text(points, chosen, corpus=corpus or DEMO_CORPUS, seq_len=seq_len, layers=layers or "all",
                        max_blocks=max_blocks, seed=seed)
    if layers is not None or probe is not None:
        raise OptionError("--layers and --probe apply to --measure bands (RoPE models) and --layers to --measure attention and hidden")
    return _toeplitzness(points, positions=positions, table=table, normalize=normalize, null_draws=null_draws, seed=seed,
                         allow_missing=allow_missing, cache=cache)


def check_rows(rows: list[dict], points: Sequence, trace: Any, *more_rows: list[dict], collected: Any = None) -> None:
    """Mark the rows of any measure with the series checks and warn once per finding
    (:func:`posviz.compare.integrity.check_rows`)."""
    from posviz.compare.integrity import check_rows as check

    for line in check(rows, points, trace, *more_rows, collected=collected):
        warnings.warn(line, stacklevel=2)


def _bands(points: Sequence, *, layers: str | None, probe: str | None, positions: str | None) -> TrajectoryResult:
    from posviz.compare.band_series import band_rows, band_summary
    from posviz.compare.integrity import Trace

    rows = band_rows(points, layers=layers, probe=probe, positions=positions)
    summary = band_summary(rows)
    check_rows(rows, points, Trace("rope", layer=min(r["layer"] for r in rows)), summary)
    return TrajectoryResult("bands", rows, summary=summary)


def _on_text(points: Sequence, measure: str, *, corpus: str, seq_len: int, layers: str, max_blocks: int,
             seed: int) -> TrajectoryResult:
    from posviz.compare.integrity import Trace

    if measure == "attention":
        from posviz.compare.attention_series import attention_series_rows

        rows = attention_series_rows(points, corpus=corpus, seq_len=seq_len, layers=layers, max_blocks=max_blocks)
    else:
        from posviz.compare.hidden_series import hidden_series_rows

        rows = hidden_series_rows(points, corpus=corpus, seq_len=seq_len, layers=layers, max_blocks=max_blocks, seed=seed)
    from posviz.train.processes import process_rank

    if process_rank() == 0:  # under torchrun every process holds the rows; the main one checks and reports them
        check_rows(rows, points, Trace("auto"))
    return TrajectoryResult(measure, rows)


def _toeplitzness(points: Sequence, *, positions: str | None, table: str | None, normalize: str, null_draws: int, seed: int,
                  allow_missing: bool, cache: bool) -> TrajectoryResult:
    from posviz.batch.cache import ScoreCache, ScoreSettings
    from posviz.compare.integrity import Collector, Trace
    from posviz.compare.series import series_rows

    settings = ScoreSettings(normalize, null_draws, seed, ScoreSettings.normalize_positions(positions), table)
    seen = Collector(Trace("positions", positions=positions, table=table))  # fingerprints E_P as it is read for the scores
    rows, missing = series_rows(points, settings, cache=ScoreCache() if cache else None, allow_missing=allow_missing, on_read=seen)
    if missing:
        warnings.warn(f"left out (cannot be had offline): {', '.join(missing)}", stacklevel=3)
    hits = sum(r.pop("score_cache", None) == "hit" for r in rows)
    check_rows(rows, points, seen.trace, collected=seen)
    return TrajectoryResult("toeplitzness", rows, cache_hits=hits, missing=list(missing))
