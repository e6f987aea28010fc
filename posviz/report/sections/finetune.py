"""Fine-tuning section: each fine-tuned run's downstream results, a figure and a table.

For every ``posviz train`` run of the report that has ``posviz finetune`` results
(:mod:`posviz.finetuning.results`, inside the run folder), one page: on the left each
task's median score over fine-tuning seeds (with min–max), against the pre-training
step when several checkpoints were fine-tuned, as bars otherwise; on the right the
run on Figure 2's axes (Toeplitzness of each fine-tuned checkpoint against its mean
downstream score, :mod:`posviz.series.downstream`); below, the table of every
median record (step, task, metric, median, min–max, number of seeds), continued on
further pages when long. Runs without results get no page.
"""

from __future__ import annotations

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
from posviz.util.format import score

FIRST_PAGE_ROWS = 6  # table rows under the figure; more go on continuation pages
MORE_PAGE_ROWS = 17
HEADER = ("checkpoint\nstep", "task", "metric", "median over\nseeds (%)", "min – max (%)", "seeds")
WIDTHS = (0.1, 0.36, 0.14, 0.14, 0.18, 0.08)
ALIGN = ("right", "left", "left", "right", "right", "right")


def fine_tuned_runs(ctx: ReportContext) -> list:
    """The report's runs that have fine-tuning results."""
    return [it for it in ctx.runs if it.data.get("finetune")]


def table_rows(records: list[dict]) -> list[list[str]]:
    """One table row per median record, by step, task and metric (``score`` last within a task).

    A task scored by one metric has a ``score`` equal to it: the two share one row, ``METRIC (= score)``.
    """
    from posviz.finetuning.results import shown_medians

    return [[str(r["step"]), wrap_label(str(r["task"]), 60, max_lines=1), metric, score(r["value"], 2),
             f"{score(r['min'], 2)} – {score(r['max'], 2)}", str(r["n"])]
            for r, metric in shown_medians([r for r in records if r.get("step") is not None])]


def build(ctx: ReportContext) -> list:
    """One page per fine-tuned run (figure and the first table rows), continuation pages for long tables."""
    pages = []
    for item in fine_tuned_runs(ctx):
        records = item.data["finetune"]
        steps = sorted({int(r["step"]) for r in records if r.get("step") is not None})
        tasks = sorted({r["task"] for r in records})
        what = (f"{len(tasks)} task{'s' if len(tasks) != 1 else ''} at {len(steps)} checkpoint{'s' if len(steps) != 1 else ''} "
                f"(step{'s' if len(steps) != 1 else ''} {', '.join(map(str, steps))})")
        fig = new_page(f"{SECTION.title}: {item.label}", f"{item.data['run'].describe()}; fine-tuned on {what}", bookmark=item.label)
        _panels(fig, item)
        rows = table_rows(records)
        width = MARGIN_RIGHT - MARGIN_LEFT
        bottom = draw_table(fig, (MARGIN_LEFT, 0.39, width * 0.8), HEADER, rows[:FIRST_PAGE_ROWS], col_widths=WIDTHS,
                            fontsize=BODY_SIZE - 1, align=ALIGN)
        _note(fig, bottom - 0.02)
        pages.append(fig)
        for start in range(FIRST_PAGE_ROWS, len(rows), MORE_PAGE_ROWS):
            more = new_page(f"{SECTION.title}: {item.label} (continued)", "median over fine-tuning seeds of every task and metric")
            bottom = draw_table(more, (MARGIN_LEFT, CONTENT_TOP, width * 0.8), HEADER, rows[start : start + MORE_PAGE_ROWS],
                                col_widths=WIDTHS, fontsize=BODY_SIZE - 1, align=ALIGN)
            _note(more, bottom - 0.02)
            pages.append(more)
    return pages


def _panels(fig, item) -> None:
    """Left: each task's median score; right: the run on Figure 2's downstream axes (or why not)."""
    from posviz.errors import PosvizError
    from posviz.plots.finetune import draw_run_results
    from posviz.plots.scatter import draw_downstream_panel
    from posviz.series.downstream import run_downstream
    from posviz.series.runs import run_toeplitzness_label

    bottom, height = 0.5, CONTENT_TOP - 0.07 - 0.5
    left = fig.add_axes((MARGIN_LEFT + 0.03, bottom, 0.36, height))
    draw_run_results(left, item.data["finetune"], fontsize=SMALL_SIZE)
    left.set_title("Each task's score (median over fine-tuning seeds)", fontsize=BODY_SIZE - 1, loc="left")
    right = fig.add_axes((0.56, bottom, MARGIN_RIGHT - 0.56, height))
    try:
        path = run_downstream(item.data["run"].path, label=item.label)
    except PosvizError as e:  # scheme none: nothing to place on Toeplitzness axes
        right.set_axis_off()
        right.text(0.5, 0.5, "\n".join(wrap_text(e.message, 0.3, SMALL_SIZE + 0.5)), ha="center", va="center",
                   transform=right.transAxes, fontsize=SMALL_SIZE + 0.5, color="0.35")
        return
    draw_downstream_panel(right, [path], xlabel=run_toeplitzness_label(heads=path.measure == "heads"), fontsize=SMALL_SIZE, title="")
    right.set_title("Figure 2's axes: Toeplitzness of the fine-tuned checkpoints\nagainst the mean score over "
                    f"{', '.join(path.tasks)}", fontsize=BODY_SIZE - 1, loc="left")
    for ax in (left, right):
        ax.xaxis.label.set_fontsize(SMALL_SIZE)
        ax.yaxis.label.set_fontsize(SMALL_SIZE)


def _note(fig, top: float) -> None:
    text = ("median: over fine-tuning seeds (posviz finetune --seeds), with their min – max; values in % (correlations × 100); "
            "score: the task's GLUE score, the mean of its metrics, which the right panel averages over the tasks fine-tuned "
            "at every checkpoint.")
    lines = wrap_text(text, (MARGIN_RIGHT - MARGIN_LEFT) * 0.8, SMALL_SIZE)
    fig.text(MARGIN_LEFT, top, "\n".join(lines), fontsize=SMALL_SIZE, va="top", color="0.25", linespacing=1.4)


def methods(ctx: ReportContext) -> list[Block]:
    """What the fine-tuning results are and how the downstream panel is formed."""
    return [
        Block(
            "Fine-tuning results",
            (
                "Each fine-tuned run was fine-tuned with posviz finetune: a classification (or, for STS-B, regression) head "
                "on [CLS] trained on each task from one of the run's checkpoints, once per fine-tuning seed, and scored on "
                "the task's development split. Values are in % (Matthews and Pearson/Spearman correlations × 100). A task's "
                "score is its GLUE task score, the mean of its metrics. The report shows, per task and metric, the median "
                "over fine-tuning seeds (the statistic of Wennberg & Henter's Table 3, robust to an occasional failed "
                "fine-tuning run) with its min – max.",
                "On Figure 2's axes a run's point per fine-tuned checkpoint is (Toeplitzness, mean downstream score): x is "
                "the headline off-diagonal R² of P = E_P E_Pᵀ of that checkpoint (for schemes without a position table, "
                "the mean over its layer-0 heads' positional scores), read from the run's training log at that step or "
                "computed from the checkpoint the same way; y is the mean over the tasks fine-tuned at every checkpoint of "
                "each task's median score. The points are joined in step order, with an arrow into the latest, like "
                "ALBERT's v1 → v2. This y is the run's own task average: it is not comparable with the ALBERT benchmark "
                "average and is never drawn on its axis.",
            ),
        )
    ]


SECTION = Section("finetune", "Fine-tuning results", build, methods, references=("wennberg2021",))
