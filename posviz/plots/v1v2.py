"""The miniature ALBERT v1 → v2 figure (``scripts/albert_v1_v2.py``).

Three panels from the experiment's tables (one row per run and evaluation,
with ``variant``, ``seed``, ``step``, ``eval_accuracy`` and the Toeplitzness
fields of the training log):

* the TISA paper's Figure 2 in miniature: held-out accuracy against the
  headline Toeplitzness of each run's last evaluation, one point per seed, the
  mean ± sd over seeds as error bars, an arrow from the v1-like mean to the
  v2-like mean, and the runs' common start (step 0) for reference;
* the headline Toeplitzness against the step, mean ± sd over seeds per
  variant, with its null (dotted) and the full R² (faint dashed);
* the held-out accuracy against the step, mean ± sd over seeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from posviz.toeplitz.headline import HEADLINE_EXCLUDE_DIAGONAL, VARIANT_SHORT, field_suffix

#: Colour and legend name of each recipe.
RECIPES = {"v1": ("C1", "v1-like (dropout, less data, shorter)"), "v2": ("C0", "v2-like (no dropout, all data, longer)")}


def _series(rows: Sequence[dict[str, Any]], variant: str, field: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps and the mean and sd (ddof 1) over seeds of ``field`` at each step of one variant."""
    by_step: dict[int, list[float]] = {}
    for r in rows:
        if r["variant"] == variant and r.get(field) is not None:
            by_step.setdefault(int(r["step"]), []).append(float(r[field]))
    steps = np.array(sorted(by_step), dtype=float)
    values = [np.array(by_step[int(s)]) for s in steps]
    mean = np.array([v.mean() for v in values])
    sd = np.array([v.std(ddof=1) if v.size > 1 else 0.0 for v in values])
    return steps, mean, sd


def _sd(v: np.ndarray) -> float:
    """Standard deviation over seeds (ddof 1; 0 for one seed)."""
    return float(v.std(ddof=1)) if v.size > 1 else 0.0


def final_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last evaluation of each run (``variant``, ``seed``)."""
    last: dict[tuple[str, int], dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: r["step"]):
        last[(r["variant"], r["seed"])] = r
    return list(last.values())


def plot_v1_v2(rows: Sequence[dict[str, Any]], *, exclude_diagonal: bool = HEADLINE_EXCLUDE_DIAGONAL, title: str | None = None):
    """Draw the v1 → v2 figure.

    Parameters
    ----------
    rows
        One row per run and evaluation (``albert_v1_v2_evaluations.csv``).
    exclude_diagonal
        Put the off-diagonal R² (the headline) or the full R² on the Toeplitzness axes.
    title
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure
    """
    from posviz.plots.common import new_figure

    t_field = "toeplitzness_ep" + field_suffix(exclude_diagonal)
    null_field = "null_ep" + field_suffix(exclude_diagonal)
    other_field = "toeplitzness_ep" + field_suffix(not exclude_diagonal)
    label = f"Toeplitzness of E_P, {VARIANT_SHORT[exclude_diagonal]}"
    fig = new_figure(15, 4.8)
    fig2, traj, acc = fig.subplots(1, 3)
    finals = final_rows(rows)
    means = {}
    for variant, (color, name) in RECIPES.items():
        pts = [r for r in finals if r["variant"] == variant and r.get(t_field) is not None]
        if not pts:
            continue
        x = np.array([r[t_field] for r in pts], dtype=float)
        y = 100 * np.array([r["eval_accuracy"] for r in pts], dtype=float)
        fig2.scatter(x, y, s=14, color=color, alpha=0.55, lw=0)
        means[variant] = (x.mean(), y.mean())
        fig2.errorbar(x.mean(), y.mean(), xerr=_sd(x), yerr=_sd(y), fmt="o", ms=7, color=color, capsize=3,
                      label=f"{name}, step {int(pts[0]['step'])}: mean ± sd over {len(pts)} seeds")
        for field, ax, scale in ((t_field, traj, 1.0), ("eval_accuracy", acc, 100.0)):
            s, m, e = _series(rows, variant, field)
            ax.plot(s, scale * m, "-o", ms=2.5, lw=1.5, color=color, label=name)
            ax.fill_between(s, scale * (m - e), scale * (m + e), color=color, alpha=0.2, lw=0)
        s, m, _ = _series(rows, variant, null_field)
        traj.plot(s, m, ":", lw=1.2, color=color)
        s, m, _ = _series(rows, variant, other_field)
        traj.plot(s, m, "--", lw=0.9, color=color, alpha=0.45)
    start = [r for r in rows if int(r["step"]) == 0 and r.get(t_field) is not None]
    if start:
        fig2.scatter([np.mean([r[t_field] for r in start])], [100 * np.mean([r["eval_accuracy"] for r in start])],
                     marker="x", color="0.4", label="all runs at step 0 (mean)")
    if {"v1", "v2"} <= set(means):
        fig2.annotate("", xy=means["v2"], xytext=means["v1"], arrowprops={"arrowstyle": "->", "lw": 1.6, "color": "0.2"})
    fig2.set_xlabel(label)
    fig2.set_ylabel("held-out masked-token accuracy (%)")
    fig2.set_title("v1 → v2 at the end of training (cf. TISA paper, Fig. 2)", fontsize=9)
    fig2.legend(fontsize=6.5, loc="lower right")
    traj.set_ylabel(label)
    traj.set_title("along training: mean ± sd over seeds\n(dotted: null; faint dashed: " + VARIANT_SHORT[not exclude_diagonal] + ")",
                   fontsize=9)
    acc.set_ylabel("held-out masked-token accuracy (%)")
    acc.set_title("held-out accuracy: mean ± sd over seeds", fontsize=9)
    for ax in (traj, acc):
        ax.set_xlabel("training step")
        ax.legend(fontsize=6.5, loc="lower right")
    for ax in (fig2, traj, acc):
        ax.grid(alpha=0.3, lw=0.5)
        ax.tick_params(labelsize=7)
    fig.suptitle(title or "A miniature ALBERT v1 → v2 (posviz train, scheme absolute)", fontsize=11)
    return fig
