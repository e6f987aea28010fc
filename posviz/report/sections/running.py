"""What the sections that open or run each model share: which items they take, and each item's error kept as a note.

The attention, hidden-states and extrapolation sections run every model or run of
the report on text; the heads section opens each one's weights. A synthetic table
(``sinusoidal:512x768``) has no model and is skipped; a model that fails leaves a
note on the report and the other models go on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

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
