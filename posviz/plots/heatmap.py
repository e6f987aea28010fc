"""Heatmaps of P = E_P E_P^T (TISA paper, Figure 1) with an optional offset profile."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from posviz.plots.common import new_figure, short_label
from posviz.positional_scores import PositionalScores
from posviz.read.embeddings import PositionEmbeddings
from posviz.toeplitz.headline import HEADLINE_EXCLUDE_DIAGONAL, VARIANT_SHORT, field_suffix
from posviz.toeplitz.profile import head_profile
from posviz.util.format import score as fmt

NORMALIZE_LABEL = {"none": "E Eᵀ", "cosine": "cosine(eᵢ, eⱼ)", "center": "(E − ē)(E − ē)ᵀ"}


def plot_heatmap(
    embeddings: PositionEmbeddings | Sequence[PositionEmbeddings],
    *,
    normalize: str = "none",
    cmap: str = "hot",
    shared_scale: bool = False,
    robust: bool = True,
    profile: bool | None = None,
    max_pixels: int = 1024,
    columns: int | None = None,
    exclude_diagonal: bool = HEADLINE_EXCLUDE_DIAGONAL,
):
    """Plot ``P = E E^T`` for one or more models, each panel titled with its Toeplitzness.

    Parameters
    ----------
    embeddings
        One :class:`~posviz.read.embeddings.PositionEmbeddings` or a sequence of them
        (one panel each).
    normalize
        ``none``, ``cosine`` or ``center`` (see :func:`posviz.positional_scores.normalize_embeddings`).
    cmap
        Matplotlib colormap name; ``hot`` matches the TISA paper's Figure 1.
    shared_scale
        Use one colour scale for all panels (and one colourbar).
    robust
        Set colour limits to the 1st and 99th percentiles, so that a few large
        entries (often the first positions' diagonal) do not wash out the map.
    profile
        Draw the diagonal profile (mean and spread of P at each offset
        ``k = j - i``) under each heatmap; default: only for a single model.
    max_pixels
        Larger matrices are block-averaged to at most this many cells per side;
        the block means are computed exactly from E without building P.
    columns
        Panels per row (default: up to 4).
    exclude_diagonal
        The Toeplitzness variant in each panel's title (default: the headline,
        off-diagonal R²; see :mod:`posviz.toeplitz.headline`), with its null and excess.

    Returns
    -------
    matplotlib.figure.Figure
    """
    items = [embeddings] if isinstance(embeddings, PositionEmbeddings) else list(embeddings)
    if not items:
        raise ValueError("nothing to plot")
    if profile is None:
        profile = len(items) == 1
    ncols = columns or min(len(items), 4)
    nrows = math.ceil(len(items) / ncols)
    stacks = [PositionalScores.from_embeddings(pe.matrix, normalize) for pe in items]
    pooled = [s.pooled(max_pixels) for s in stacks]
    limits = [color_limits(p[0], robust) for p in pooled]
    if shared_scale:
        allp = np.concatenate([p[0].ravel() for p in pooled])
        limits = [color_limits(allp, robust)] * len(limits)
    panel_h = 4.6 + (1.6 if profile else 0.0)
    fig = new_figure(3.9 * ncols + 0.8 * shared_scale, panel_h * nrows + 0.3)
    grid = fig.add_gridspec(nrows * (2 if profile else 1), ncols, height_ratios=([3.2, 1.2] if profile else [1]) * nrows)
    image = None
    for idx, (pe, stack, (mat, _)) in enumerate(zip(items, stacks, pooled, strict=True)):
        r, c = divmod(idx, ncols)
        ax = fig.add_subplot(grid[r * (2 if profile else 1), c])
        image = draw_matrix(ax, mat[0], pe.positions, cmap=cmap, limits=limits[idx], n=pe.n)
        ax.set_title(f"{short_label(pe.model)}\n{pe.n}×{pe.dim}, {pe.rows_note()}\n{score_line(stack, exclude_diagonal)}", fontsize=8)
        if not shared_scale:
            cb = fig.colorbar(image, ax=ax, shrink=0.85, extend=colorbar_extend(mat, *limits[idx]))
            cb.ax.tick_params(labelsize=7)
        if profile:
            draw_profile(fig.add_subplot(grid[r * 2 + 1, c]), head_profile(stack, 0, spread=pe.n <= 8192))
    if shared_scale and image is not None:
        cb = fig.colorbar(image, ax=fig.axes, shrink=0.6, extend=colorbar_extend(allp, *limits[0]))
        cb.ax.tick_params(labelsize=7)
    scale_note = "colours clipped to the 1st–99th percentile" if robust else "full colour range"
    fig.suptitle(f"Position similarity P = {NORMALIZE_LABEL.get(normalize, normalize)}\n({scale_note})", fontsize=9)
    return fig


def score_line(stack: PositionalScores, exclude_diagonal: bool = HEADLINE_EXCLUDE_DIAGONAL) -> str:
    """``Toeplitzness 0.477 (off-diagonal R²)`` and ``null 0.004, excess 0.475`` (two lines) for one ``P``."""
    import warnings

    from posviz.positional_scores import PosvizWarning
    from posviz.toeplitz.engine import score

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PosvizWarning)  # a constant P is reported by the score's NaN
        s = score(stack)[0]
    sfx = field_suffix(exclude_diagonal)
    return (f"Toeplitzness {fmt(getattr(s, 'toeplitzness' + sfx), 3)} ({VARIANT_SHORT[exclude_diagonal]})\n"
            f"null {fmt(getattr(s, 'null_mean' + sfx), 3)}, excess {fmt(getattr(s, 'excess' + sfx), 3)}")


def color_limits(values: np.ndarray, robust: bool = True) -> tuple[float, float]:
    """Colour limits: the 1st and 99th percentiles (``robust``) or the full range."""
    q = (1.0, 99.0) if robust else (0.0, 100.0)
    lo, hi = np.percentile(values, q)
    return float(lo), float(hi)


def draw_matrix(
    ax,
    mat: np.ndarray,
    positions: tuple[int, int],
    *,
    cmap: str,
    limits: tuple[float, float],
    n: int,
    fontsize: float = 8,
    interpolation: str | None = None,
    rasterized: bool = True,
):
    """Draw one (possibly block-averaged) positional matrix on ``ax``; returns the image.

    Parameters
    ----------
    ax
        Target axes.
    mat
        ``(m, m)`` matrix; block means of the ``n x n`` matrix when ``m < n``.
    positions
        Half-open range of the positions shown (axis extent).
    cmap, limits
        Colormap name and ``(vmin, vmax)``.
    n
        Number of positions the matrix stands for (labels the pooling).
    fontsize
        Size of axis labels; tick labels are one point smaller.
    interpolation, rasterized
        Passed to ``imshow``. The default suits PNG output; for PDF pages,
        ``interpolation="none", rasterized=False`` embeds the matrix itself, one
        image pixel per cell, which is exact and smaller than a rasterised figure.
    """
    p0, p1 = positions
    image = ax.imshow(
        mat,
        cmap=cmap,
        vmin=limits[0],
        vmax=limits[1],
        extent=(p0 - 0.5, p1 - 0.5, p1 - 0.5, p0 - 0.5),
        interpolation=interpolation or ("nearest" if mat.shape[-1] <= 256 else "antialiased"),
        rasterized=rasterized,
    )
    ax.set_xlabel("key position j", fontsize=fontsize)
    ax.set_ylabel("query position i", fontsize=fontsize)
    ax.tick_params(labelsize=fontsize - 1)
    if mat.shape[-1] < n:
        block = n // mat.shape[-1]
        ax.text(0.99, 0.01, f"{block}×{block} block means", transform=ax.transAxes,
                ha="right", va="bottom", fontsize=fontsize - 2, color="white",
                bbox=dict(facecolor="black", alpha=0.45, lw=0, pad=1.5))
    return image


def draw_profile(ax, prof, *, fontsize: float = 8) -> None:
    """Draw a diagonal profile (mean ± 1 sd of P along each offset k = j - i) on ``ax``."""
    ax.plot(prof.offsets, prof.mean, lw=0.9, color="C0", label="mean")
    if prof.std is not None:
        ax.fill_between(prof.offsets, prof.mean - prof.std, prof.mean + prof.std, color="C0", alpha=0.2, lw=0, label="± 1 sd")
    ax.set_xlabel("offset k = j − i", fontsize=fontsize)
    ax.set_ylabel("P along diagonal k", fontsize=fontsize)
    ax.tick_params(labelsize=fontsize - 1)
    ax.axvline(0, color="0.6", lw=0.5)
    ax.legend(fontsize=fontsize - 2, frameon=False, loc="upper right")


def colorbar_extend(values: np.ndarray, lo: float, hi: float) -> str:
    """Colourbar ``extend`` value: arrows at the ends where values lie outside ``[lo, hi]``."""
    below, above = bool(np.min(values) < lo), bool(np.max(values) > hi)
    return {(True, True): "both", (True, False): "min", (False, True): "max"}.get((below, above), "neither")
