"""Title page: what the report is about, where the weights came from, what is inside.

The title page is drawn last (it lists the other sections with their page
numbers) and placed first. Its page count depends only on the number of inputs,
so the other pages can be numbered before it exists.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

from posviz.report.context import ReportContext
from posviz.report.layout import (
    BODY_SIZE,
    CONTENT_BOTTOM,
    CONTENT_TOP,
    MARGIN_LEFT,
    MARGIN_RIGHT,
    SMALL_SIZE,
    Block,
    draw_table,
    fit_text,
    flow_blocks,
    line_height,
    new_page,
    wrap_label,
    wrap_text,
)
from posviz.util.format import MISSING

FIRST_PAGE_ROWS = 6  # models listed on the first page; the rest go on continuation pages
MORE_PAGE_ROWS = 14
HEADER = ("#", "model or run", "source (hub id@commit, package, path, run)", "family", "position tensor (dtype)", "n × d")
WIDTHS = (0.03, 0.19, 0.34, 0.1, 0.27, 0.07)


@dataclass(frozen=True)
class ContentsEntry:
    """One line of the contents: a section title and its first page."""

    title: str
    page: int


def page_count(ctx: ReportContext) -> int:
    """Number of title pages for this many inputs."""
    extra = max(0, len(ctx.items) - FIRST_PAGE_ROWS)
    return 1 + math.ceil(extra / MORE_PAGE_ROWS)


def build(ctx: ReportContext, contents: list[ContentsEntry]) -> list:
    """The title page(s): models, runs and sources, notes, contents, conventions."""
    from posviz.plots.common import short_label

    subtitle = f"{ctx.date} · posviz {ctx.version} · {_count(ctx)}"
    title = ctx.title  # new_page shrinks or cuts it to the page width
    rows = []
    for i, it in enumerate(ctx.items, start=1):
        if it.has_positions:
            tensor = _wrap(f"{it.embeddings.tensor} ({it.embeddings.dtype})", 40)
            shape = f"{it.embeddings.n} × {it.embeddings.dim}"
        else:
            tensor, shape = _wrap(it.note or MISSING, 40), MISSING
        source = wrap_label(it.source, 53)
        if it.kind == "run":  # the run's scheme, length and the checkpoint P comes from, on a line of their own
            run = it.data["run"]
            source = wrap_label(it.source, 53, max_lines=1) + "\n" + run.describe()
            if it.has_positions:
                source += f" ({run.checkpoint.name})"
        rows.append([str(i), wrap_label(short_label(it.label, 64), 28), source, family_cell(it.family), tensor, shape])

    first = new_page(title, subtitle)
    chunks = [rows[:FIRST_PAGE_ROWS]] + [rows[i : i + MORE_PAGE_ROWS] for i in range(FIRST_PAGE_ROWS, len(rows), MORE_PAGE_ROWS)]
    pages = [first]
    for k, chunk in enumerate(chunks):
        fig = first if k == 0 else new_page(f"{title} (models, continued)", subtitle)
        if k:
            pages.append(fig)
        fig.text(MARGIN_LEFT, CONTENT_TOP, "Models", fontsize=BODY_SIZE + 2, fontweight="bold", va="top")
        bottom = draw_table(fig, (MARGIN_LEFT, CONTENT_TOP - 0.04, MARGIN_RIGHT - MARGIN_LEFT), HEADER, chunk,
                            col_widths=WIDTHS, align=["right"] + ["left"] * 5, fontsize=BODY_SIZE - 1, pad=0.015)
        if k == 0:
            table_bottom = bottom
    top = _notes(first, ctx.notes, table_bottom - 0.03)
    _contents_and_conventions(first, ctx, contents, top - 0.02)
    return pages


def _count(ctx: ReportContext) -> str:
    """``2 models``, ``1 training run`` or ``1 model, 2 training runs``."""
    runs = len(ctx.runs)
    models = len(ctx.items) - runs
    parts = [f"{models} model{'s' if models != 1 else ''}"] if models else []
    if runs:
        parts.append(f"{runs} training run{'s' if runs != 1 else ''}")
    return ", ".join(parts)


def family_cell(family: str) -> str:
    """A family for a table cell: ``posviz-albert (tupe-a)`` is split before its scheme so that it fits the column."""
    return family.replace(" (", "\n(", 1)


def _notes(fig, notes: list[str], top: float) -> float:
    """Sections left out or incomplete, one sentence each, under the models table; returns the new top."""
    if not notes:
        return top
    size = SMALL_SIZE + 0.5
    lh = line_height(size)
    y = top
    for note in notes:
        lines = wrap_text(note, MARGIN_RIGHT - MARGIN_LEFT, size)
        fig.text(MARGIN_LEFT, y, "\n".join(lines), fontsize=size, va="top", linespacing=1.4, color="#8b0000")
        y -= lh * len(lines) + lh * 0.3
    return y


def _contents_and_conventions(fig, ctx: ReportContext, contents: list[ContentsEntry], top: float) -> None:
    """Contents in the left column, conventions in the right."""
    lh = line_height(BODY_SIZE)
    fig.text(MARGIN_LEFT, top, "Contents", fontsize=BODY_SIZE + 2, fontweight="bold", va="top")
    y = top - lh * 1.8
    for i, entry in enumerate(contents, start=1):
        size, text = fit_text(f"{i}  {entry.title}", 0.28, BODY_SIZE, min_size=BODY_SIZE - 2)  # long titles shrink, never reach the page number
        fig.text(MARGIN_LEFT, y, text, fontsize=size, va="top")
        fig.text(MARGIN_LEFT + 0.33, y, f"page {entry.page}", fontsize=BODY_SIZE, va="top", ha="right")
        y -= lh * 1.3
    left = MARGIN_LEFT + 0.38
    blocks = [Block("Conventions", tuple(_conventions(ctx)))]
    # The conventions fit one column of the space left; flow_blocks draws them on this page.
    flow_blocks(blocks, lambda index: fig, columns=1, top=top, bottom=CONTENT_BOTTOM, fontsize=BODY_SIZE - 0.5,
                left=left)


def _conventions(ctx: ReportContext) -> list[str]:
    o = ctx.options
    out = [
        "• Offsets k = j − i (key position minus query position); F[i, j] = f(j − i).",
        {"none": "• P = E Eᵀ from the kept rows of each position table, in float64.",
         "cosine": "• P = cosine similarities of the kept rows of each position table (rows scaled to unit length), float64.",
         "center": "• P = (E − ē)(E − ē)ᵀ: column means of each position table removed first, float64."}[o.normalize],
        "• Toeplitzness = R² of P against its Toeplitz projection, reported for both variants: off-diagonal (main "
        "diagonal excluded; the headline, first in tables and on axes) and full (all n² entries).",
        (f"• Null baseline: exact mean over all row permutations of E ± sd over {o.null_draws} seeded ones (seed {o.seed}); excess = (R² − null) / (1 − null)."
         if o.null_draws else "• No null baseline (null draws = 0)."),
        "• Rows kept per family (RoBERTa-style tables drop rows 0–1); the summary table states them per model.",
    ]
    if o.positions:
        out.append(f"• Positions restricted to {o.positions} (counted from position 0).")
    if o.table:
        out.append(f"• Position table: {o.table}.")
    out.append(
        f"• Heatmaps: '{o.cmap}' colormap, " + ("colours clipped to the 1st–99th percentile, " if o.robust else "full colour range, ")
        + f"own scale per model; matrices above {o.max_pixels} positions shown as exact block means."
    )
    out.append("• Dates follow SOURCE_DATE_EPOCH when it is set (reproducible output).")
    return out


def _wrap(text: str, width: int) -> str:
    lines = textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]
    return "\n".join(lines[:2]) + ("…" if len(lines) > 2 else "")
