"""Heatmap section: P = E Eᵀ of every model with its diagonal profile, one page per model.

Matrices larger than ``max_pixels`` per side are shown as exact block means
(computed from E, never from an n × n P) and drawn as a raster image, so a page
stays small and fast to open whatever the number of positions.
"""

from __future__ import annotations

from posviz.report.context import ReportContext, ReportItem
from posviz.report.layout import (
    CONTENT_BOTTOM,
    CONTENT_TOP,
    MARGIN_LEFT,
    MARGIN_RIGHT,
    PAGE_SIZE,
    SMALL_SIZE,
    Block,
    draw_table,
    new_page,
    wrap_text,
)
from posviz.report.section import Section
from posviz.util.format import MISSING, mean_sd, score


def build(ctx: ReportContext) -> list:
    """One page per model that has learned absolute positions."""
    return [_page(ctx, item) for item in ctx.with_positions]


def _page(ctx: ReportContext, item: ReportItem):
    from posviz.plots.common import short_label
    from posviz.plots.heatmap import NORMALIZE_LABEL, color_limits, colorbar_extend, draw_matrix, draw_profile
    from posviz.positional_scores import PositionalScores
    from posviz.toeplitz.profile import head_profile

    o = ctx.options
    pe, s = item.embeddings, item.score
    stack = PositionalScores.from_embeddings(pe.matrix, o.normalize)
    mat = stack.pooled(o.max_pixels)[0][0]
    limits = color_limits(mat, o.robust)
    label = NORMALIZE_LABEL.get(o.normalize, o.normalize)
    fig = new_page(f"{SECTION.title}: {short_label(item.label, 60)}", f"P = {label}, {pe.n} positions × {pe.dim} dimensions, {pe.rows_note()}",
                   bookmark=item.label)

    # Left: the map (square) with its colourbar. Right: the profile above the scores and provenance.
    side = 5.0  # inches
    width, height = side / PAGE_SIZE[0], side / PAGE_SIZE[1]
    left, bottom = MARGIN_LEFT + 0.025, CONTENT_BOTTOM + 0.05
    ax = fig.add_axes((left, bottom, width, height))
    image = draw_matrix(ax, mat, pe.positions, cmap=o.cmap, limits=limits, n=pe.n, fontsize=9,
                        interpolation="none", rasterized=False)
    cax = fig.add_axes((left + width + 0.012, bottom, 0.012, height))
    cb = fig.colorbar(image, cax=cax, extend=colorbar_extend(mat, *limits))
    cb.ax.tick_params(labelsize=8)
    cb.set_label(f"P = {label}" + (" (clipped to 1st–99th percentile)" if o.robust else ""), fontsize=9)

    right = 0.675
    pax = fig.add_axes((right, CONTENT_TOP - 0.33, MARGIN_RIGHT - right, 0.30))
    draw_profile(pax, head_profile(stack, 0, spread=pe.n <= 8192), fontsize=9)
    pax.set_title("diagonal profile: P along each offset k", fontsize=9, loc="left")
    pax.grid(alpha=0.25, lw=0.5)

    has_null = s.null_draws > 0
    null = (mean_sd(s.null_mean_offdiag, s.null_std_offdiag), mean_sd(s.null_mean, s.null_std))
    excess = (score(s.excess_offdiag), score(s.excess))
    rows = [
        ["Toeplitzness R²", score(s.toeplitzness_offdiag), score(s.toeplitzness)],
        ["null (mean ± sd)", *(null if has_null else (MISSING, MISSING))],
        ["excess", *(excess if has_null else (MISSING, MISSING))],
    ]
    top = draw_table(fig, (right, CONTENT_TOP - 0.43, MARGIN_RIGHT - right), ("", "off-diagonal", "full"), rows,
                     col_widths=(0.34, 0.33, 0.33), fontsize=SMALL_SIZE)
    block = pe.n / mat.shape[-1]
    facts = [f"source: {pe.source}"]
    if pe.tensor != "-":  # synthetic controls have no tensor
        facts += [f"tensor: {pe.tensor}", f"stored as {pe.dtype}, analysed in float64"]
    facts += [
        f"colour scale: '{o.cmap}', {limits[0]:.3g} to {limits[1]:.3g}" + (" (clipped)" if o.robust else ""),
        "shown: every entry" if block == 1 else f"shown: {mat.shape[-1]}² exact block means of {block:.3g} × {block:.3g} entries",
    ]
    lines = [part for line in facts for part in _hang(wrap_text(line, MARGIN_RIGHT - right - 0.01, SMALL_SIZE + 0.5))]
    text = "\n".join(lines)
    fig.text(right, top - 0.03, text, fontsize=SMALL_SIZE + 0.5, va="top", linespacing=1.5)
    return fig


def _hang(lines: list[str]) -> list[str]:
    """Indent continuation lines so that each fact stands out."""
    return lines[:1] + ["    " + x for x in lines[1:]]


def methods(ctx: ReportContext) -> list[Block]:
    """How the heatmaps are drawn."""
    o = ctx.options
    clip = "clipped to the 1st–99th percentile of the shown values, so that a few large entries (often the first positions' diagonal) do not wash out the structure" if o.robust else "spanning the full range of the shown values"
    return [
        Block(
            "Heatmaps and diagonal profiles",
            (
                f"Each heatmap shows P with query position i down and key position j across, in the '{o.cmap}' colormap, "
                f"colours {clip}; every map has its own colour scale (given beside it). Matrices with more than "
                f"{o.max_pixels} positions are shown as exact block means, computed from E without forming P "
                "(the block mean of eᵢ·eⱼ is the dot product of the block means of E).",
                "The diagonal profile is the mean (± 1 sd) of P along each offset k = j − i: the empirical "
                "counterpart of TISA's f(k). A Toeplitz P is fully described by it.",
            ),
        )
    ]


SECTION = Section("heatmaps", "Position similarity P", build, methods, references=("wennberg2021",))
