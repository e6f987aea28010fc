"""Attention section: the attention each model produces on a corpus, per head (``posviz attention``), opt-in.

Only with ``--attention-corpus``: running models is slower than reading weights,
so existing reports are not made slower. For each model or run, one page per layer
of ``--layers``: the head grid of the mean attention, the offset profiles, and
each head's Toeplitzness of its mean attention and positional share, with their
row-shuffle nulls.
"""

from __future__ import annotations

from posviz.report.context import ReportContext
from posviz.report.layout import Block
from posviz.report.section import Section
from posviz.report.sections.heads import HEAD_PIXELS, _page
from posviz.report.sections.running import run_each


def build(ctx: ReportContext) -> list:
    """One page per model and chosen layer; nothing without ``attention_corpus``."""
    from posviz.observe.api import attention
    from posviz.plots.attention import plot_attention_layer
    from posviz.plots.common import short_label

    o = ctx.options
    if o.attention_corpus is None:
        return []
    pages = []
    runs = run_each(ctx, "Attention", lambda spec: attention(spec, corpus=o.attention_corpus, seq_len=o.attention_seq_len,
                                                             layers=o.layers, max_blocks=o.attention_max_blocks))
    for item, result in runs:
        label = short_label(item.label, 60)
        for layer in result.layers:
            page = _page(
                f"{SECTION.title}: {label}, layer {layer}",
                f"{result.heads} heads, {result.seq_len} positions; T = Toeplitzness of the mean attention, off-diagonal R²",
                f"{item.label}: attention, layer {layer}",
                f"{item.label}: layer {layer}. {result.conventions}.",
            )
            plot_attention_layer(result, layer, max_pixels=HEAD_PIXELS, fig=page)
            pages.append(page)
    return pages


def methods(ctx: ReportContext) -> list[Block]:
    """Definitions behind the attention pages."""
    return [
        Block(
            "Attention on text",
            (
                "Each model runs (eager attention) over blocks of n tokens of the corpus, special tokens kept at fixed "
                "positions ([CLS] at 0 and [SEP] at n − 1, or BOS at 0). For head h, Ā_h is the mean attention over the "
                "blocks; its Toeplitzness is R² of Ā_h against its Toeplitz projection, over the support (all entries, or "
                "j ≤ i for causal models, whose masked zeros never count). The null shuffles each row's entries within its "
                "support, which keeps every query's distribution and destroys only where the mass sits relative to the "
                "query; its mean is exact (closed form). f(k) is the mean of Ā_h along offset k = j − i. The positional "
                "share is 1 − Σ_b Σ_ij (A_b,ij − f(j − i))² / Σ_b Σ_ij (A_b,ij − mean)²: how much of every block's "
                "attention the offset profile alone explains, with the same row-shuffle null applied to every block. "
                "The statistics come from streaming sums (Σ_b A_b and per-row sums of squares), each layer's maps added as soon as "
                "the layer has produced them.",
            ),
        )
    ]


SECTION = Section("attention", "Attention on text", build, methods, references=("wennberg2021",))
