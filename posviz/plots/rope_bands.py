"""RoPE heads from their weights: the head x band energy heatmap (with a wavelength axis) and probe profiles.

One figure per layer: the share of each head's band energy per RoPE band (band 0,
the highest frequency, on the left; the top axis gives each band's wavelength
2π/θ_b in tokens; a dot marks each head's dominant band; a dashed line the first
band whose wavelength exceeds the trained context T), each head's probe
profile f_h(k) over the keys a causal query sees, and each head's energy share
in the high-frequency half. Definitions: docs/definitions.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from posviz.plots.common import new_figure
from posviz.plots.heads import draw_head_profiles


def _wavelength_label(w: float) -> str:
    if not np.isfinite(w):
        return "∞"
    return f"{w:.0f}" if w >= 10 else f"{w:.1f}"


def draw_band_heatmap(ax, share: np.ndarray, wavelength: Sequence[float], *, cmap: str = "viridis",
                      row_labels: Sequence[str] | None = None):
    """Head x band energy shares on ``ax``, wavelengths on a top axis; returns the image."""
    h, b = share.shape
    image = ax.imshow(share, aspect="auto", cmap=cmap, interpolation="nearest", vmin=0)
    dominant = np.argmax(share, axis=1)
    ax.scatter(dominant, np.arange(h), s=6, color="w", edgecolors="k", linewidths=0.3, zorder=3)
    step = max(1, int(np.ceil(b / 16)))
    ticks = np.arange(0, b, step)
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks], fontsize=6)
    ax.set_xlabel("band b (0 = highest frequency, θ_b largest)", fontsize=7)
    top = ax.secondary_xaxis("top")
    top.set_xticks(ticks)
    top.set_xticklabels([_wavelength_label(wavelength[t]) for t in ticks], fontsize=5, rotation=60)
    top.set_xlabel("wavelength 2π/θ_b (tokens)", fontsize=7)
    labels = list(row_labels) if row_labels is not None else [str(i) for i in range(h)]
    every = max(1, int(np.ceil(h / 32)))
    ax.set_yticks(np.arange(0, h, every))
    ax.set_yticklabels(labels[::every], fontsize=5 if h > 16 else 6)
    ax.set_ylabel("head", fontsize=7)
    return image


def draw_context_boundary(ax, boundary: Sequence[int | None], context: Sequence[int | None], *, bands: int) -> None:
    """Mark on a head x band heatmap where the bands beyond the trained context begin, row by row.

    A dashed line left of band ``boundary[i]`` (the first band whose wavelength 2π/θ_b
    exceeds ``context[i]``) over each run of rows that share it, labelled with ``T``;
    nothing for rows with no band beyond (``None``). Stacked layers may differ
    (Gemma 3's sliding-window layers have their own base). ``bands``: columns of the heatmap.
    """
    runs: list[tuple[int, int, int, int | None]] = []  # (first row, last row, band, T)
    for i, (b, t) in enumerate(zip(boundary, context, strict=True)):
        if b is None:
            continue
        if runs and runs[-1][1] == i - 1 and runs[-1][2:] == (b, t):
            runs[-1] = (runs[-1][0], i, b, t)
        else:
            runs.append((i, i, b, t))
    labelled = set()
    for first, last, b, t in runs:
        ax.vlines(b - 0.5, first - 0.5, last + 0.5, colors="r", linestyles="--", linewidth=1.0, zorder=4)
        if (b, t) not in labelled:  # one label per distinct boundary, on the side with room; the arrow points beyond
            labelled.add((b, t))
            right = b <= bands / 2
            ax.text(b - 0.4 if right else b - 0.6, first - 0.4, f"2π/θ_b > T = {t} →", color="r", fontsize=6,
                    ha="left" if right else "right", va="top", zorder=5,
                    bbox=dict(boxstyle="round,pad=0.15", fc="w", ec="none", alpha=0.8))


def draw_high_share(ax, high_share: np.ndarray) -> None:
    """Each head's share of band energy in the high-frequency half, as bars."""
    x = np.arange(len(high_share))
    ax.bar(x, high_share, color="C1", width=0.7)
    ax.axhline(0.5, color="0.5", lw=0.6, ls="--")
    ax.set_ylim(0, 1)
    ax.set_xticks(x[:: max(1, len(x) // 16)])
    ax.tick_params(labelsize=6)
    ax.set_xlabel("head", fontsize=7)
    ax.set_ylabel("energy share, high-frequency half", fontsize=7)


def plot_rope_bands(rows: list[dict[str, Any]], profiles: np.ndarray | None, *, title: str, conventions: str,
                    cmap: str = "viridis", row_labels: Sequence[str] | None = None, fig=None):
    """The band figure of one layer from ``posviz heads`` rows (one per head) and its probe profiles.

    Parameters
    ----------
    rows
        One row per head with ``band_energy``, ``band_wavelength``, ``high_share`` and ``probe``, and
        optionally ``context_boundary_band`` and ``context`` (the boundary line).
    profiles
        ``(heads, 2n - 1)`` probe profiles ``f_h(k)`` (the stack's offsets), or ``None`` to leave them out.
    title, conventions
        Title line and conventions line (no title is drawn into a given ``fig``).
    cmap
        Colormap of the heatmap.
    row_labels
        Labels of the heatmap rows (default: head numbers; several layers: ``L.h``).
    fig
        Draw into this figure (a report page) instead of a new one.

    Returns
    -------
    matplotlib.figure.Figure
    """
    energy = np.array([r["band_energy"] for r in rows], dtype=float)
    total = energy.sum(axis=1, keepdims=True)
    share = np.divide(energy, total, out=np.zeros_like(energy), where=total > 0)
    own = fig is None
    if own:
        fig = new_figure(10.0, 3.0 + 0.16 * len(rows) + 3.0)
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0 + 0.16 * len(rows) + 1.0, 2.8])
    ax = top.subplots()
    image = draw_band_heatmap(ax, share, rows[0]["band_wavelength"], cmap=cmap, row_labels=row_labels)
    draw_context_boundary(ax, [r.get("context_boundary_band") for r in rows], [r.get("context") for r in rows],
                          bands=share.shape[1])
    cb = top.colorbar(image, ax=ax, shrink=0.9, pad=0.01)
    cb.ax.tick_params(labelsize=6)
    cb.set_label("share of the head's band energy", fontsize=6)
    pax, bax = bottom.subplots(1, 2)
    if profiles is not None:
        draw_head_profiles(pax, profiles, causal=True)
        pax.set_ylabel(f"f_h(k), probe {rows[0]['probe']}", fontsize=7)
    else:
        pax.set_axis_off()
    draw_high_share(bax, np.array([r["high_share"] for r in rows], dtype=float))
    if own:
        import textwrap

        fig.suptitle(title + "\n" + "\n".join(textwrap.wrap(conventions, 150)), fontsize=8)
    return fig
