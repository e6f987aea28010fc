"""``posviz toeplitzness``: Toeplitzness of P = E E^T with a null baseline."""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from posviz.cli.options import (
    HELP_MODELS,
    HELP_NORMALIZE,
    HELP_NULL_DRAWS,
    HELP_POSITIONS,
    HELP_TABLE,
    HELP_VARIANT,
    Metric,
    Normalize,
    OutputFormat,
)
from posviz.util.tables import emit, to_csv, to_json

if TYPE_CHECKING:
    from posviz.scoring.cache import ScoreCache, ScoreSettings


class RunMetric(str, Enum):
    accuracy = "accuracy"
    loss = "loss"


def _report_cache(rows: list[dict]) -> list[dict]:
    """Say on stderr how many scores came from the score cache; return the rows without that field.

    Kept out of the printed data so that the same inputs always give the same output.
    """
    hits = sum(r.get("score_cache") == "hit" for r in rows)
    if hits:
        typer.echo(f"{hits} of {len(rows)} scores read from the posviz score cache (--no-cache recomputes)", err=True)
    return [{k: v for k, v in r.items() if k != "score_cache"} for r in rows]


def _write(records: list[dict], fmt: OutputFormat, output: Path | None, table: Callable[[], str]) -> None:
    """Write records as JSON or CSV, or the table that ``table()`` renders."""
    if fmt is OutputFormat.json:
        emit(to_json(records), output)
    elif fmt is OutputFormat.csv:
        emit(to_csv(records), output)
    else:
        emit(table(), output)


def command(
    models: Annotated[list[str], typer.Argument(help=HELP_MODELS + " With --plot-vs-glue: ALBERT ids select checkpoints (default: all eight), other models are extra points.", show_default=False)] = None,
    fmt: Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format of the table.")] = OutputFormat.table,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the table to this file instead of stdout; with --plot-vs-glue: the figure (.png, .pdf, .svg; default toeplitzness-vs-METRIC.png).")] = None,
    exclude_diagonal: Annotated[bool, typer.Option("--exclude-diagonal/--full", help=HELP_VARIANT)] = True,
    null_draws: Annotated[int, typer.Option("--null-draws", min=0, help=HELP_NULL_DRAWS)] = 10,
    seed: Annotated[int, typer.Option("--seed", help="Seed for the null baseline.")] = 0,
    normalize: Annotated[Normalize, typer.Option("--normalize", help=HELP_NORMALIZE)] = Normalize.none,
    positions: Annotated[str | None, typer.Option("--positions", help=HELP_POSITIONS)] = None,
    table: Annotated[str | None, typer.Option("--table", help=HELP_TABLE)] = None,
    plot_vs_glue: Annotated[bool, typer.Option("--plot-vs-glue", help="Plot Toeplitzness against benchmark results: ALBERT v1 → v2 (TISA paper, Figure 2).")] = False,
    metric: Annotated[Metric, typer.Option("--metric", help="Benchmark on the y axis (squad1/squad2: (F1+EM)/2).")] = Metric.average,
    score: Annotated[list[str] | None, typer.Option("--score", metavar="MODEL=VALUE", help="Benchmark value of an extra model for --plot-vs-glue (repeatable).")] = None,
    allow_missing: Annotated[bool, typer.Option("--allow-missing", help="Go on without models that cannot be had offline (the figure says which).")] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Neither read nor write the posviz score cache.")] = False,
    run: Annotated[list[Path] | None, typer.Option("--run", metavar="RUN_DIR", help="With --plot-vs-glue: a `posviz train` run folder (repeatable). With `posviz finetune` results: its fine-tuned checkpoints (Toeplitzness vs mean downstream score) on a downstream panel; without: its trajectory (Toeplitzness vs held-out metric per evaluation) on a masked-LM panel.")] = None,
    run_metric: Annotated[RunMetric, typer.Option("--run-metric", help="y axis of the masked-LM panel of --run runs without fine-tuning results: held-out masked-token accuracy or MLM loss.")] = RunMetric.accuracy,
) -> None:
    """Score how Toeplitz (translation-invariant) each model's P = E Eᵀ is.

    Prints, per model, R² of P against its Toeplitz projection (full and
    off-diagonal variants), the null baseline from row-permuted E, and the excess
    over it. Scores are cached (see the README), so each checkpoint is read once.
    Examples: posviz toeplitzness bert-base-uncased roberta-base gpt2;
    posviz toeplitzness --plot-vs-glue -o albert.png
    """
    from posviz.errors import OptionError
    from posviz.scoring.cache import ScoreCache, ScoreSettings
    from posviz.util.atomic import check_output_path

    models = list(models or [])
    if not plot_vs_glue:
        for flag, given in (("--metric", metric is not Metric.average), ("--score", bool(score)), ("--run", bool(run)),
                            ("--run-metric", run_metric is not RunMetric.accuracy)):
            if given:
                raise OptionError(f"{flag} needs --plot-vs-glue")
        if not models:
            raise OptionError("give at least one MODEL", "for example: posviz toeplitzness sentence-transformers/all-MiniLM-L6-v2")
    if output is not None:
        if plot_vs_glue:
            from posviz.plots.common import FIGURE_EXTENSIONS

            check_output_path(output, FIGURE_EXTENSIONS)
        else:
            check_output_path(output, {"table": (".txt",), "csv": (".csv",), "json": (".json",)}[fmt.value])
    settings = ScoreSettings(normalize.value, null_draws, seed, ScoreSettings.normalize_positions(positions), table)
    cache = None if no_cache else ScoreCache()
    if plot_vs_glue:
        _plot_vs_glue(models, settings=settings, cache=cache, fmt=fmt, output=output, exclude_diagonal=exclude_diagonal,
                      metric=metric.value, score=score, allow_missing=allow_missing, runs=list(run or ()), run_metric=run_metric.value)
        return

    from posviz.cli.tables import scores_table
    from posviz.scoring.batch import MissingModelsError, ModelRequest, score_models
    from posviz.toeplitz.headline import headline_field, variant_name

    scored = score_models([ModelRequest(m) for m in models], settings, cache=cache, allow_missing=allow_missing)
    if scored.missing:
        import warnings

        warnings.warn(f"left out ({scored.missing_reason}): {', '.join(m.spec for m in scored.missing)}", stacklevel=1)
    if not scored.rows:
        raise MissingModelsError([m.spec for m in scored.missing], scored.missing_reason or "")
    rows = _report_cache(scored.rows)
    for r in rows:
        r["variant"], r["headline"] = variant_name(exclude_diagonal), headline_field(exclude_diagonal)
    _write(rows, fmt, output, lambda: scores_table(rows, exclude_diagonal=exclude_diagonal))


def _plot_vs_glue(
    models: list[str],
    *,
    settings: ScoreSettings,
    cache: ScoreCache | None,
    fmt: OutputFormat,
    output: Path | None,
    exclude_diagonal: bool,
    metric: str,
    score: list[str] | None,
    allow_missing: bool,
    runs: list[Path],
    run_metric: str,
) -> None:
    """ALBERT v1 → v2 (and extra models, and training runs) against a benchmark: figure, then table."""
    from posviz.cli.tables import comparison_table
    from posviz.errors import PosvizError
    from posviz.plots.common import save_figure
    from posviz.plots.scatter import plot_toeplitzness_vs_metric
    from posviz.reference.albert import parse_score_options, toeplitzness_vs_performance
    from posviz.series.downstream import run_downstream
    from posviz.series.runs import RUN_METRICS, run_toeplitzness_label, run_trajectory

    if output is None:
        output = Path(f"toeplitzness-vs-{metric}.png")
        from posviz.plots.common import FIGURE_EXTENSIONS
        from posviz.util.atomic import check_output_path

        check_output_path(output, FIGURE_EXTENSIONS)
    scores = parse_score_options(score)
    # bad runs fail before any scoring; a fine-tuned run goes on the downstream panel, the others on the masked-LM one
    downstream, paths = [], []
    for r in runs:
        if not r.is_dir():
            raise PosvizError(f"{r}: no such run folder", "pass the --out folder of a `posviz train` run")
        fine_tuned = run_downstream(r, label=str(r), exclude_diagonal=exclude_diagonal)
        if fine_tuned is not None:
            downstream.append(fine_tuned)
        else:
            paths.append(run_trajectory(r, metric=run_metric, label=str(r), exclude_diagonal=exclude_diagonal))
    cmp = toeplitzness_vs_performance(
        models, metric=metric, scores=scores, settings=settings,
        exclude_diagonal=exclude_diagonal, cache=cache, allow_missing=allow_missing, allow_empty=bool(paths or downstream),
    )
    if cmp.missing:
        import warnings

        warnings.warn(f"the figure leaves out ({cmp.missing_reason}): {', '.join(cmp.missing)}", stacklevel=1)
    fig = plot_toeplitzness_vs_metric(cmp, trajectories=[p.trajectory for p in paths] or None, downstream=downstream or None,
                                      trajectory_ylabel=RUN_METRICS[run_metric], trajectory_xlabel=run_toeplitzness_label(
                                          exclude_diagonal, heads=any(p.measure == "heads" for p in [*downstream, *paths])))
    save_figure(fig, output)
    lines = [p.summary_line() for p in [*downstream, *paths]]
    records = _report_cache(cmp.points.to_dict(orient="records")) + [rec for p in [*downstream, *paths] for rec in p.records()]
    _write(records, fmt, None, lambda: comparison_table(cmp) + "".join(line + "\n" for line in lines))
    typer.echo(f"wrote {output}", err=True)
