"""Attention section: the attention each model produces on a corpus, per head (``posviz attention``), opt-in.

Only with ``--attention-corpus`` (or ``--corpus``): running models is slower than reading weights,
so existing reports are not made slower. With the hidden-states section on the same corpus, length and blocks,
both come from one pass over the text (:func:`posviz.report.sections.running.text_result`). For each model or run, one page per layer
of ``--layers``: the head grid of the mean attention, the offset profiles, and
each head's Toeplitzness of its mean attention and positional share, with their
row-shuffle nulls.
"""

from __future__ import annotations

from posviz.report.context import ReportContext
from posviz.report.layout import Block, captioned_page
from posviz.report.section import Section
from posviz.report.sections.heads import HEAD_PIXELS
from posviz.report.sections.running import run_each, text_result


def build(ctx: ReportContext) -> list:
    """One page per model and chosen layer; nothing without ``attention_corpus``."""
    from posviz.plots.attention import plot_attention_layer
    from posviz.plots.common import short_label

    o = ctx.options
    if o.attention_corpus is None:
        return []
    pages = []
    runs = run_each(ctx, "Attention", lambda spec: text_result(ctx, spec, "attention"))
    for item, result in runs:
        label = short_label(item.label, 60)
        for layer in result.layers:
            page = captioned_page(
                f"{SECTION.title}: {label}, layer {layer}",
                f"{result.heads} heads, {result.seq_len} positions; T = Toeplitzness of the mean attention, off-diagonal R²"
                + _long_context_line(result, layer),
                f"{item.label}: attention, layer {layer}",
                f"{item.label}: layer {layer}. {result.conventions}.",
            )
            plot_attention_layer(result, layer, max_pixels=HEAD_PIXELS, fig=page)
            pages.append(page)
    return pages


def _long_context_line(result: object, layer: int) -> str:
    """The layer's sink rate and mean spans, where the statistics came from tiles (the eager path has none)."""
    st = result.stats[layer]
    if not hasattr(st, "span90"):
        return ""
    eps = result.sink_eps
    return (f"; sink rate {100 * st.sink_rate(eps):.0f} % (heads with first-token attention > {eps:g}); "
            f"span 50 % / 90 %: {st.span50.mean():.1f} / {st.span90.mean():.1f} tokens (mean over heads)")


def methods(ctx: ReportContext) -> list[Block]:
    """Definitions behind the attention pages."""
    return [
        Block(
            "Attention on text",
            (
                "Each model runs over blocks of n tokens of the corpus, special tokens kept at fixed "
                "positions ([CLS] at 0 and [SEP] at n − 1, or BOS at 0). For head h, Ā_h is the mean attention over the "
                "blocks; its Toeplitzness is R² of Ā_h against its Toeplitz projection, over the support (all entries, or "
                "j ≤ i for causal models, whose masked zeros never count). The null shuffles each row's entries within its "
                "support, which keeps every query's distribution and destroys only where the mass sits relative to the "
                "query; its mean is exact (closed form). f(k) is the mean of Ā_h along offset k = j − i. The positional "
                "share is 1 − Σ_b Σ_ij (A_b,ij − f(j − i))² / Σ_b Σ_ij (A_b,ij − mean)²: how much of every block's "
                "attention the offset profile alone explains, with the same row-shuffle null applied to every block. "
                "The statistics come from streaming sums (Σ_b A_b and per-row sums of squares). By default the model keeps its "
                "own fast attention and posviz recomputes each layer's weights from its queries and keys in tiles (an online "
                "softmax, then a second pass), never holding an n × n map; beyond 512 positions the Toeplitzness scores a "
                "512 × 512 block average of the mean map. Models whose attention cannot be captured, and transformers 4.x, "
                "use eager attention maps. The tiles add, per head: the sink rate (the share of a layer's heads whose mean "
                "attention to the first token exceeds ε = 0.3, Gu et al., ICLR 2025), the span holding 50 % and 90 % of each "
                "query's attention, and the attention each key position receives, averaged over the queries that see it "
                "(the lower right panel: a U shape means the middle of the window is neglected).",
            ),
        )
    ]


SECTION = Section("attention", "Attention on text", build, methods, references=("wennberg2021",))
