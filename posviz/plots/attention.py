"""Figures of the attention a model produces on a corpus (``posviz attention``), one layer per figure.

Top: each head's mean attention ``Abar_h`` (shared colour scale, 1st-99th
percentile, masked entries grey for causal models). Bottom left: the offset
profiles ``f(k)``; for the tiled path (long context), middle: the attention each key
position receives, with the layer's sink rate and mean span; bottom right: per head,
the Toeplitzness of ``Abar_h`` and the positional share as bars, each with its null
mean as a tick.
"""

from __future__ import annotations

import textwrap
from typing import Any

import numpy as np

from posviz.plots.common import short_label
from posviz.plots.heads import HeadMapOptions, draw_head_maps, draw_head_profiles, head_grid_figure, pooled_maps
from posviz.positional_scores import PositionalScores


def draw_attention_scores(ax, stats: Any) -> None:
    """Toeplitzness (off-diagonal) and positional share per head, bars with their null means as ticks."""
    h = len(stats.toeplitzness_offdiag)
    x = np.arange(h)
    w = 0.38
    ax.bar(x - w / 2, stats.toeplitzness_offdiag, width=w, color="C0", label="Toeplitzness of mean (off-diag.)")
    ax.bar(x + w / 2, stats.positional_share, width=w, color="C1", label="positional share")
    ax.scatter(x - w / 2, stats.null_mean_offdiag, marker="_", s=60, color="k", lw=1.2, zorder=3, label="null (row shuffles)")
    ax.scatter(x + w / 2, stats.positional_share_null, marker="_", s=60, color="k", lw=1.2, zorder=3)
    ax.set_ylim(min(0.0, float(np.nanmin(stats.toeplitzness_offdiag)) - 0.05), 1.25)
    ax.set_xticks(x)
    ax.set_xticklabels([str(i) for i in x], fontsize=5 if h > 16 else 6)
    ax.set_xlabel("head", fontsize=7)
    ax.set_ylabel("R²", fontsize=7)
    ax.tick_params(labelsize=6)
    ax.legend(fontsize=5.5, frameon=False, loc="upper center", ncol=3)


def draw_received(ax, stats: Any, *, eps: float) -> None:
    """Attention received by each key position, averaged over the queries that see it: one thin line per head, their mean."""
    starts, curves = stats.received_profile()
    for curve in curves:
        ax.plot(starts, curve, lw=0.6, alpha=0.45)
    ax.plot(starts, curves.mean(axis=0), lw=1.6, color="k", label="mean over heads")
    ax.set_yscale("log")
    ax.set_xlabel("key position j", fontsize=7)
    ax.set_ylabel("attention received (mean per query)", fontsize=7)
    ax.tick_params(labelsize=6)
    rate = float(np.mean(stats.sink_mass > eps))
    span = float(np.mean(stats.span90))
    ax.set_title(f"sink rate {rate:.0%} (> {eps:g}); mean span90 {span:.0f} positions", fontsize=7)
    ax.legend(fontsize=5.5, frameon=False)


def plot_attention_layer(result: Any, layer: int, *, max_pixels: int = 256, fig=None):
    """One layer of an :class:`~posviz.observe.attention.AttentionResult`: head grid of ``Abar_h``, profiles, scores.

    Parameters
    ----------
    result
        What :func:`posviz.attention` returned.
    layer
        One of ``result.layers``.
    max_pixels
        Each map is block-averaged to at most this many cells per side.
    fig
        Draw into this figure (a report page) instead of a new one; no title then.

    Returns
    -------
    matplotlib.figure.Figure
    """
    stats = result.stats[layer]
    stack = PositionalScores.from_dense(result.means[layer])
    h, n = stack.heads, result.seq_len  # the map may be block-averaged (tiled path, long blocks): n is the positions
    options = HeadMapOptions(causal=result.causal, max_pixels=max_pixels, value_label="mean attention")
    own = fig is None
    fig, top, bottom, ncols = head_grid_figure(h, min_width=10.0 if hasattr(stats, "received_profile") else 8.0, fig=fig)
    draw_head_maps(top, pooled_maps(stack, options), stats.toeplitzness_offdiag, n=n, ncols=ncols, options=options)
    tiled = hasattr(stats, "received_profile")  # the tiled path: the long-context statistics too
    axes = bottom.subplots(1, 3 if tiled else 2, width_ratios=[1.0, 1.0, 1.0] if tiled else None)
    pax, bax = axes[0], axes[-1]
    draw_head_profiles(pax, np.nan_to_num(stats.profiles, nan=0.0), causal=result.causal)
    pax.set_ylabel("f(k): mean attention at offset k", fontsize=7)
    if tiled:
        draw_received(axes[1], stats, eps=getattr(result, "sink_eps", 0.3))
    draw_attention_scores(bax, stats)
    if own:
        title = f"{short_label(result.model)}: attention on text, layer {layer} ({h} heads, {n} positions)"
        note = "\n".join(textwrap.wrap(result.conventions, width=int(fig.get_figwidth() * 15), break_long_words=False))
        fig.suptitle(f"{title}\n{note}", fontsize=8)
    return fig
