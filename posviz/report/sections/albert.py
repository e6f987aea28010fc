"""ALBERT v1 → v2 section: Toeplitzness against benchmark performance (the TISA paper's Figure 2).

The eight ALBERT checkpoints are scored like ``posviz toeplitzness --plot-vs-glue``
(score cache first, then the Hugging Face cache, then the Hub), with the report's
settings. Report inputs with a value given by ``--score MODEL=VALUE`` are placed
on the same axes; training runs go on a panel of their own: runs with fine-tuning
results as their fine-tuned checkpoints (Toeplitzness against the mean downstream
score, :mod:`posviz.series.downstream`), the others as their trajectory
(Toeplitzness against held-out masked-token accuracy); with both kinds, the two
panels are stacked. A second page lists the plotted values.

When none of the eight can be had (offline, not cached), the section is left out
and the title page says so and how to get them; when some are missing, the
figure is drawn and marked incomplete.
"""

from __future__ import annotations

import dataclasses

from posviz.report.context import ReportContext
from posviz.report.layout import (
    BODY_SIZE,
    CONTENT_TOP,
    MARGIN_LEFT,
    MARGIN_RIGHT,
    SMALL_SIZE,
    Block,
    draw_table,
    new_page,
    wrap_label,
    wrap_text,
)
from posviz.report.section import Section
from posviz.util.format import MISSING, mean_sd, score

GET_THEM = "run `posviz toeplitzness --plot-vs-glue` once online to get them"


def comparison(ctx: ReportContext):
    """The ALBERT comparison for this report (computed once per context).

    Returns
    -------
    tuple
        ``(cmp, notes)``: the :class:`~posviz.reference.albert.PerformanceComparison`
        with the report's ``--score`` inputs as extra points, labelled as in the
        report, or ``None`` when no ALBERT checkpoint is available; and the
        title-page notes (left out and why, or incomplete).
    """
    if "albert" in ctx.extras:
        return ctx.extras["albert"]
    from posviz.reference.albert import toeplitzness_vs_performance
    from posviz.scoring.batch import MissingModelsError
    from posviz.scoring.cache import ScoreCache, ScoreSettings

    o = ctx.options
    scores: dict[str, float] = {}
    labels: dict[str, str] = {}
    for item in ctx.items:
        if item.spec in o.scores:
            spec = _score_spec(item)
            scores[spec] = float(o.scores[item.spec])
            labels[spec] = item.label
    settings = ScoreSettings(o.normalize, o.null_draws, o.seed, ScoreSettings.normalize_positions(o.positions), o.table)
    cmp = None
    try:
        cmp = toeplitzness_vs_performance((), metric=o.metric, scores=scores, settings=settings, cache=ScoreCache(),
                                          allow_missing=True, progress_label="scoring ALBERT v1/v2")
    except MissingModelsError as e:
        missing, reason = e.missing, e.reason
    else:
        missing, reason = cmp.missing, cmp.missing_reason
        if not (cmp.points["kind"] == "reference").any():
            cmp = None
    notes = []
    if cmp is None:
        notes.append(
            f"Left out: {SECTION.title}: the {len(missing)} ALBERT checkpoints are in neither the Hugging Face cache nor "
            f"the posviz score cache, and {reason}; {GET_THEM} (or leave the section out with --no-albert)."
        )
    else:
        for spec, label in labels.items():
            cmp.points.loc[cmp.points["model"] == spec, "label"] = label
            cmp.points.loc[cmp.points["model"] == spec, "model"] = label
        if missing:
            shown = int((cmp.points["kind"] == "reference").sum())
            notes.append(f"Incomplete: {SECTION.title} shows {shown} of the {shown + len(missing)} ALBERT checkpoints "
                             f"({reason}: {', '.join(missing)} missing); {GET_THEM}.")
    ctx.extras["albert"] = (cmp, notes)
    return cmp, notes


def _score_spec(item) -> str:
    """What to score for a report input on the ALBERT axes: a run's final checkpoint, else the input itself."""
    if item.kind == "run":
        return str(item.data["run"].checkpoint)
    return item.spec


def _fine_tuned(item) -> bool:
    """True for a run with fine-tuning results of its checkpoints (it goes on the downstream panel)."""
    return any(r.get("step") is not None for r in item.data.get("finetune") or ())


def _downstream(ctx: ReportContext):
    """The fine-tuned runs' checkpoints for the downstream panel (runs without positional scores are skipped)."""
    from posviz.errors import PosvizError
    from posviz.series.downstream import run_downstream

    paths = []
    for item in ctx.runs:
        if not _fine_tuned(item):
            continue
        try:
            path = run_downstream(item.data["run"].path, label=item.label)
        except PosvizError:  # scheme none: nothing to place
            continue
        if path is not None:
            paths.append(path)
    return paths


def _trajectories(ctx: ReportContext):
    """The masked-LM paths of the runs without fine-tuning results (runs without positional scores are skipped)."""
    from posviz.errors import PosvizError
    from posviz.series.runs import run_trajectory

    paths = []
    for item in ctx.runs:
        if _fine_tuned(item):
            continue
        try:
            paths.append(run_trajectory(item.data["run"].path, metric="accuracy", label=item.label))
        except PosvizError:  # scheme none: nothing to place
            continue
    return paths


def build(ctx: ReportContext) -> list:
    """The figure page and the values page.

    Nothing when ``albert`` is off, when the report has nothing comparable (no
    input with a position table, no training run), or when no ALBERT checkpoint
    can be had (then the title page says so).
    """
    if not ctx.options.albert or not (ctx.with_positions or ctx.runs):
        return []
    cmp, notes = comparison(ctx)
    ctx.notes.extend(notes)
    if cmp is None:
        return []
    return [_figure_page(ctx, cmp), _table_page(ctx, cmp)]


def _figure_page(ctx: ReportContext, cmp):
    from posviz.plots.scatter import (
        downstream_note,
        draw_comparison,
        draw_downstream_panel,
        draw_trajectory_panel,
        footnote,
        keep_labels_inside,
    )
    from posviz.series.runs import RUN_METRICS, run_toeplitzness_label

    paths, downs = _trajectories(ctx), _downstream(ctx)
    extras = int((cmp.points["kind"] == "extra").sum())
    placed = f"; {extras} report input{'s' if extras > 1 else ''} placed by --score" if extras else ""
    fig = new_page(SECTION.title, f"{cmp.metric.axis.removesuffix(' (%)')} against the Toeplitzness of P = E_P E_Pᵀ, "
                   f"one arrow v1 → v2 per size{placed}", bookmark="figure")
    bottom, height = 0.24, 0.565
    short = cmp.points.copy()  # short names on the axes; the values page has them in full
    short.loc[short["kind"] == "extra", "label"] = [_short_name(x) for x in short.loc[short["kind"] == "extra", "label"]]
    cmp = dataclasses.replace(cmp, points=short)
    if paths or downs:
        ax = fig.add_axes((MARGIN_LEFT + 0.015, bottom, 0.32, height))
        # the runs' panels in the right column, one above the other when there are both kinds
        gap = 0.11
        each = height if not (paths and downs) else (height - gap) / 2
        top = bottom + height
        heads = any(p.measure == "heads" for p in [*paths, *downs])
        xlabel = (run_toeplitzness_label(heads=heads) if not (paths and downs)
                  else "Toeplitzness of P, off-diagonal R²" + (" ('mean head R²': layer-0 heads)" if heads else ""))
        if downs:
            top -= each
            ax_down = fig.add_axes((0.665, top, MARGIN_RIGHT - 0.665, each))
            draw_downstream_panel(ax_down, downs, xlabel=xlabel, fontsize=SMALL_SIZE,
                                  title="Fine-tuned runs: mean score over each run's own tasks")
            top -= gap
        if paths:
            ax2 = fig.add_axes((0.665, bottom, MARGIN_RIGHT - 0.665, each))
            draw_trajectory_panel(ax2, [p.trajectory for p in paths], ylabel=RUN_METRICS["accuracy"], xlabel=xlabel,
                                  fontsize=SMALL_SIZE)
            ax2.set_title("Training runs of this report (open circle: first evaluation)", fontsize=BODY_SIZE - 1)
        if paths and downs:
            ax_down.yaxis.label.set_text("Mean downstream score (%)\n(each run's own tasks)")
            ax2.yaxis.label.set_text("Held-out masked-token\naccuracy (%)")
    else:
        ax = fig.add_axes((MARGIN_LEFT + 0.03, bottom, 0.58, height))
    texts = draw_comparison(ax, cmp, fontsize=SMALL_SIZE)
    for a in fig.axes:
        a.tick_params(labelsize=SMALL_SIZE)
        a.xaxis.label.set_fontsize(SMALL_SIZE + 0.5)
        a.yaxis.label.set_fontsize(SMALL_SIZE + 0.5)
    ax.title.set_fontsize(BODY_SIZE - 1.5)
    if cmp.missing:
        fig.text(MARGIN_LEFT, CONTENT_TOP, f"INCOMPLETE: {len(cmp.missing)} ALBERT checkpoints not shown (see the note below)",
                 fontsize=BODY_SIZE, color="#8b0000", fontweight="bold", va="top")
    note = [line for par in footnote(cmp, width=10_000).split("\n") for line in wrap_text(par, MARGIN_RIGHT - MARGIN_LEFT, SMALL_SIZE)]
    if downs:
        note += wrap_text(downstream_note(downs, width=10_000), MARGIN_RIGHT - MARGIN_LEFT, SMALL_SIZE)
    if paths:
        note += wrap_text(f"{'Right' if not downs else 'Lower right'} panel: the report's training runs without fine-tuning results, "
                          "Toeplitzness against held-out masked-token accuracy at each evaluation (an MLM score, not the "
                          "benchmark on the left).", MARGIN_RIGHT - MARGIN_LEFT, SMALL_SIZE)
    fig.text(MARGIN_LEFT, 0.135, "\n".join(note), fontsize=SMALL_SIZE, color="0.25", va="top", linespacing=1.35)
    keep_labels_inside(fig, ax, texts)
    return fig


def _short_name(label: str) -> str:
    """The last part of a path or hub id (two parts for ``.../checkpoint-N``), for point labels."""
    parts = label.replace("\\", "/").rstrip("/").split("/")
    return "/".join(parts[-2:]) if len(parts) > 1 and parts[-1].startswith("checkpoint-") else parts[-1]


def _table_page(ctx: ReportContext, cmp):
    sfx = cmp.suffix
    variant = "off-diagonal" if sfx else "full"
    fig = new_page(f"{SECTION.title} (values)", f"Plotted values: Toeplitzness ({variant} variant) and {cmp.metric.label}",
                   bookmark="values")
    header = ("model", "checkpoint", f"Toeplitzness\n{variant}", "null\n(mean ± sd)", "excess", f"{cmp.metric.name}\n(%)", "value from")
    rows = []
    for _, p in cmp.points.iterrows():
        ref = p["kind"] == "reference"
        rows.append([
            wrap_label(str(p["model"]) if ref else str(p["label"]), 34),
            str(p["label"]) if ref else "report input",
            score(p["toeplitzness" + sfx]),
            mean_sd(p["null_mean" + sfx], p["null_std" + sfx]) if cmp.settings.null_draws else MISSING,
            score(p["excess" + sfx]) if cmp.settings.null_draws else MISSING,
            score(float(p["metric_value"]), 2),
            "google-research/albert README" if ref else "--score (given by the user)",
        ])
    bottom = draw_table(fig, (MARGIN_LEFT, CONTENT_TOP, MARGIN_RIGHT - MARGIN_LEFT), header, rows,
                        col_widths=(0.25, 0.1, 0.1, 0.15, 0.08, 0.08, 0.24), fontsize=BODY_SIZE - 1,
                        align=("left", "left", "right", "right", "right", "right", "left"))
    lines = cmp.arrow_lines()
    if cmp.missing:
        lines.append(f"Not shown ({cmp.missing_reason}): {', '.join(cmp.missing)}")
    fig.text(MARGIN_LEFT, bottom - 0.03, "\n".join(lines), fontsize=BODY_SIZE - 0.5, va="top", linespacing=1.5)
    return fig


def methods(ctx: ReportContext) -> list[Block]:
    """Where the benchmark values come from and how the Average is formed."""
    from posviz.reference import METRICS

    metric = METRICS[ctx.options.metric]
    return [
        Block(
            "ALBERT v1 → v2: Toeplitzness and performance",
            (
                "The figure redraws the analogue of Figure 2 of Wennberg & Henter (2021), with posviz's own Toeplitzness "
                "(the paper does not define its score): the Toeplitzness of P = E_P E_Pᵀ of the eight "
                "ALBERT checkpoints (Lan et al., 2020; base, large, xlarge and xxlarge, v1 and v2; E_P is 512 × 128 in "
                "all) against their benchmark results, one arrow from v1 to v2 per size. v2 differs from v1 by no "
                "dropout, more data and longer training; the paper reads the arrows as translation invariance growing "
                "with training, together with better results.",
                "Benchmark values: the 'v2 vs v1' table of the google-research/albert README (development sets, in %). "
                "Its Average is the mean of five tasks, SQuAD1.1, SQuAD2.0, MNLI, SST-2 and RACE, with each SQuAD score "
                "taken as (F1 + EM)/2; this reproduces all eight rows of the table (the README does not state it). "
                f"Plotted here: {metric.label}.",
                "Other models are placed on the same axes only with a value given by --score MODEL=VALUE (the user's "
                "number, in the same units). Training runs are drawn beside it with their held-out masked-token "
                "accuracy, which is not a benchmark score, or, when fine-tuned, with the mean score over their own tasks, "
                "which is not the ALBERT average either. The null band is the row-permutation null baseline "
                "(mean ± 2 sd) pooled over the models shown.",
            ),
        )
    ]


SECTION = Section("albert", "ALBERT v1 → v2: Toeplitzness vs performance", build, methods,
                  references=("wennberg2021", "lan2020", "albert-readme"))
