"""TISA's Figure 2 with the runs of ``scripts/tisa_table3.py``: Toeplitzness of E_P against downstream score.

The paper's Figure 2 puts ALBERT v1 and v2 on two axes: how Toeplitz P = E_P E_Pᵀ
is, and benchmark performance. Here every kept run of the experiment is a point:

* ``figure2.csv`` / ``.json``: one row per run at its last checkpoint, with the
  headline (off-diagonal) Toeplitzness of E_P and its null, the mean over the
  layer-0 heads' positional scores, the masked-LM accuracy, each task's median over
  fine-tuning seeds and their mean (``mean_score``);
* ``figure2.md``: per configuration with a position table, the Toeplitzness of E_P and
  the mean score of each of its runs, by seed;
* ``figure2.png``: left, the runs that have a position table (absolute, absolute +
  TISA, TUPE-A) at their last checkpoint, x the Toeplitzness of E_P and y the mean
  score over the tasks; right, the runs fine-tuned along pre-training, each a path
  through its checkpoints (open circle: the first, arrow into the last), as v1 → v2
  in the paper, drawn by ``posviz toeplitzness --plot-vs-glue --run``'s own panel
  (:func:`posviz.plots.scatter.draw_downstream_panel`).

The x values come from the runs' training logs (the same numbers ``posviz trajectory``
shows). The ALBERT points of the paper's figure need the eight ALBERT checkpoints from
the Hub; ``posviz toeplitzness --plot-vs-glue --run RUN`` draws them beside a run
where the Hub is reachable.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: The log fields of the headline Toeplitzness (off-diagonal R²) and its null.
EP, EP_NULL, HEADS = "toeplitzness_ep_offdiag", "null_ep_offdiag", "toeplitzness_heads_offdiag_mean"
#: A run folder's name, ``CONFIG-sSEED`` (``scripts/tisa_table3.py`` names them so).
RUN_NAME = re.compile(r"^(?P<config>.+)-s(?P<seed>\d+)$")
#: Colour per configuration (arm (a) greens from light to dark with S, TUPE-A orange).
COLORS = {"a-baseline": "#444444", "a-S1": "#a1d99b", "a-S3": "#41ab5d", "a-S5": "#006d2c", "tupe-A": "#d95f02"}
#: The configurations' names in ``figure2.md`` (others keep their label).
NAMES = {"a-baseline": "absolute", "a-S1": "absolute + TISA S = 1", "a-S3": "absolute + TISA S = 3",
         "a-S5": "absolute + TISA S = 5", "tupe-A": "TUPE-A"}


def run_rows(runs: Mapping[str, Sequence[Path]]) -> list[dict[str, Any]]:
    """One row per run folder at its last fine-tuned checkpoint (see the module docstring); runs without results are left out."""
    from posviz.finetuning.results import load_results
    from posviz.finetuning.tables import seed_values
    from posviz.read.runs import LOG_JSON
    from posviz.train.log import load_run_log

    rows = []
    for config, folders in runs.items():
        for folder in folders:
            per_step = {step: tasks for values in seed_values(load_results(folder)).values() for step, tasks in values.items()}
            if not per_step:
                continue
            step = max(per_step)
            evaluations = load_run_log(folder)["evaluations"] if (folder / LOG_JSON).is_file() else []
            log = {int(r["step"]): r for r in evaluations}.get(step, {})  # no log: the row keeps its scores alone
            medians = {task: statistics.median(v) for task, v in sorted(per_step[step].items())}
            rows.append({
                "config": config, "run": folder.name, "step": step,
                "toeplitzness_ep": log.get(EP), "null_ep": log.get(EP_NULL), "toeplitzness_heads_mean": log.get(HEADS),
                "mlm_accuracy": log.get("eval_accuracy"), **{f"score {t}": v for t, v in medians.items()},
                "mean_score": statistics.fmean(medians.values()), "tasks": len(medians),
            })
    return rows


def figure2_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """Per configuration with a position table: the Toeplitzness of E_P and the mean score of each run, by seed.

    ``rows`` are :func:`run_rows`'; runs are named ``CONFIG-sSEED``.
    """
    shown = [r for r in rows if r["toeplitzness_ep"] is not None]
    seed = {r["run"]: int(RUN_NAME.match(r["run"])["seed"]) for r in shown}
    order = [*COLORS, *sorted({r["config"] for r in shown} - set(COLORS))]
    lines = ["| configuration | seeds | Toeplitzness of E_P per run | mean score per run (%) |", "|---|---|---|---|"]
    for config in order:
        mine = sorted((r for r in shown if r["config"] == config), key=lambda r: seed[r["run"]])
        if mine:
            seeds = ", ".join(str(seed[r["run"]]) for r in mine)
            ep = ", ".join(f"{r['toeplitzness_ep']:.3f}" for r in mine)
            score = ", ".join(f"{r['mean_score']:.1f}" for r in mine)
            lines.append(f"| {NAMES.get(config, config)} | {seeds} | {ep} | {score} |")
    return "\n".join(lines) + "\n"


def plot_figure2(rows: Sequence[dict[str, Any]], paths: Sequence[Any], configs: Sequence[str] = ()):
    """The two-panel figure (module docstring) from :func:`run_rows` and the runs' downstream paths (``configs``: theirs)."""
    from posviz.plots.common import new_figure
    from posviz.plots.scatter import draw_downstream_panel
    from posviz.series.downstream import DOWNSTREAM_YLABEL

    fig = new_figure(12, 5.2)
    left, right = fig.subplots(1, 2)
    shown = [r for r in rows if r["toeplitzness_ep"] is not None]
    order = [*COLORS, *sorted({r["config"] for r in shown} - set(COLORS))]
    for config in [c for c in order if any(r["config"] == c for r in shown)]:
        mine = [r for r in shown if r["config"] == config]
        runs = f"{len(mine)} run{'s' if len(mine) != 1 else ''}"
        left.scatter([r["toeplitzness_ep"] for r in mine], [r["mean_score"] for r in mine], s=36, label=f"{config} ({runs})",
                     color=COLORS.get(config), gid=f"runs:{config}", zorder=3)
    nulls = [r["null_ep"] for r in shown if r["null_ep"] is not None]
    if nulls:  # the Toeplitzness of shuffled tables: what "not Toeplitz at all" scores
        left.axvspan(min(nulls), max(nulls), color="0.85", zorder=1, gid="null-band", label="null (shuffled E_P), min–max")
    tasks = sorted({k[len("score "):] for r in shown for k in r if k.startswith("score ")})
    left.set_xlabel("Toeplitzness of P = E_P E_Pᵀ (off-diagonal R², last checkpoint)")
    left.set_ylabel(f"Mean score over {len(tasks)} tasks (%)\n(median over fine-tuning seeds per task)")
    left.set_title("Runs with a position table, at their last checkpoint\n(" + ", ".join(tasks) + ")", fontsize=9)
    left.grid(True, color="0.9", lw=0.8)
    if shown:
        left.legend(fontsize=8, loc="center left", bbox_to_anchor=(0.06, 0.55))  # clear of the runs; "best" hid one
    else:
        left.text(0.5, 0.5, "no run with a position table and a training log yet", ha="center", transform=left.transAxes)
    if paths:
        colors = [COLORS[c] for c in configs] if len(configs) == len(paths) and all(c in COLORS for c in configs) else None
        draw_downstream_panel(right, paths, xlabel="Toeplitzness of P = E_P E_Pᵀ (off-diagonal R²)", colors=colors,
                              title="Fine-tuned along pre-training, one path per run\n(open circle: first checkpoint; arrow: last)")
        common = set.intersection(*(set(p.tasks) for p in paths))
        right.set_ylabel(f"Score on {', '.join(sorted(common))} (%)\n(median over fine-tuning seeds)" if len(common) == 1
                         and all(len(p.tasks) == 1 for p in paths) else DOWNSTREAM_YLABEL)
    else:
        right.set_axis_off()
    fig.suptitle("TISA's Figure 2 with retrained runs: Toeplitzness of E_P against downstream score", fontsize=10)
    return fig


def figure2(runs: Mapping[str, Sequence[Path]], curve: Sequence[str]) -> tuple[list[dict[str, Any]], Any]:
    """The rows and the figure; ``curve`` names the configurations fine-tuned along pre-training."""
    from posviz.read.runs import LOG_JSON
    from posviz.series.downstream import run_downstream

    rows = run_rows(runs)
    paths, configs = [], []  # a path's configuration gives its colour, as on the left panel
    for config in curve:
        for folder in [f for f in runs.get(config, []) if (f / LOG_JSON).is_file()]:
            path = run_downstream(folder, label=folder.name)
            if path is not None and len(path.steps) > 1:
                paths.append(path)
                configs.append(config)
    return rows, (plot_figure2(rows, paths, configs) if rows else None)
