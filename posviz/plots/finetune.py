"""Figures of fine-tuning results: TISA's Table 3, the score along pre-training, one run's tasks.

* :func:`plot_table3`: one panel per task (and the average), per arm its baseline and
  TISA variants as medians over pre-training seeds with their min–max as error bars
  (the rows of :func:`posviz.finetuning.tables.table3`).
* :func:`plot_score_by_step`: downstream score against pre-training step, one line
  per configuration (mean over pre-training seeds, band: min–max, dots: each run;
  the rows of :func:`posviz.finetuning.tables.score_by_step`), TUPE's "faster
  pre-training" figure.
* :func:`draw_run_results`: one run's median score per task, against the
  pre-training step when several checkpoints were fine-tuned, as bars otherwise
  (the report's fine-tuning page).

Artists carry ``gid`` values (``table3:TASK:ARM:LABEL`` and its ``table3-spread:...``,
``by-step:CONFIG``, ``by-step-band:CONFIG``, ``run-task:TASK``) so that tests and callers can find the plotted data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from posviz.plots.common import new_figure

_COLORS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666")


def plot_table3(rows: Sequence[dict[str, Any]], *, columns: Sequence[str] = ("baseline", "S=1", "S=3", "S=5"),
                title: str | None = None, ncols: int = 3):
    """Table 3 as a figure: per task, per arm, each column's median with its seed spread.

    Parameters
    ----------
    rows
        Output of :func:`posviz.finetuning.tables.table3`.
    columns
        The column labels the rows use (baseline first).
    title
        Figure title (default names the metric and the aggregation).
    ncols
        Panels per figure row.

    Returns
    -------
    matplotlib.figure.Figure
    """
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    by = {(r["task"], r["arm"]): r for r in rows}
    ncols = max(1, min(ncols, len(tasks)))
    nrows = math.ceil(len(tasks) / ncols) if tasks else 1
    fig = new_figure(3.6 * ncols + 0.6, 2.9 * nrows + 0.8)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    width = len(columns) + 1  # one empty slot between arms
    for ax, task in zip(axes, tasks, strict=False):
        for a, arm in enumerate(arms):
            r = by.get((task, arm))
            if r is None:
                continue
            for c, label in enumerate(columns):
                if r[label] is None:
                    continue
                x, y = a * width + c, r[label]
                color = "0.35" if c == 0 else _COLORS[(c - 1) % len(_COLORS)]
                bars = ax.errorbar([x], [y], yerr=[[y - r[f"{label} min"]], [r[f"{label} max"] - y]], fmt="o", ms=5,
                                   color=color, capsize=3, lw=1.2)
                bars.lines[0].set_gid(f"table3:{task}:{arm}:{label}")
                bars.lines[2][0].set_gid(f"table3-spread:{task}:{arm}:{label}")
            if r[columns[0]] is not None:
                ax.hlines(r[columns[0]], a * width - 0.4, a * width + len(columns) - 0.6, colors="0.6", linestyles=":", lw=1)
        ax.set_xticks([a * width + c for a in range(len(arms)) for c in range(len(columns))],
                      [f"({arm})\n{label}" if c == 0 else label for arm in arms for c, label in enumerate(columns)], fontsize=7)
        deltas = [f"({arm}) |Δ| {by[(task, arm)]['abs_delta']:.1f}" for arm in arms
                  if (task, arm) in by and by[(task, arm)]["abs_delta"] is not None]
        ax.set_title(task + ("\n" + ", ".join(deltas) if deltas else ""), fontsize=8.5)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(axis="y", color="0.9", lw=0.8)
        ax.margins(x=0.08, y=0.15)
    for ax in axes[len(tasks):]:
        ax.set_visible(False)
    first = rows[0] if rows else {"metric": "score", "aggregate": "nested"}
    how = ("median over pre-training seeds of each run's median over fine-tuning seeds" if first["aggregate"] == "nested"
           else "median over all (pre-training × fine-tuning seed) values")
    fig.suptitle(title or f"Downstream {first['metric']} (%), {how}; bars: min–max; dotted: the arm's baseline", fontsize=10)
    return fig


def plot_score_by_step(rows: Sequence[dict[str, Any]], *, title: str | None = None, ylabel: str | None = None,
                       colors: Mapping[str, str] | None = None):
    """Downstream score against pre-training step, one line per configuration with its seed spread.

    Parameters
    ----------
    rows
        Output of :func:`posviz.finetuning.tables.score_by_step`.
    title, ylabel
        Figure title and y label (defaults name the tasks averaged).
    colors
        ``{configuration: colour}`` (default: the palette in turn), to match other figures of the same runs.

    Returns
    -------
    matplotlib.figure.Figure
    """
    fig = new_figure(7.5, 4.6)
    ax = fig.subplots()
    configs = list(dict.fromkeys(r["config"] for r in rows))
    for i, config in enumerate(configs):
        mine = [r for r in rows if r["config"] == config]
        color = (colors or {}).get(config, _COLORS[i % len(_COLORS)])
        steps = [r["step"] for r in mine]
        n = max(r["n"] for r in mine)
        ax.plot(steps, [r["mean"] for r in mine], "-o", ms=4, lw=1.6, color=color, gid=f"by-step:{config}",
                label=f"{config} (mean of {n} run{'s' if n != 1 else ''})")
        ax.fill_between(steps, [r["min"] for r in mine], [r["max"] for r in mine], color=color, alpha=0.18, lw=0,
                        gid=f"by-step-band:{config}")
        xs = [r["step"] for r in mine for _ in r["values"]]
        ys = [v for r in mine for v in r["values"].values()]
        ax.plot(xs, ys, ".", ms=3.5, color=color, alpha=0.6, gid=f"by-step-runs:{config}")
    tasks = rows[0]["tasks"] if rows else []
    ax.set_xlabel("pre-training step (fine-tuned checkpoint)")
    ax.set_ylabel(ylabel or ("Mean downstream score over tasks (%)" if len(tasks) > 1 else f"{', '.join(tasks)} score (%)"))
    ax.grid(True, color="0.9", lw=0.8)
    ax.legend(fontsize=8, frameon=False, loc="best")
    fig.suptitle(title or f"Downstream score along pre-training (band: min–max over pre-training seeds; dots: each run)\n"
                 f"tasks: {', '.join(tasks)}", fontsize=9.5)
    return fig


def draw_run_results(ax, medians: Sequence[dict[str, Any]], *, metric: str = "score", fontsize: float = 8) -> list:
    """One run's median ``metric`` per task: lines over the pre-training step, or bars for one checkpoint.

    Parameters
    ----------
    ax
        Matplotlib Axes.
    medians
        The run's ``"median"`` records (:func:`posviz.finetuning.results.median_records`),
        with ``min``/``max`` drawn as error bars.
    metric
        The metric drawn (default each task's score).
    fontsize
        Legend and tick label size.

    Returns
    -------
    list
        One artist per task: an errorbar container whose data line has gid ``run-task:TASK``, or a bar container
        with that gid.
    """
    recs = [r for r in medians if r.get("seed") == "median" and r["metric"] == metric and r.get("step") is not None]
    tasks = sorted({r["task"] for r in recs})
    steps = sorted({int(r["step"]) for r in recs})
    artists = []
    for i, task in enumerate(tasks):
        mine = sorted((r for r in recs if r["task"] == task), key=lambda r: int(r["step"]))
        ys = [float(r["value"]) for r in mine]
        err = [[y - float(r["min"]) for y, r in zip(ys, mine, strict=True)], [float(r["max"]) - y for y, r in zip(ys, mine, strict=True)]]
        color = _COLORS[i % len(_COLORS)]
        if len(steps) > 1:
            art = ax.errorbar([int(r["step"]) for r in mine], ys, yerr=err, fmt="-o", ms=4, lw=1.4, capsize=2.5, color=color,
                              label=task)
            art.lines[0].set_gid(f"run-task:{task}")  # the data line (the container's gid spreads to every part)
        else:
            art = ax.bar([i], ys, yerr=err, color=color, capsize=3, width=0.6, label=task, gid=f"run-task:{task}")
        artists.append(art)
    if len(steps) > 1:
        ax.set_xlabel("pre-training step (fine-tuned checkpoint)", fontsize=fontsize)
    else:
        ax.set_xticks(range(len(tasks)), tasks, fontsize=fontsize, rotation=15)
        ax.set_xlabel(f"task (checkpoint of step {steps[0]})" if steps else "task", fontsize=fontsize)
    ax.set_ylabel(f"median {metric} over fine-tuning seeds (%)\n(bars: min–max)", fontsize=fontsize)
    ax.tick_params(labelsize=fontsize)
    ax.grid(axis="y", color="0.9", lw=0.8)
    if len(steps) > 1:
        ax.legend(fontsize=fontsize, frameon=False, loc="best")
    return artists
