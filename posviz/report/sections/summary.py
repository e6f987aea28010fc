"""Summary section: one table row per model with its Toeplitzness, null baseline and excess."""

from __future__ import annotations

from posviz.plots.heatmap import NORMALIZE_LABEL
from posviz.report.context import ReportContext, ReportItem
from posviz.report.layout import (
    BODY_SIZE,
    CONTENT_BOTTOM,
    CONTENT_TOP,
    MARGIN_LEFT,
    MARGIN_RIGHT,
    SMALL_SIZE,
    Block,
    draw_table,
    line_height,
    new_page,
    wrap_label,
    wrap_text,
)
from posviz.report.section import Section
from posviz.util.format import MISSING, mean_sd, score

ROWS_PER_PAGE = 12
CHART_MAX_ROWS = 8  # the chart under the table is drawn for pages with at most this many models
HEADER = (
    "model",
    "family",
    "positions\n× dim",
    "rows kept",
    "Toeplitzness\noff-diag. R²",
    "null\noff-diag.",
    "excess\noff-diag.",
    "full R²",
    "null\nfull",
    "excess\nfull",
)
WIDTHS = (0.2, 0.095, 0.085, 0.075, 0.105, 0.11, 0.075, 0.07, 0.11, 0.06)


def row(item: ReportItem) -> list[str]:
    """The summary-table cells of one item."""
    from posviz.report.sections.title import family_cell

    name = wrap_label(item.label, 28)
    family = family_cell(item.family)
    if not item.has_positions:
        return [name, family] + [MISSING] * 8
    pe, s = item.embeddings, item.score
    first, stop = pe.rows
    null = mean_sd(s.null_mean, s.null_std) if s.null_draws else MISSING
    null_off = mean_sd(s.null_mean_offdiag, s.null_std_offdiag) if s.null_draws else MISSING
    return [
        name,
        family,
        f"{pe.n} × {pe.dim}",
        f"{first}–{stop - 1}",
        score(s.toeplitzness_offdiag),
        null_off,
        score(s.excess_offdiag) if s.null_draws else MISSING,
        score(s.toeplitzness),
        null,
        score(s.excess) if s.null_draws else MISSING,
    ]


def build(ctx: ReportContext) -> list:
    """Summary table pages (several when there are many models), with a chart when few."""
    if not ctx.with_positions:
        return []
    o = ctx.options
    pages = []
    chunks = [ctx.items[i : i + ROWS_PER_PAGE] for i in range(0, len(ctx.items), ROWS_PER_PAGE)]
    for k, chunk in enumerate(chunks):
        title = SECTION.title + (" (continued)" if k else "")
        against = " against the permutation null baseline" if o.null_draws else ""
        fig = new_page(title, f"Toeplitzness of P = {NORMALIZE_LABEL[o.normalize]} (normalize = {o.normalize}){against}")
        bottom = draw_table(fig, (MARGIN_LEFT, CONTENT_TOP, MARGIN_RIGHT - MARGIN_LEFT), HEADER, [row(it) for it in chunk],
                            col_widths=WIDTHS, fontsize=BODY_SIZE - 0.5, align=["left", "left"] + ["right"] * 8)
        y = bottom - 0.025
        for note in _notes(ctx, chunk):
            for line in wrap_text(note, MARGIN_RIGHT - MARGIN_LEFT, SMALL_SIZE + 0.5):
                fig.text(MARGIN_LEFT, y, line, fontsize=SMALL_SIZE + 0.5, va="top")
                y -= line_height(SMALL_SIZE + 0.5) * 1.2
        scored = [it for it in chunk if it.has_positions]
        if len(scored) <= CHART_MAX_ROWS and y - CONTENT_BOTTOM > 0.2:
            _chart(fig, scored, top=y - 0.04, bottom=CONTENT_BOTTOM + 0.02, null=o.null_draws > 0)
        pages.append(fig)
    return pages


def _chart(fig, items: list[ReportItem], *, top: float, bottom: float, null: bool) -> None:
    """Dot chart: each model's R² (both variants) beside its null baseline, on one 0-1 scale."""
    height = min(top - bottom, 0.07 + 0.06 * len(items))
    ax = fig.add_axes((MARGIN_LEFT + 0.2, top - height, 0.5, height))
    ys = list(range(len(items)))[::-1]
    for y, it in zip(ys, items, strict=True):
        s = it.score
        if null:
            ax.errorbar(s.null_mean_offdiag, y + 0.12, xerr=s.null_std_offdiag, fmt="|", color="0.45", ms=9, capsize=0)
            ax.errorbar(s.null_mean, y - 0.12, xerr=s.null_std, fmt="|", color="0.45", ms=9, capsize=0)
        ax.plot([s.toeplitzness_offdiag], [y + 0.12], "o", color="C3", ms=6)
        ax.plot([s.toeplitzness], [y - 0.12], "o", mfc="white", mec="C0", mew=1.5, ms=6)
    ax.set_yticks(ys, [wrap_label(it.label, 34) for it in items], fontsize=SMALL_SIZE + 0.5)
    ax.set_ylim(-0.6, len(items) - 0.4)
    ax.set_xlim(-0.02, 1.02)
    ax.set_xlabel("Toeplitzness R²", fontsize=BODY_SIZE - 0.5)
    ax.tick_params(axis="x", labelsize=SMALL_SIZE)
    ax.grid(axis="x", alpha=0.3, lw=0.5)
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], ls="", marker="o", color="C3", label="R², off-diagonal (headline)"),
        Line2D([], [], ls="", marker="o", mfc="white", mec="C0", mew=1.5, label="R², full"),
    ]
    if null:
        handles.append(Line2D([], [], ls="", marker="|", color="0.45", ms=9, label="null baseline (mean ± sd)"))
    ax.legend(handles=handles, fontsize=SMALL_SIZE, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    against = " against the null baseline" if null else ""
    ax.set_title(f"Toeplitzness{against} (upper marker of each pair: off-diagonal; lower: full)", fontsize=BODY_SIZE - 0.5, loc="left")


def _notes(ctx: ReportContext, chunk: list[ReportItem]) -> list[str]:
    o = ctx.options
    null = (
        f"null: the same score (off-diagonal / full variant) for E with its rows permuted: exact mean over all permutations "
        f"± sd over {o.null_draws} seeded random ones (seed {o.seed}); excess = (R² − null) / (1 − null): 0 at chance, 1 for an exactly Toeplitz P."
        if o.null_draws
        else "no null baseline and no excess (null draws = 0)."
    )
    notes = [
        "Toeplitzness = R² of P against its Toeplitz projection (every diagonal replaced by its mean); "
        "off-diagonal: main diagonal left out of both sums (the headline: the Gram diagonal alone makes any P look "
        "Toeplitz-like on the full variant); full: all n² entries.",
        null,
        "rows kept: stored rows of the position table used as positions (first–last). Definitions: methods page.",
    ]
    notes += [f"{it.label}: {it.note}." for it in chunk if it.note]
    return notes


def methods(ctx: ReportContext) -> list[Block]:
    """Definitions behind the summary table."""
    o = ctx.options
    normalize = {
        "none": "P = E Eᵀ is formed from the kept rows of the position table E (n × d), in float64 whatever the stored dtype.",
        "cosine": "P is formed from the rows of E scaled to unit length (cosine similarities), in float64.",
        "center": "P is formed from E with its column means removed, in float64.",
    }[o.normalize]
    return [
        Block(
            "Background",
            (
                "The attention logit of a model with learned absolute positions expands into word–word, word–position, "
                "position–word and position–position terms (Ke, He & Liu, 2021, who untie the last one in TUPE). "
                "P = E Eᵀ is the position–position similarity of the position table itself, before any query/key "
                "projection. Wennberg & Henter (2021) measure how translation-invariant (Toeplitz) P is and relate "
                "it to benchmark results; the paper does not define its score, so the definitions below are posviz's own.",
            ),
        ),
        Block(
            "Position similarity P and offsets",
            (
                normalize + " Row i of E is position i. The offset of entry (i, j) is k = j − i "
                "(key position minus query position), so a Toeplitz matrix has F[i, j] = f(j − i).",
                "Rows kept: RoBERTa, XLM-R, CamemBERT and Longformer number positions from padding_idx + 1, and OPT and "
                "BART add an offset of 2, so stored rows 0–1 are dropped; BERT, ALBERT, DistilBERT, ELECTRA, GPT-2 and "
                "GPT-Neo keep all rows. The summary table states the rows used for every model.",
            ),
        ),
        Block(
            "Toeplitz projection and Toeplitzness",
            (
                "The Toeplitz projection T̂(P) replaces every diagonal of P by its mean; it is the least-squares closest "
                "Toeplitz matrix. Toeplitzness is the R² of P against T̂(P):",
            ),
            (r"$R^2 = 1 - \sum_{i,j}\,(P_{ij} - \hat{T}_{ij})^2 \;/\; \sum_{i,j}\,(P_{ij} - \bar{P})^2$",),
        ),
        Block(
            None,
            (
                "The full variant sums over all n² entries; the off-diagonal variant leaves the main diagonal (k = 0) "
                "out of both sums. R² = 1 means exactly translation-invariant. A constant P scores 1.",
                "Beyond 2048 positions P is never built: the diagonal sums of E Eᵀ are sums of column autocorrelations "
                "(FFT, O(n·d·log n)), ΣP² = ‖EᵀE‖² and ΣP = ‖Σᵢ eᵢ‖².",
            ),
        ),
        Block(
            "Null baseline and excess",
            (
                "A bare R² misleads: the large diagonal of any Gram matrix is itself Toeplitz-like (a Gaussian 512 × 384 "
                "E scores about 0.43 on the full variant). The null baseline is the same score for E with its rows "
                "randomly permuted, which keeps every vector but destroys their order "
                + (f"(the exact mean over all n! permutations, in closed form from permutation-invariant moments of P, "
                   f"± the sd over {o.null_draws} seeded random permutations, seed {o.seed})" if o.null_draws else "(not computed for this report)")
                + ". The excess rescales R² so that chance is 0:",
            ),
            (r"$\mathrm{excess} = (R^2 - \mathrm{null})\;/\;(1 - \mathrm{null})$",),
        ),
        Block(
            "The headline: off-diagonal R²",
            (
                "Tables and axes put the off-diagonal R² first. The full R² can stay flat or fall while a model learns, "
                "as its null falls when the diagonal stops dominating (a tiny posviz train run: full 0.340 → 0.375, "
                "off-diagonal 0.017 → 0.467); off the diagonal the null stays near 0 (0.004 for 512 random positions).",
            ),
        ),
    ]


SECTION = Section("summary", "Summary", build, methods, references=("wennberg2021", "ke2021"))
