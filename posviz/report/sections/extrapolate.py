"""Extrapolation section: held-out loss and attention entropy at several lengths (``posviz extrapolate``), opt-in.

Only with ``--extrapolate-lengths``: running models at long lengths is slower than
reading weights, so existing reports are not made slower. One page for all models
and runs: the loss against the length with each training length marked, and the
attention entropy of every layer against the length, per model.
"""

from __future__ import annotations

from posviz.report.context import ReportContext
from posviz.report.layout import Block, captioned_page
from posviz.report.section import Section
from posviz.report.sections.running import run_each, text_result


def build(ctx: ReportContext) -> list:
    """One page for every model together; nothing without ``extrapolate_lengths``."""
    from dataclasses import replace

    from posviz.plots.extrapolate import plot_extrapolation

    o = ctx.options
    if o.extrapolate_lengths is None:
        return []
    merged = None
    # one model at a time, so that one model's error leaves the others on the page; each run on the load that its
    # text passes used (running.text_result)
    runs = run_each(ctx, "Extrapolation", lambda spec: text_result(ctx, spec, "extrapolate"))
    for _item, result in runs:
        merged = result if merged is None else replace(merged, runs=merged.runs + result.runs,
                                                       budget={**merged.budget, **result.budget})
    if merged is None:
        return []
    missing: dict[tuple[str, str, str], list[str]] = {}  # (model, variant, reason) -> lengths without a loss
    for r in merged.runs:
        if r.loss is None and r.reason:
            missing.setdefault((r.model, r.variant, r.reason), []).append(str(r.length))
    caption = " ".join([f"{merged.conventions}.", *sorted({f"{r.model}: {r.protocol}." for r in merged.runs}),
                        *(f"{m}{'' if v == 'unscaled' else f' ({v})'}: no loss at {', '.join(n)}: {why}."
                          for (m, v, why), n in missing.items())])
    page = captioned_page(SECTION.title, f"lengths {', '.join(map(str, merged.lengths))}; dotted: training length",
                 "Beyond the trained length", caption)
    plot_extrapolation(merged, fig=page)
    return [page]


def methods(ctx: ReportContext) -> list[Block]:
    """Definitions behind the extrapolation page."""
    return [
        Block(
            "Beyond the trained length",
            (
                "Every length cuts the same text: the first N text tokens of the corpus, N = the blocks of the longest "
                "length times its text positions; a shorter length leaves out less than one block at its end. Causal "
                "models are scored by the mean next-token negative log-likelihood over all text tokens; masked LMs by the "
                "mean over 15 % of the text tokens of each block, replaced by the mask token at positions drawn from the "
                "seed, the length and the block (the same for every model). A length beyond a learned position table is "
                "not run and has no loss. The attention entropy of query i is −Σ_j a_ij log a_ij (Wang et al.), averaged "
                "over blocks, queries 1 … n − 1 and the heads of each layer; uniform attention over the keys a query sees "
                "is drawn for reference.",
            ),
        )
    ]


SECTION = Section("extrapolate", "Beyond the trained length", build, methods, references=("press2022", "wang2024"))
