"""RoPE band usage against training step (``posviz trajectory --measure bands``).

Left: each series' and layer's mean high-frequency share over heads (± sd over heads).
Right: the mean share of each band (band 0, the highest frequency, at the bottom)
at each checkpoint of the first series, averaged over heads and requested layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from posviz.plots.common import new_figure
from posviz.plots.trajectory import draw_checked
from posviz.series.integrity import flagged


def plot_band_trajectory(summary: Sequence[dict[str, Any]], wavelength: Sequence[float], *, title: str | None = None,
                         keep_duplicates: bool = False):
    """The two panels from :func:`posviz.series.bands.band_summary` rows.

    Parameters
    ----------
    summary
        One row per series, step and layer.
    wavelength
        The bands' wavelengths (of the first checkpoint), for the right panel's axis.
    title
        Figure title.
    keep_duplicates
        Draw rows marked duplicate or suspect as genuine (by default: hollow, off the lines, starred steps).

    Returns
    -------
    matplotlib.figure.Figure
    """
    fig = new_figure(11, 4.4)
    left, right = fig.subplots(1, 2)
    lines: dict[tuple, list[dict[str, Any]]] = {}
    for r in sorted(summary, key=lambda r: r["step"]):
        lines.setdefault((r["series"], r["layer"]), []).append(r)
    for i, ((series, layer), rs) in enumerate(lines.items()):
        x = np.array([r["step"] for r in rs], dtype=float)
        y = np.array([r["high_share_mean"] for r in rs])
        sd = np.array([r["high_share_sd"] for r in rs])
        draw_checked(left, x, y, [flagged(r) for r in rs], color=f"C{i % 10}", label=f"{series}, layer {layer}",
                     keep=keep_duplicates, ms=3.5, lw=1.3)
        left.fill_between(x, y - sd, y + sd, color=f"C{i % 10}", alpha=0.15, lw=0)
    left.axhline(0.5, color="0.5", lw=0.6, ls="--")
    left.set_ylim(0, 1)
    left.set_xlabel("training step")
    left.set_ylabel("energy share in the high-frequency half\n(mean ± sd over heads)")
    left.legend(fontsize=6, loc="best")
    left.grid(alpha=0.3)
    first = next(iter(lines))[0]
    steps = sorted({r["step"] for r in summary if r["series"] == first})
    grid = np.array([np.mean([r["band_share_mean"] for r in summary if r["series"] == first and r["step"] == s], axis=0)
                     for s in steps])
    image = right.imshow(grid.T, aspect="auto", origin="lower", cmap="viridis", interpolation="nearest")
    right.set_xticks(np.arange(len(steps)))
    marked = {r["step"] for r in summary if r["series"] == first and flagged(r)} if not keep_duplicates else set()
    right.set_xticklabels([f"{s}*" if s in marked else str(s) for s in steps], rotation=60, fontsize=6)
    b = grid.shape[1]
    ticks = np.arange(0, b, max(1, int(np.ceil(b / 12))))
    right.set_yticks(ticks)
    right.set_yticklabels([f"{t} ({wavelength[t]:.3g})" for t in ticks], fontsize=6)
    right.set_ylabel("band (wavelength 2π/θ_b, tokens)")
    right.set_xlabel(f"training step ({first})" + ("; * duplicate or suspect" if marked else ""))
    cb = fig.colorbar(image, ax=right, pad=0.01)
    cb.set_label("mean share of band energy", fontsize=7)
    fig.suptitle(title or "RoPE band usage along training", fontsize=11)
    return fig
