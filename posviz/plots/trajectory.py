"""Toeplitzness of E_P against training step, one line per series, with the null band (``posviz trajectory``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: The two panels, the headline variant (off-diagonal R², :mod:`posviz.toeplitz.headline`) first:
#: (R² field, null-mean field, null-sd field, y label).
PANELS = (
    ("toeplitzness_offdiag", "null_mean_offdiag", "null_std_offdiag", "Toeplitzness of P = E_P E_Pᵀ, off-diagonal R²"),
    ("toeplitzness", "null_mean", "null_std", "full R² (all n² entries; its null falls as the diagonal\nstops dominating)"),
)
#: The panels of ``posviz trajectory --measure attention`` (means over the chosen layers' heads).
ATTENTION_PANELS = (
    ("toeplitzness_offdiag", "null_mean_offdiag", "null_std_offdiag", "Toeplitzness of mean attention,\noff-diagonal R² (mean over heads)"),
    ("positional_share", "positional_share_null", "positional_share_null_std", "positional share (mean over heads)"),
)
#: The tiled path's third panel of ``--measure attention``: how far a query's attention reaches.
SPAN_PANEL = ("span90", "", "", "distance holding 90 % of a query's\nattention (tokens, mean over heads)")
#: ``posviz trajectory --measure hidden``: one line per (series, layer).
HIDDEN_PANELS = (
    ("toeplitzness_offdiag", "toeplitzness_null_offdiag", "toeplitzness_null_std_offdiag", "Toeplitzness of P_l = V_l V_lᵀ,\noff-diagonal R²"),
    ("positional_share", "positional_share_null", "", "positional share of the hidden states"),
    ("probe_mae", "probe_mae_baseline", "", "position probe: mean absolute error\n(dotted: always the middle)"),
)


def draw_checked(ax, x, y, flagged, *, color: str, label: str | None = None, keep: bool = False, **style: Any) -> None:
    """A series as a line through its trusted points; duplicates and suspects (``flagged``) hollow and off the line.

    With ``keep`` every point is drawn as genuine (``--keep-duplicates``).
    """
    import numpy as np

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    bad = np.zeros(x.shape, bool) if keep else np.asarray(flagged, dtype=bool)
    ax.plot(x[~bad], y[~bad], "o-", color=color, label=label, **style)
    if bad.any():
        ax.plot(x[bad], y[bad], "o", color=color, mfc="none", ms=style.get("ms", 3.5) + 1.5, mew=1.1,
                alpha=style.get("alpha", 1.0))


def _by_series(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: r["step"]):
        out.setdefault(r["series"], []).append(r)
    return out


def plot_trajectory(rows: Sequence[dict[str, Any]], *, band: bool = False, title: str | None = None,
                    panels: Sequence[tuple[str, str, str, str]] = PANELS, null_label: str = "null mean ± sd (row-permuted E_P)",
                    keep_duplicates: bool = False):
    """Panels (by default off-diagonal R², the headline, then full R²) against step: each series with its null mean ± sd as a band.

    Parameters
    ----------
    rows
        Rows of :func:`posviz.series.points.series_rows`.
    band
        Also draw the mean ± sd over series at the steps every series has.
    title
        Figure title.
    panels
        ``(field, null field, null sd field, y label)`` of each panel (:data:`PANELS`,
        :data:`ATTENTION_PANELS`, :data:`HIDDEN_PANELS`).
    null_label
        Legend entry of the null lines.
    keep_duplicates
        Draw rows marked ``duplicate_of`` or ``suspect`` (:mod:`posviz.series.integrity`) as genuine; by
        default they are hollow, off the lines and out of the band.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import numpy as np

    from posviz.plots.common import new_figure
    from posviz.series.integrity import flagged
    from posviz.series.points import series_band

    fig = new_figure(5.5 * len(panels), 4.4)
    axes = np.atleast_1d(fig.subplots(1, len(panels), sharex=True))
    trusted = [r for r in rows if keep_duplicates or not flagged(r)]
    groups = _by_series(rows)
    steps = np.array([r["step"] for r in rows], dtype=float)
    positive = steps[steps > 0]
    log_x = positive.size > 0 and positive.max() / positive.min() >= 100
    for ax, (field, null_field, sd_field, ylabel) in zip(axes, panels, strict=True):
        for i, (name, rs) in enumerate(groups.items()):
            color = f"C{i % 10}"
            x = np.array([r["step"] for r in rs], dtype=float)
            y = np.array([r[field] for r in rs], dtype=float)
            null = np.array([r.get(null_field, np.nan) for r in rs], dtype=float)
            sd = np.array([r.get(sd_field) or 0.0 for r in rs], dtype=float)
            bad = np.array([flagged(r) for r in rs], dtype=bool)
            draw_checked(ax, x, y, bad, color=color, label=name, keep=keep_duplicates, lw=1.4, ms=3.5,
                         alpha=0.5 if band else 1.0)
            ax.plot(x, null, ":", color=color, lw=1)
            ax.fill_between(x, null - sd, null + sd, color=color, alpha=0.12, lw=0)
        if band and len(groups) > 1:
            stats = series_band(trusted, field)
            if stats:
                bx, mean, sdv = (np.array(v, dtype=float) for v in list(zip(*stats, strict=True))[:3])
                ax.plot(bx, mean, "-", color="black", lw=2, label=f"mean over {len(groups)} series")
                ax.fill_between(bx, mean - sdv, mean + sdv, color="black", alpha=0.15, lw=0)
        ax.set_ylabel(ylabel)
        ax.set_xlabel("training step")
        if log_x:
            ax.set_xscale("symlog", linthresh=float(positive.min()))
        ax.grid(alpha=0.3)
    axes[0].plot([], [], ":", color="grey", label=null_label)
    if not keep_duplicates and len(trusted) < len(rows):
        axes[0].plot([], [], "o", color="grey", mfc="none", label="duplicate or suspect (left out of lines)")
    axes[0].legend(fontsize=7, loc="best")
    fig.suptitle(title or "Toeplitzness of E_P along training", fontsize=11)
    return fig
