"""How a command-line input becomes a :class:`~posviz.report.context.ReportItem`.

Each loader of :data:`INPUT_LOADERS` returns an item for the inputs it recognises
and ``None`` for the others; the first item wins. Kinds of input other than models
(training-run folders, :mod:`posviz.report.runs`) have a loader placed before
:func:`~posviz.report.models.load_model`, which accepts everything else (and raises
a clear error for what it cannot read).
"""

from __future__ import annotations

from collections.abc import Callable

from posviz.report.context import ReportItem, ReportOptions
from posviz.report.models import load_model
from posviz.report.runs import load_run

InputLoader = Callable[[str, ReportOptions], "ReportItem | None"]

INPUT_LOADERS: list[InputLoader] = [load_run, load_model]


def load_item(spec: str, options: ReportOptions) -> ReportItem:
    """Turn one report input into a :class:`ReportItem` with the first loader that recognises it."""
    for loader in INPUT_LOADERS:
        item = loader(spec, options)
        if item is not None:
            return item
    from posviz.errors import OptionError

    raise OptionError(f"{spec}: not a model or any other kind of report input")
