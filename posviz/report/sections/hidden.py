"""Hidden-states section: where position lives inside each model, layer by layer (``posviz hidden``), opt-in.

Only with ``--hidden-corpus`` (or ``--corpus``): running models is slower than reading weights, so
existing reports are not made slower. With the attention section on the same corpus, length and blocks, both come
from one pass over the text (:func:`posviz.report.sections.running.text_result`). For each model or run, one page: the
positional share with its null, the Toeplitzness of ``P_l = V_l V_lᵀ`` with its null,
and the position probes, against the layer.
"""

from __future__ import annotations

from posviz.report.context import ReportContext
from posviz.report.layout import Block, captioned_page
from posviz.report.section import Section
from posviz.report.sections.running import run_each, text_result


def build(ctx: ReportContext) -> list:
    """One page per model; nothing without ``hidden_corpus``."""
    from posviz.plots.common import short_label
    from posviz.plots.hidden import plot_hidden

    o = ctx.options
    if o.hidden_corpus is None:
        return []
    pages = []
    runs = run_each(ctx, "Hidden states", lambda spec: text_result(ctx, spec, "hidden"))
    for item, result in runs:
        page = captioned_page(
            f"{SECTION.title}: {short_label(item.label, 60)}",
            f"{len(result.layers)} layers (0 = embedding output), {result.seq_len} positions",
            f"{item.label}: position inside the network",
            f"{item.label}. {result.conventions}.",
        )
        plot_hidden(result, fig=page)
        pages.append(page)
    return pages


def methods(ctx: ReportContext) -> list[Block]:
    """Definitions behind the hidden-states pages."""
    return [
        Block(
            "Position inside the network",
            (
                "Each model runs over blocks of n tokens of the corpus; positions that hold the same special token in "
                "every block ([CLS], [SEP], BOS) are left out. For layer l (0 = the embedding output), the positional "
                "vectors v_l(i) are the mean hidden state at position i over the blocks minus their mean over positions "
                "(Song & Zhong's h = μ + pos + ctx + resid). The Toeplitzness of P_l = V_l V_lᵀ is scored exactly as "
                "P = E_P E_Pᵀ, with the row-permutation null of V_l. The positional share is the between-position sum "
                "of squares over the total, B Σ_i ‖v_l(i)‖² / Σ_bi ‖h_l[b, i] − μ‖²; its null, the exact mean when the "
                "positions of every block are shuffled, is the within-block sum of squares over B times the total. "
                "The probes are fitted on a seeded sample of blocks and scored on held-out blocks: ridge regression of "
                "the position (mean absolute error, against always predicting the middle) and logistic regression on "
                "the difference of two states for which comes first (chance 0.5). Only per-position float64 sums are "
                "kept while the model runs, never all hidden states.",
            ),
        )
    ]


SECTION = Section("hidden", "Position inside the network", build, methods, references=("song2023", "haviv2022"))
