"""``posviz.trajectory(...)``: a measure along a checkpoint series, sorted by step, with the series checks.

The library function behind ``posviz trajectory``: the series is resolved (:mod:`posviz.series.points`), the measure
taken from the registry (:mod:`posviz.measures`; ``auto``: RoPE band usage for RoPE models, else the Toeplitzness of
E_P), every checkpoint measured by the measure's ``series`` (or its ``point``, once per checkpoint), and the rows
marked by the series checks (:mod:`posviz.series.integrity`: a checkpoint repeating another's content, or breaking
from both neighbours) before they are returned. The command renders them with the measure's views.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from posviz.errors import OptionError


@dataclass(frozen=True)
class TrajectoryResult:
    """The rows of one measure along one or more checkpoint series.

    Attributes
    ----------
    measure
        The measure's name (``auto`` resolved): ``toeplitzness``, ``bands``, ``attention``, ``hidden``, or one that
        another package registers (:mod:`posviz.measures`).
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
    measure: str | Sequence[str] = "auto",
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
) -> TrajectoryResult | dict[str, TrajectoryResult]:
    """A measure along checkpoint series: run folders, ``RUN@STEP``, step-named hub ids, or one id's ``revisions``.

    Parameters
    ----------
    sources
        Run folders (every kept checkpoint), ``RUN@STEP`` and/or hub ids whose name carries the step; with
        ``revisions``, one hub id.
    measure
        ``toeplitzness`` (of P = E_P E_Pᵀ), ``bands`` (RoPE band usage per head), ``attention`` or ``hidden`` (on
        ``corpus``, the same token blocks for every checkpoint), a measure another package registers
        (``posviz measures`` lists them), or ``auto``. ``attention,hidden`` runs both on one pass per checkpoint
        and returns a dict of results by name.
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
        Bad sources, an unknown measure, or an option the measure does not use (``layers`` with ``toeplitzness``).

    Examples
    --------
    >>> r = posviz.trajectory("runs/abs", measure="attention", seq_len=64)  # doctest: +SKIP
    >>> r.to_frame()[["step", "toeplitzness_offdiag"]]  # doctest: +SKIP
    """
    from posviz.measures import SeriesOptions, get_measure
    from posviz.series.bands import measure_for
    from posviz.series.points import revision_points, series_points

    options = SeriesOptions(corpus=corpus, seq_len=seq_len, max_blocks=max_blocks, layers=layers, probe=probe,
                            positions=positions, table=table, normalize=normalize, null_draws=null_draws, seed=seed,
                            allow_missing=allow_missing, cache=cache)
    # a named measure is looked up (an unknown name refused) before any checkpoint is resolved; auto needs the first
    names = [m.strip() for m in measure.split(",")] if isinstance(measure, str) else list(measure)
    if len(names) > 1:
        together = _together(names, options)
    chosen = get_measure(names[0], series=True) if names != ["auto"] else None
    specs = [sources] if isinstance(sources, str) else list(sources)
    points = revision_points(specs, list(revisions), steps) if revisions is not None else series_points(specs, steps)
    if len(names) > 1:
        return on_text(points, together, options)
    if chosen is None:
        chosen = get_measure(measure_for(points[0].spec), series=True)
    refuse_options(chosen, options)
    if chosen.series:
        return chosen.load("series")(points, options)
    if chosen.point:
        return point_series(chosen, points, options)
    return on_text(points, [chosen.name], options)[chosen.name]  # a measure that joins the text pass


def _together(names: list[str], options: Any) -> list[str]:
    """Several measures in one series: text measures only (one pass per checkpoint), each once, options of any of them."""
    from posviz.measures import get_measure, measures
    from posviz.series.text import on_one_pass

    measures_ = [get_measure(n, series=True) for n in names]
    if len(set(names)) != len(names) or not all(on_one_pass(n) for n in names):
        able = [m.name for m in measures().values() if on_one_pass(m.name)]
        raise OptionError(f"--measure {','.join(names)}: several measures run together only as text measures on one pass, "
                          f"each once: {', '.join(able)}", "or run one measure at a time")
    used = frozenset().union(*(m.options for m in measures_))
    refuse_options(_Joint(",".join(names), used), options)
    return names


@dataclass(frozen=True)
class _Joint:
    """Several text measures as :func:`refuse_options` sees them: a name and the options any of them uses."""

    name: str
    options: frozenset[str]


def _flag(option: str) -> str:
    """The command-line flag of a series option."""
    return "--no-cache" if option == "cache" else "--" + option.replace("_", "-")


def refuse_options(measure: Any, options: Any) -> None:
    """One line for options given that ``measure`` does not use, naming posviz's measures that do."""
    from posviz.measures.builtin import BUILT_IN

    refused = [name for name in options.given() if name not in measure.options]
    if not refused:
        return
    users = sorted({m.name for m in BUILT_IN if m.has_series and set(refused) <= m.options})
    where = f": {'an option' if len(refused) == 1 else 'options'} of --measure {' and '.join(users)}" if users else ""
    takes = ", ".join(_flag(name) for name in sorted(measure.options)) or "no options"
    raise OptionError(f"{', '.join(map(_flag, refused))} {'does' if len(refused) == 1 else 'do'} not apply to --measure "
                      f"{measure.name}{where}", f"--measure {measure.name} takes {takes}")


def point_series(measure: Any, points: Sequence, options: Any) -> TrajectoryResult:
    """The series of a measure that gives only ``point``: each checkpoint measured in turn, then checked."""
    from posviz.series.integrity import Trace

    measure_one = measure.load("point")
    rows = []
    for point in points:
        values = measure_one(point.spec, options)
        if not isinstance(values, dict):
            raise OptionError(f"measure {measure.name!r} returned a {type(values).__name__} for {point.spec}, not a dict of numbers")
        rows.append({"series": point.series, "step": point.step, "source": point.spec, **values})
    check_rows(rows, points, Trace("auto"))
    return TrajectoryResult(measure.name, rows)


def check_rows(rows: list[dict], points: Sequence, trace: Any, *more_rows: list[dict], collected: Any = None) -> None:
    """Mark the rows of any measure with the series checks and warn once per finding
    (:func:`posviz.series.integrity.check_rows`)."""
    from posviz.series.integrity import check_rows as check

    for line in check(rows, points, trace, *more_rows, collected=collected):
        warnings.warn(line, stacklevel=2)


def bands_series(points: Sequence, options: Any) -> TrajectoryResult:
    """``bands``: RoPE band usage per head of every checkpoint (``layers``, ``probe``, ``positions``)."""
    from posviz.series.bands import band_rows, band_summary
    from posviz.series.integrity import Trace

    rows = band_rows(points, layers=options.layers, probe=options.probe, positions=options.positions)
    summary = band_summary(rows)
    check_rows(rows, points, Trace("rope", layer=min(r["layer"] for r in rows)), summary)
    return TrajectoryResult("bands", rows, summary=summary)


def attention_series(points: Sequence, options: Any) -> TrajectoryResult:
    """``attention``: means over heads of the attention every checkpoint produces on the same blocks of text."""
    return on_text(points, ["attention"], options)["attention"]


def hidden_series(points: Sequence, options: Any) -> TrajectoryResult:
    """``hidden``: position in every checkpoint's hidden states on the same blocks of text."""
    return on_text(points, ["hidden"], options)["hidden"]


def on_text(points: Sequence, measures: Sequence[str], options: Any) -> dict[str, TrajectoryResult]:
    """Text measures (``attention``, ``hidden``, and those with a text-pass ``request``) along the series: every
    checkpoint loaded once and run once over the same blocks for all of them (:func:`posviz.series.text.text_series_rows`), then each checked."""
    from posviz.series.integrity import Trace
    from posviz.series.text import text_series_rows
    from posviz.train.corpus import DEMO_CORPUS
    from posviz.train.processes import process_rank

    rows = text_series_rows(points, measures, corpus=options.corpus or DEMO_CORPUS, seq_len=options.seq_len,
                            layers=options.layers or "all", max_blocks=options.max_blocks, seed=options.seed)
    if process_rank() == 0:  # under torchrun every process holds the rows; the main one checks and reports them
        for part in rows.values():
            check_rows(part, points, Trace("auto"))
    return {name: TrajectoryResult(name, part) for name, part in rows.items()}


def toeplitzness_series(points: Sequence, options: Any) -> TrajectoryResult:
    """``toeplitzness``: of P = E_P E_Pᵀ at every checkpoint, with the null (through the posviz score cache)."""
    from posviz.scoring.cache import ScoreCache, ScoreSettings
    from posviz.series.integrity import Collector, Trace
    from posviz.series.points import series_rows

    positions, table, allow_missing, cache = options.positions, options.table, options.allow_missing, options.cache
    settings = ScoreSettings(options.normalize, options.null_draws, options.seed, ScoreSettings.normalize_positions(positions), table)
    seen = Collector(Trace("positions", positions=positions, table=table))  # fingerprints E_P as it is read for the scores
    rows, missing = series_rows(points, settings, cache=ScoreCache() if cache else None, allow_missing=allow_missing, on_read=seen)
    if missing:
        warnings.warn(f"left out (cannot be had offline): {', '.join(missing)}", stacklevel=3)
    hits = sum(r.pop("score_cache", None) == "hit" for r in rows)
    check_rows(rows, points, seen.trace, collected=seen)
    return TrajectoryResult("toeplitzness", rows, cache_hits=hits, missing=list(missing))
