"""Figure of ``posviz hidden``: where position lives inside a model, layer by layer.

Four panels against the layer (0 = the embedding output): the positional share
with its null, the Toeplitzness of ``P_l = V_l V_lᵀ`` (off-diagonal R²) with its
null mean ± sd, the position probe's mean absolute error beside predicting the
middle, and the order probe's accuracy beside chance.
"""

from __future__ import annotations

import textwrap
from typing import Any

import numpy as np

from posviz.plots.common import new_figure, short_label


def _panel(ax, x: np.ndarray, value: np.ndarray, null: np.ndarray, *, label: str, null_label: str, ylabel: str,
           spread: np.ndarray | None = None) -> None:
    ax.plot(x, value, marker="o", color="C0", label=label)
    ax.plot(x, null, ls="--", color="0.4", label=null_label)
    if spread is not None and np.isfinite(spread).any():
        ax.fill_between(x, null - spread, null + spread, color="0.6", alpha=0.25, lw=0)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_xticks(x)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6.5, frameon=False)


def plot_hidden(result: Any, *, fig=None):
    """The four per-layer panels of one :class:`~posviz.observe.hidden.HiddenResult`.

    Parameters
    ----------
    result
        From :func:`posviz.observe.hidden.hidden`.
    fig
        A figure to draw on (a report page, which then carries the title and conventions); a new one by default.

    Returns
    -------
    matplotlib.figure.Figure
    """
    rows = result.records()
    x = np.array([r["layer"] for r in rows])

    def col(key: str) -> np.ndarray:
        return np.array([r[key] for r in rows], dtype=float)

    page = fig is not None
    fig = fig or new_figure(10, 7)
    axes = fig.subplots(2, 2, sharex=True)
    _panel(axes[0, 0], x, col("positional_share"), col("positional_share_null"), label="positional share",
           null_label="null (positions shuffled within blocks)", ylabel="between-position variance / total")
    _panel(axes[0, 1], x, col("toeplitzness_offdiag"), col("toeplitzness_null_offdiag"), label="Toeplitzness of P_l (off-diag. R²)",
           null_label="null mean ± sd (rows of V_l permuted)", ylabel="R²", spread=col("toeplitzness_null_std_offdiag"))
    _panel(axes[1, 0], x, col("probe_mae"), col("probe_mae_baseline"), label="linear probe, held-out blocks",
           null_label="always the middle", ylabel="mean absolute error (positions)")
    _panel(axes[1, 1], x, col("probe_order_accuracy"), np.full(len(x), 0.5), label="which comes first (logistic)",
           null_label="chance", ylabel="accuracy")
    for ax in axes[1]:
        ax.set_xlabel("layer (0 = embedding output)", fontsize=8)
    if page:  # a report page says what the figure shows in its own title and caption
        return fig
    fig.suptitle(f"Position inside {short_label(result.model, 60)}", fontsize=10)
    fig.supxlabel("\n".join(textwrap.wrap(result.conventions, 160)), fontsize=6, color="0.25", x=0.01, ha="left")
    return fig
