"""Figures of per-head positional attention (TISA paper, Figure 8, for any model).

* :func:`plot_heads`: one layer: a grid of head heatmaps on one shared colour
  scale (:func:`draw_head_maps`), the offset profiles ``f_hat(k)`` of all heads
  (``k = j - i``, :func:`draw_head_profiles`), and each head's Toeplitzness with
  its null baseline (:func:`draw_head_scores`); :class:`HeadMapOptions` says how.
* :func:`plot_layer_head_matrix`: many layers: the layer x head Toeplitzness
  matrix (and the excess over the null where there is one).

Large matrices are shown as exact block means (:meth:`PositionalScores.pooled`),
never built at full size.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from posviz.plots.common import new_figure, short_label
from posviz.plots.heatmap import colorbar_extend
from posviz.positional_scores import PositionalScores
from posviz.toeplitz.headline import HEADLINE_EXCLUDE_DIAGONAL
from posviz.toeplitz.result import ToeplitzScore
from posviz.util.format import score


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width=width, break_long_words=False)) if text else ""


@dataclass(frozen=True, kw_only=True)
class HeadMapOptions:
    """How :func:`plot_heads` draws one layer.

    Attributes
    ----------
    first_position
        Position of row/column 0 (axis labels).
    axis_label
        ``position`` or ``relative position`` (DeBERTa).
    causal
        Blank the entries a causal model masks (``k = j - i > 0``) and show
        profiles for ``k <= 0`` only.
    cmap
        Matplotlib colormap of the heatmaps.
    robust
        Clip the colour scale to the 1st-99th percentile (of all heads, or of
        each head with ``shared_scale=False``).
    shared_scale
        One colour scale for all heads (default), or one per head.
    max_pixels
        Each map is block-averaged to at most this many cells per side.
    exclude_diagonal
        Headline the Toeplitzness variant without the main diagonal.
    columns
        Heads per row (default: about square, at most 8).
    raw_images
        Embed each (pooled) map as an image with one pixel per cell and no
        resampling (small, exact PDFs), instead of rasterising it at the
        figure's resolution.
    value_label
        What the maps show, on the colourbar.
    """

    first_position: int = 0
    axis_label: str = "position"
    causal: bool = False
    cmap: str = "viridis"
    robust: bool = True
    shared_scale: bool = True
    max_pixels: int = 256
    exclude_diagonal: bool = HEADLINE_EXCLUDE_DIAGONAL
    columns: int | None = None
    raw_images: bool = False
    value_label: str = "position-only logit"


def plot_heads(
    stack: PositionalScores,
    scores: ToeplitzScore,
    *,
    title: str = "",
    conventions: str = "",
    options: HeadMapOptions | None = None,
    fig=None,
):
    """Grid of one layer's head maps, their offset profiles and Toeplitzness.

    Parameters
    ----------
    stack
        The layer's ``(heads, n, n)`` stack.
    scores
        Its :class:`~posviz.toeplitz.result.ToeplitzScore`.
    title
        First title line (model, layer, scheme).
    conventions
        The conventions line (LayerNorm, biases, scale, rows kept), printed
        under the title.
    options
        How to draw (colours, scale, pooling, causal masking); default
        :class:`HeadMapOptions`.
    fig
        Draw into this figure (e.g. a report page with a constrained layout
        engine) instead of a new one; no title is drawn then, the caller has its own.

    Returns
    -------
    matplotlib.figure.Figure
    """
    o = options or HeadMapOptions()
    h, n = stack.heads, stack.n
    pooled = pooled_maps(stack, o)
    own = fig is None
    fig, top, bottom, ncols = head_grid_figure(h, columns=o.columns, fig=fig)
    r2 = scores.toeplitzness_offdiag if o.exclude_diagonal else scores.toeplitzness
    draw_head_maps(top, pooled, r2, n=n, ncols=ncols, options=o)
    pax, bax = bottom.subplots(1, 2)
    draw_head_profiles(pax, scores.profiles, causal=o.causal)
    draw_head_scores(bax, scores, exclude_diagonal=o.exclude_diagonal)
    if own:
        chars = int(fig.get_figwidth() * 15)
        note = heads_scale_note(n, pooled.shape[-1], robust=o.robust, shared_scale=o.shared_scale)
        fig.suptitle(f"{title}\n{_wrap(conventions, chars)}\n({note})", fontsize=8)
    return fig


def head_grid_figure(heads: int, *, columns: int | None = None, min_width: float = 8.0, fig=None) -> tuple:
    """The layout of a head grid with a strip of panels below it, shared by every per-head figure.

    Returns ``(fig, top, bottom, ncols)``: the figure (a new one sized for the grid unless ``fig`` is given), the
    subfigure for :func:`draw_head_maps` and the one for the panels, and the grid's columns (``columns``, else all
    heads up to 4 and a near-square grid of at most 8 columns beyond).
    """
    ncols = columns or (heads if heads <= 4 else min(8, math.ceil(math.sqrt(heads))))
    nrows = math.ceil(heads / ncols)
    panel = 2.3
    if fig is None:
        fig = new_figure(max(panel * ncols + 1.2, min_width), panel * nrows + 3.6)
    top, bottom = fig.subfigures(2, 1, height_ratios=[panel * nrows, 2.8])
    return fig, top, bottom, ncols


def pooled_maps(stack: PositionalScores, o: HeadMapOptions) -> np.ndarray:
    """The ``(heads, m, m)`` block means shown, NaN where a causal model masks."""
    pooled, edges = stack.pooled(o.max_pixels)
    if o.causal:
        centers = (edges[:-1] + edges[1:] - 1) / 2.0
        pooled = np.where(centers[None, None, :] > centers[None, :, None], np.nan, pooled)
    return pooled


def draw_head_maps(container, pooled: np.ndarray, r2: np.ndarray, *, n: int, ncols: int, options: HeadMapOptions) -> list:
    """One heatmap per head in a grid on ``container`` (a figure or subfigure), with colourbars.

    Parameters
    ----------
    container
        Figure or subfigure to draw in.
    pooled
        ``(heads, m, m)`` maps as shown (block means of the ``n x n`` matrices).
    r2
        Each head's Toeplitzness, in its title.
    n
        Positions each map stands for (axis extent).
    ncols
        Heads per row.
    options
        Colours, scale and labels.

    Returns
    -------
    list
        The axes, one per head.
    """
    import matplotlib

    o = options
    h = pooled.shape[0]
    nrows = math.ceil(h / ncols)
    q = (1.0, 99.0) if o.robust else (0.0, 100.0)
    finite = pooled[np.isfinite(pooled)]
    limits = [_limits(finite, q)] * h if o.shared_scale else [_limits(p[np.isfinite(p)], q) for p in pooled]
    grid = container.add_gridspec(nrows, ncols)
    colormap = matplotlib.colormaps[o.cmap].with_extremes(bad="0.85")
    first = o.first_position
    ext = (first - 0.5, first + n - 0.5, first + n - 0.5, first - 0.5)
    image = None
    axes = []
    for i in range(h):
        r, c = divmod(i, ncols)
        ax = container.add_subplot(grid[r, c])
        axes.append(ax)
        image = ax.imshow(
            pooled[i],
            cmap=colormap,
            vmin=limits[i][0],
            vmax=limits[i][1],
            extent=ext,
            interpolation="none" if o.raw_images else "nearest" if pooled.shape[-1] <= 128 else "antialiased",
            rasterized=not o.raw_images,
        )
        ax.set_title(f"head {i}  T={score(r2[i], 3, negative_zero=True)}", fontsize=7, pad=2)
        ax.tick_params(labelsize=5, length=2, pad=1)
        ax.locator_params(nbins=3)
        # All maps share their axes: tick labels on the outer panels only (clearer, and
        # far fewer texts for the layout engine to measure).
        if c == 0:
            ax.set_ylabel(f"query {o.axis_label} i", fontsize=6)
        else:
            ax.tick_params(labelleft=False)
        if r == nrows - 1 or i + ncols >= h:
            ax.set_xlabel(f"key {o.axis_label} j", fontsize=6)
        else:
            ax.tick_params(labelbottom=False)
        if not o.shared_scale:
            cb = container.colorbar(image, ax=ax, shrink=0.8, pad=0.02)
            cb.ax.tick_params(labelsize=5)
    if image is not None and o.shared_scale:
        extend = colorbar_extend(finite, *limits[0]) if finite.size else "neither"
        cb = container.colorbar(image, ax=axes, shrink=0.8, extend=extend, pad=0.01)
        cb.ax.tick_params(labelsize=6)
        cb.set_label(f"{o.value_label} (shared scale)", fontsize=6)
    return axes


def draw_head_profiles(ax, profiles: np.ndarray, *, causal: bool = False) -> None:
    """Every head's offset profile ``f_hat(k)``, ``k = j - i``, on ``ax`` (``k <= 0`` only when causal).

    ``profiles`` is ``(heads, 2n - 1)``, offsets ``-(n-1) .. n-1``.
    """
    import matplotlib

    h, n = profiles.shape[0], (profiles.shape[1] + 1) // 2
    k = np.arange(1 - n, n)
    keep = k <= 0 if causal else np.ones_like(k, dtype=bool)
    kk, prof, step = _thin_profiles(k[keep], profiles[:, keep], MAX_PROFILE_POINTS)
    colors = matplotlib.colormaps["tab20" if h > 10 else "tab10"]
    for i in range(h):
        ax.plot(kk, prof[i], lw=0.7, color=colors(i % colors.N), label=f"{i}")
    ax.axvline(0, color="0.6", lw=0.5)
    ax.set_xlabel("offset k = j − i" + (f" (means of {step} offsets per point)" if step > 1 else ""), fontsize=7)
    ax.set_ylabel("f̂(k): mean along diagonal k", fontsize=7)
    ax.tick_params(labelsize=6)
    if h <= 32:
        ax.legend(title="head", fontsize=5, title_fontsize=5, ncol=max(1, math.ceil(h / 8)), frameon=False, loc="best")


def draw_head_scores(ax, scores: ToeplitzScore, *, exclude_diagonal: bool = HEADLINE_EXCLUDE_DIAGONAL) -> None:
    """Each head's Toeplitzness as a bar, its null mean as a tick (where there is one), on ``ax``."""
    h = scores.heads
    r2 = scores.toeplitzness_offdiag if exclude_diagonal else scores.toeplitzness
    x = np.arange(h)
    ax.bar(x, r2, color="C0", width=0.7, label="Toeplitzness")
    null = scores.null_mean_offdiag if exclude_diagonal else scores.null_mean
    if np.any(np.isfinite(null)):
        ax.scatter(x, null, marker="_", s=120, color="k", lw=1.5, label="null (row permutations)", zorder=3)
    ax.set_ylim(0, 1.2)
    ax.set_xticks(x)
    ax.set_xticklabels([str(i) for i in x], fontsize=5 if h > 16 else 6)
    ax.set_xlabel("head", fontsize=7)
    variant = "off-diagonal R²" if exclude_diagonal else "R² (all entries)"
    ax.set_ylabel(f"Toeplitzness, {variant}", fontsize=7)
    ax.tick_params(labelsize=6)
    ax.legend(fontsize=6, frameon=False, loc="upper center", ncol=2)


#: Offset profiles longer than this are drawn as means of consecutive offsets, so that
#: a 4096-position layer does not put 16 x 8191 vector points on a page.
MAX_PROFILE_POINTS = 1024


def _thin_profiles(k: np.ndarray, profiles: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Means of ``step`` consecutive offsets (``step = 1`` when already short enough)."""
    step = max(1, math.ceil(len(k) / limit))
    if step == 1:
        return k, profiles, 1
    edges = np.arange(0, len(k), step)
    counts = np.diff(np.append(edges, len(k)))
    return np.add.reduceat(k, edges) / counts, np.add.reduceat(profiles, edges, axis=1) / counts, step


def heads_scale_note(n: int, shown: int, *, robust: bool, shared_scale: bool) -> str:
    """How the head maps' colours and cells relate to the data (for captions)."""
    scope = "of all heads" if shared_scale else "of each head (own colour scales)"
    note = f"colours clipped to the 1st–99th percentile {scope}" if robust else f"full colour range {scope}"
    if shown < n:
        note += f"; maps shown as {n // shown}×{n // shown} block means"
    return note


def plot_layer_head_matrix(
    toeplitzness: np.ndarray,
    *,
    layers: Sequence[int],
    title: str,
    conventions: str,
    null_mean: np.ndarray | None = None,
    exclude_diagonal: bool = HEADLINE_EXCLUDE_DIAGONAL,
    cmap: str = "viridis",
    fig=None,
):
    """Layer x head Toeplitzness heatmap (plus the excess over the null when available).

    Parameters
    ----------
    toeplitzness
        ``(layers, heads)`` R^2 values.
    layers
        Layer index of each row.
    title, conventions
        Title lines.
    null_mean
        ``(layers, heads)`` null means (NaN where no null applies).
    exclude_diagonal
        Which variant the values are (for the labels).
    cmap
        Colormap of the Toeplitzness panel.
    fig
        Draw into this figure instead of a new one (no title then).

    Returns
    -------
    matplotlib.figure.Figure
    """
    t = np.asarray(toeplitzness, dtype=float)
    nl, nh = t.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        excess = None if null_mean is None or not np.any(np.isfinite(null_mean)) else (t - null_mean) / (1 - null_mean)
    panels = 1 + (excess is not None)
    pw = max(3.6, 0.38 * nh + 1.6)
    ph = max(3.0, 0.26 * nl + 1.8)
    own = fig is None
    if own:
        fig = new_figure(pw * panels + 0.4, ph + 1.1)
    variant = "off-diagonal R²" if exclude_diagonal else "R² (all entries)"
    specs = [("Toeplitzness, " + variant, t, cmap, 0.0, 1.0)]
    if excess is not None:
        specs.append(("excess over null = (R² − null)/(1 − null)", excess, "RdBu_r", -1.0, 1.0))
    annotate = nl * nh <= 400
    for p, (label, values, cm, lo, hi) in enumerate(specs):
        ax = fig.add_subplot(1, panels, p + 1)
        im = ax.imshow(values, cmap=cm, vmin=lo, vmax=hi, aspect="auto", interpolation="nearest")
        ax.set_xticks(range(nh))
        ax.set_xticklabels([str(i) for i in range(nh)], fontsize=6)
        ax.set_yticks(range(nl))
        ax.set_yticklabels([str(x) for x in layers], fontsize=6)
        ax.set_xlabel("head", fontsize=7)
        ax.set_ylabel("layer", fontsize=7)
        ax.set_title(label, fontsize=8)
        if annotate:
            for i in range(nl):
                for j in range(nh):
                    v = values[i, j]
                    if np.isfinite(v):
                        color = "white" if (v - lo) / (hi - lo) < 0.5 and cm == cmap else "black"
                        ax.text(j, i, score(v, 2, negative_zero=True), ha="center", va="center", fontsize=4.5, color=color)
        cb = fig.colorbar(im, ax=ax, shrink=0.85, pad=0.02)
        cb.ax.tick_params(labelsize=6)
    if own:
        chars = int((pw * panels + 0.4) * 15)
        fig.suptitle(f"{short_label(title, 120)}\n{_wrap(conventions, chars)}", fontsize=8)
    return fig


def _limits(values: np.ndarray, q: tuple[float, float]) -> tuple[float, float]:
    lo, hi = (float(v) for v in np.percentile(values, q)) if values.size else (0.0, 1.0)
    return (lo - 0.5, hi + 0.5) if hi <= lo else (lo, hi)
