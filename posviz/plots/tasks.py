"""Figure of ``posviz extrapolate --task``: exact match and attention entropy against the task's length.

Left: exact-match accuracy (0-1, the whole y range always shown, so that a flat line at 0.02 never looks like a
curve) against the length, one line per model, each model's trained length marked by a dotted line of its colour;
lengths a model could not take leave a gap. Right: the attention entropy normalised by log(keys seen), the mean
over every measured head, against the length: where attention spreads out past the trained length.
"""

from __future__ import annotations

import textwrap
from typing import Any

import numpy as np

from posviz.plots.common import new_figure, short_label


def _series(result: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for r in result.runs:
        out.setdefault(r.model, []).append(r)
    return out


def _mean_entropy(record: Any) -> float:
    values = [v["entropy_normalised"] for v in record.heads.values()]
    return float(np.nanmean(np.concatenate(values))) if values else float("nan")


def plot_task_extrapolation(result: Any):
    """Exact match and normalised attention entropy against the length, one line per model.

    Parameters
    ----------
    result
        A :class:`~posviz.extrapolation.tasks.TaskResult`.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib

    series = _series(result)
    fig = new_figure(10, 4)
    acc, ent = fig.subplots(1, 2)
    colours = {m: matplotlib.colormaps["tab10"](i % 10) for i, m in enumerate(series)}
    for model, recs in series.items():
        x = [r.length for r in recs]
        acc.plot(x, [np.nan if r.accuracy is None else r.accuracy for r in recs], marker="o", ms=3.5, color=colours[model],
                 label=short_label(model, 40))
        ent.plot(x, [_mean_entropy(r) if r.heads else np.nan for r in recs], marker="o", ms=3.5, color=colours[model])
        if recs[0].train_length is not None:
            for ax in (acc, ent):
                ax.axvline(recs[0].train_length, color=colours[model], ls=":", lw=1, alpha=0.8)
    acc.set_ylim(-0.02, 1.02)
    acc.set_ylabel("exact match (greedy decoding)", fontsize=8)
    acc.set_title(f"{result.task}: exact match (dotted: trained length)", fontsize=9)
    acc.legend(fontsize=6.5, frameon=False)
    ent.set_ylim(0, 1.02)
    ent.set_ylabel("attention entropy / log(keys seen), mean over heads", fontsize=8)
    ent.set_title("attention spread", fontsize=9)
    for ax in (acc, ent):
        ax.set_xticks(result.lengths)
        ax.set_xticklabels([str(n) for n in result.lengths], fontsize=7)
        ax.set_xlabel(f"length ({_what(result.task)})", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.get_layout_engine().set(rect=(0, 0.07, 1, 0.93))  # room for the conventions below the panels
    fig.text(0.01, 0.01, "\n".join(textwrap.wrap(result.conventions, 230)), fontsize=5.5, color="0.35")
    return fig


def _what(task: str) -> str:
    from posviz.tasks import get_task

    return get_task(task).what
