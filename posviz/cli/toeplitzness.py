"""``posviz toeplitzness``: Toeplitzness of P = E E^T with a null baseline."""

from __future__ import annotations

import io
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from posviz.cli.common import (
    HELP_MODELS,
    HELP_POSITIONS,
    HELP_TABLE,
    Normalize,
    OutputFormat,
)
from posviz.util.tables import emit, to_csv, to_json


def _null_text(draws: int, seed: int) -> str:
    from posviz.toeplitz.null import null_method_text

    return null_method_text(draws, seed) if draws else "not computed (--null-draws 0)"


def _fmt(x: float | None, digits: int = 4) -> str:
    if x is None or x != x:
        return "—"
    return f"{round(x, digits) + 0.0:.{digits}f}"  # + 0.0 turns -0.0 into 0.0


def render_table(rows: list[dict], *, exclude_diagonal: bool, width: int | None = None) -> str:
    """Human-readable table of score rows (rich), with a footnote on conventions."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    suffix = "_offdiag" if exclude_diagonal else ""
    variant = "off-diagonal (main diagonal excluded)" if exclude_diagonal else "full (all n² entries)"
    t = Table(box=box.SIMPLE_HEAD, header_style="bold")
    for col, justify in [("model", "left"), ("n×d", "right"), ("rows", "right"), ("Toeplitzness", "right"),
                         ("off-diag" if not exclude_diagonal else "full", "right"), ("null (mean ± sd)", "right"), ("excess", "right")]:
        t.add_column(col, justify=justify)
    for r in rows:
        other = r["toeplitzness"] if exclude_diagonal else r["toeplitzness_offdiag"]
        t.add_row(
            r["model"],
            f"{r['positions']}×{r['dim']}",
            f"{r['rows'][0]}–{r['rows'][1] - 1}",
            _fmt(r["toeplitzness" + suffix]),
            _fmt(other),
            f"{_fmt(r['null_mean' + suffix])} ± {_fmt(r['null_std' + suffix])}",
            _fmt(r["excess" + suffix], 3),
        )
    console = Console(width=width or 120, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(t)
    r0 = rows[0]
    console.print(
        f"Toeplitzness = R² of P against its Toeplitz projection, variant: {variant}; "
        f"P = E Eᵀ, normalize={r0['normalize']}; null = {_null_text(r0['null_draws'], r0['seed'])}; "
        "excess = (R² − null)/(1 − null)."
    )
    lines = [line.rstrip() for line in console.export_text().splitlines()]
    return "\n".join(lines).strip("\n") + "\n"


class RunMetric(str, Enum):
    accuracy = "accuracy"
    loss = "loss"


class Metric(str, Enum):
    average = "average"
    mnli = "mnli"
    sst2 = "sst2"
    squad1 = "squad1"
    squad2 = "squad2"
    race = "race"


def render_glue_table(cmp, *, width: int | None = None) -> str:
    """Table of a :class:`~posviz.compare.albert.PerformanceComparison` (rich), with footnotes."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    sfx = cmp.suffix
    t = Table(box=box.SIMPLE_HEAD, header_style="bold")
    for col, justify in [("model", "left"), ("", "left"), ("Toeplitzness", "right"), ("null (mean ± sd)", "right"),
                         ("excess", "right"), (cmp.metric.name, "right")]:
        t.add_column(col, justify=justify)
    for _, r in cmp.points.iterrows():
        t.add_row(
            str(r["model"]),
            str(r["label"]) if r["kind"] == "reference" else "extra (--score)",
            _fmt(r["toeplitzness" + sfx]),
            f"{_fmt(r['null_mean' + sfx])} ± {_fmt(r['null_std' + sfx])}",
            _fmt(r["excess" + sfx], 3),
            f"{r['metric_value']:.2f}",
        )
    console = Console(width=width or 120, record=True, file=io.StringIO())
    console.print(t)
    variant = "off-diagonal (main diagonal excluded)" if cmp.variant == "exclude_diagonal" else "full (all n² entries)"
    st = cmp.settings
    console.print(
        f"Toeplitzness = R² of P = E Eᵀ against its Toeplitz projection, variant: {variant}; normalize={st.normalize}; "
        f"null = {_null_text(st.null_draws, st.seed)}. {cmp.metric.name}: {cmp.metric.label}, "
        "ALBERT values from the google-research/albert README ('v2 vs v1' table)."
    )
    for a in cmp.arrows():
        (x1, y1), (x2, y2) = a["start"], a["end"]
        console.print(f"{a['size']}: v1 → v2 Toeplitzness {x2 - x1:+.4f}, {cmp.metric.name} {y2 - y1:+.2f}")
    if cmp.missing:
        console.print(f"NOT SHOWN ({cmp.missing_reason}): {', '.join(cmp.missing)}")
    lines = [line.rstrip() for line in console.export_text().splitlines()]
    return "\n".join(lines).strip("\n") + "\n"


def _report_cache(rows: list[dict]) -> list[dict]:
    """Say on stderr how many scores came from the score cache; return the rows without that field.

    Kept out of the printed data so that the same inputs always give the same output.
    """
    hits = sum(r.get("score_cache") == "hit" for r in rows)
    if hits:
        typer.echo(f"{hits} of {len(rows)} scores read from the posviz score cache (--no-cache recomputes)", err=True)
    return [{k: v for k, v in r.items() if k != "score_cache"} for r in rows]


def command(
    models: Annotated[list[str], typer.Argument(help=HELP_MODELS + " With --plot-vs-glue: ALBERT ids select checkpoints (default: all eight), other models are extra points.", show_default=False)] = None,
    fmt: Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format of the table.")] = OutputFormat.table,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the table to this file instead of stdout; with --plot-vs-glue: the figure (.png, .pdf, .svg; default toeplitzness-vs-METRIC.png).")] = None,
    exclude_diagonal: Annotated[bool, typer.Option("--exclude-diagonal", help="Headline the variant without the main diagonal.")] = False,
    null_draws: Annotated[int, typer.Option("--null-draws", min=0, help="Row permutations for the null baseline (0: none).")] = 10,
    seed: Annotated[int, typer.Option("--seed", help="Seed for the null baseline.")] = 0,
    normalize: Annotated[Normalize, typer.Option("--normalize", help="none: E Eᵀ; cosine: unit rows; center: column means removed.")] = Normalize.none,
    positions: Annotated[str | None, typer.Option("--positions", help=HELP_POSITIONS)] = None,
    table: Annotated[str | None, typer.Option("--table", help=HELP_TABLE)] = None,
    plot_vs_glue: Annotated[bool, typer.Option("--plot-vs-glue", help="Plot Toeplitzness against benchmark results: ALBERT v1 → v2 (TISA paper, Figure 2).")] = False,
    metric: Annotated[Metric, typer.Option("--metric", help="Benchmark on the y axis (squad1/squad2: (F1+EM)/2).")] = Metric.average,
    score: Annotated[list[str] | None, typer.Option("--score", metavar="MODEL=VALUE", help="Benchmark value of an extra model for --plot-vs-glue (repeatable).")] = None,
    allow_missing: Annotated[bool, typer.Option("--allow-missing", help="Go on without models that cannot be had offline (the figure says which).")] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Neither read nor write the posviz score cache.")] = False,
    run: Annotated[list[Path] | None, typer.Option("--run", metavar="RUN_DIR", help="With --plot-vs-glue: a `posviz train` run folder whose trajectory (Toeplitzness vs held-out metric per evaluation) goes on a second panel (repeatable).")] = None,
    run_metric: Annotated[RunMetric, typer.Option("--run-metric", help="y axis of the --run panel: held-out masked-token accuracy or MLM loss.")] = RunMetric.accuracy,
) -> None:
    """Score how Toeplitz (translation-invariant) each model's P = E Eᵀ is.

    Prints, per model, R² of P against its Toeplitz projection (full and
    off-diagonal variants), the null baseline from row-permuted E, and the excess
    over it. Scores are cached (see the README), so each checkpoint is read once.
    Examples: posviz toeplitzness bert-base-uncased roberta-base gpt2;
    posviz toeplitzness --plot-vs-glue -o albert.png
    """
    from posviz.batch.cache import ScoreCache, ScoreSettings
    from posviz.errors import OptionError
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
        _plot_vs_glue(models, fmt, output, exclude_diagonal, settings, metric.value, score, allow_missing, cache,
                      runs=list(run or ()), run_metric=run_metric.value)
        return

    from posviz.batch.scoring import ModelRequest, score_models

    scored = score_models([ModelRequest(m) for m in models], settings, cache=cache, allow_missing=allow_missing)
    if scored.missing:
        import warnings

        warnings.warn(f"left out ({scored.missing_reason}): {', '.join(m.spec for m in scored.missing)}", stacklevel=1)
    if not scored.rows:
        from posviz.batch.scoring import MissingModelsError

        raise MissingModelsError([m.spec for m in scored.missing], scored.missing_reason or "")
    rows = _report_cache(scored.rows)
    for r in rows:
        r["variant"] = "exclude_diagonal" if exclude_diagonal else "full"
    if fmt is OutputFormat.json:
        emit(to_json(rows), output)
    elif fmt is OutputFormat.csv:
        emit(to_csv(rows), output)
    else:
        emit(render_table(rows, exclude_diagonal=exclude_diagonal), output)


def _plot_vs_glue(models, fmt, output, exclude_diagonal, settings, metric, score, allow_missing, cache, *, runs=(), run_metric="accuracy") -> None:
    from posviz.compare.albert import (
        RUN_METRICS,
        RUN_TOEPLITZNESS_LABEL,
        parse_score_options,
        run_trajectory,
        toeplitzness_vs_performance,
    )
    from posviz.plots.common import save_figure

    if output is None:
        output = Path(f"toeplitzness-vs-{metric}.png")
        from posviz.plots.common import FIGURE_EXTENSIONS
        from posviz.util.atomic import check_output_path

        check_output_path(output, FIGURE_EXTENSIONS)
    scores = parse_score_options(score)
    paths = [run_trajectory(r, metric=run_metric, label=str(r)) for r in runs]  # bad runs fail before any scoring
    cmp = toeplitzness_vs_performance(
        models, metric=metric, scores=scores, settings=settings,
        exclude_diagonal=exclude_diagonal, cache=cache, allow_missing=allow_missing, allow_empty=bool(paths),
    )
    if cmp.missing:
        import warnings

        warnings.warn(f"the figure leaves out ({cmp.missing_reason}): {', '.join(cmp.missing)}", stacklevel=1)
    fig = cmp.figure(trajectories=[p.trajectory for p in paths] or None, trajectory_ylabel=RUN_METRICS[run_metric],
                     trajectory_xlabel=RUN_TOEPLITZNESS_LABEL)
    save_figure(fig, output)
    records = _report_cache(cmp.points.to_dict(orient="records")) + run_records(paths)
    if fmt is OutputFormat.json:
        emit(to_json(records), None)
    elif fmt is OutputFormat.csv:
        emit(to_csv(records), None)
    else:
        emit(render_glue_table(cmp) + "".join(line + "\n" for line in run_lines(paths)), None)
    typer.echo(f"wrote {output}", err=True)


def run_records(paths) -> list[dict]:
    """One output record per evaluation of each ``--run`` (kind ``run``), after the scatter's points."""
    return [
        {"label": p.trajectory.label, "kind": "run", "model": p.run, "scheme": p.scheme, "step": step,
         "measure": "toeplitzness_ep" if p.measure == "ep" else "toeplitzness_heads_mean", "toeplitzness": x,
         "metric": p.metric, "metric_value": y}
        for p in paths
        for step, (x, y) in zip(p.steps, p.trajectory.points, strict=True)
    ]


def run_lines(paths) -> list[str]:
    """One summary line per ``--run`` for the table output: first and last evaluation."""
    out = []
    for p in paths:
        (x0, y0), (x1, y1) = p.trajectory.points[0], p.trajectory.points[-1]
        what = "Toeplitzness of E_P" if p.measure == "ep" else "mean layer-0 head Toeplitzness"
        unit = "%" if p.metric == "accuracy" else ""
        out.append(f"run {p.run} ({p.scheme}): {what} {x0:.4f} → {x1:.4f}, held-out {p.metric} {y0:.2f}{unit} → {y1:.2f}{unit} "
                   f"(steps {p.steps[0]} → {p.steps[-1]}, {len(p.steps)} evaluations)")
    return out
