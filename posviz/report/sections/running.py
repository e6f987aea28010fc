"""What the sections that open or run each model share: which items they take, and each item's error kept as a note.

The attention, hidden-states, measures and extrapolation sections run every model or run of
the report on text, on one load of each model (:func:`text_result`): the text measures share one pass per model where
their corpus, length and blocks agree, and ``extrapolate`` runs the same loaded model; the heads section opens each
one's weights. A synthetic table
(``sinusoidal:512x768``) has no model and is skipped; a model that fails leaves a
note on the report and the other models go on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from posviz.errors import PosvizError
from posviz.report.context import ReportContext, ReportItem

R = TypeVar("R")


def runnable_spec(item: ReportItem) -> str | None:
    """The model to run: a model, or a run folder (its newest complete checkpoint and its tokenizer); ``None`` for a synthetic table."""
    from posviz.read.embeddings import is_synthetic

    return None if is_synthetic(item.spec) else item.spec


def run_each(ctx: ReportContext, what: str, measure: Callable[[str], R],
             spec_of: Callable[[ReportItem], str | None] = runnable_spec) -> Iterator[tuple[ReportItem, R]]:
    """Each item of the report with ``measure(spec_of(item))``.

    An item without a spec is skipped; one whose measure fails with a posviz error is
    noted on the report (``"{what} of X left out: ..."``) and skipped.
    """
    for item in ctx.items:
        spec = spec_of(item)
        if spec is None:
            continue
        try:
            result = measure(spec)
        except PosvizError as e:
            ctx.notes.append(f"{what} of {item.label} left out: {e}")
            continue
        yield item, result


def text_result(ctx: ReportContext, spec: str, name: str) -> Any:
    """The result of ``name`` (``attention``, ``hidden``, a registered text measure, ``extrapolate``) for ``spec``.

    The first section that asks runs every text measure of the report that shares its corpus, block length and
    block count in one pass (:func:`posviz.observe.text_pass.observe_text`: the model loaded once, each batch run
    once); later sections read the result from ``ctx.extras["text_passes"]``. Where the joint pass fails, each
    measure runs alone, so that one measure's failure leaves the other's pages.

    Raises
    ------
    PosvizError
        The measure failed for this model (the section notes it).
    """
    value = _passes_of(ctx, spec)[name]
    if isinstance(value, PosvizError):
        raise value
    return value


def run_text_passes(ctx: ReportContext) -> dict[str, dict[str, Any]]:
    """Every item's text passes, run now (``--html`` shows them in the explorer before the PDF is drawn)."""
    if text_requests(ctx.options) or ctx.options.extrapolate_lengths is not None:
        for item in ctx.items:
            spec = runnable_spec(item)
            if spec is not None:
                _passes_of(ctx, spec)
    return ctx.extras.setdefault("text_passes", {})


def _passes_of(ctx: ReportContext, spec: str) -> dict[str, Any]:
    """``spec``'s results (or errors) by measure name, run at the first call and kept in ``ctx.extras``."""
    passes = ctx.extras.setdefault("text_passes", {})
    if spec not in passes:
        passes[spec] = _model_runs(ctx, spec)
    return passes[spec]


def _model_runs(ctx: ReportContext, spec: str) -> dict[str, Any]:
    """Every run of ``spec`` that the report makes, on one load of the model: its text passes and, with
    ``--extrapolate-lengths``, ``extrapolate`` (the model then loaded once with its language-model head, whose base
    runs the text passes: :mod:`posviz.observe.shared_models`)."""
    from posviz.extrapolation.extrapolate import extrapolate
    from posviz.extrapolation.objective import lm_head
    from posviz.observe.shared_models import shared_models

    o = ctx.options
    extrapolating = o.extrapolate_lengths is not None
    with shared_models(head_for=lm_head if extrapolating else None):
        out = _text_passes(ctx, spec)
        if not extrapolating:
            return out
        try:
            out["extrapolate"] = extrapolate(spec, corpus=o.extrapolate_corpus, lengths=o.extrapolate_lengths,
                                             max_blocks=o.extrapolate_max_blocks, seed=o.seed)
        except PosvizError as e:
            out["extrapolate"] = e
    return out


def text_requests(options: Any) -> dict[tuple[str, int, int], list[Any]]:
    """The report's text measures, grouped by what one pass shares: ``(corpus, seq_len, max_blocks)``."""
    from posviz.observe.attention_pass import AttentionRequest
    from posviz.observe.hidden_pass import HiddenRequest

    groups: dict[tuple[str, int, int], list[Any]] = {}
    o = options
    if o.attention_corpus is not None:
        groups.setdefault((o.attention_corpus, o.attention_seq_len, o.attention_max_blocks), []).append(
            AttentionRequest(layers=o.layers))
    if o.hidden_corpus is not None:
        groups.setdefault((o.hidden_corpus, o.hidden_seq_len, o.hidden_max_blocks), []).append(HiddenRequest(seed=o.seed))
    if o.measures and o.measures_corpus is not None:
        from posviz.measures import SeriesOptions, get_measure

        settings = SeriesOptions(corpus=o.measures_corpus, seq_len=o.measures_seq_len, max_blocks=o.measures_max_blocks,
                                 seed=o.seed)
        group = groups.setdefault((o.measures_corpus, o.measures_seq_len, o.measures_max_blocks), [])
        group += [get_measure(name).load("request")(settings) for name in o.measures]
    return groups


def _text_passes(ctx: ReportContext, spec: str) -> dict[str, Any]:
    """Each text measure's result (or its error) for ``spec``: one pass per group of :func:`text_requests`."""
    from posviz.observe.text_pass import observe_text

    out: dict[str, Any] = {}
    for (corpus, seq_len, max_blocks), requests in text_requests(ctx.options).items():
        tries = [requests] + ([[r] for r in requests] if len(requests) > 1 else [])
        for together in tries:
            if all(r.name in out and not isinstance(out[r.name], PosvizError) for r in together):
                continue
            try:
                done = observe_text(spec, together, corpus=corpus, seq_len=seq_len, max_blocks=max_blocks)
            except PosvizError as e:
                out.update({r.name: e for r in together})
                continue
            out.update(done.results)
            break
    return out
