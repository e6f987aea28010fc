"""PDF reports: everything posviz knows about one or more models or training runs, in one file.

A report is a list of independent sections (:mod:`posviz.report.sections`), each
a function ``build(context) -> list[Figure]`` with a bookmark title; a section
with nothing to show for the given inputs is left out. The title page (models,
sources, date, version, conventions, contents) comes first and the methods page
(definitions of the included sections, with citations) last.

Examples
--------
>>> from posviz.report import build_report
>>> build_report(["sentence-transformers/all-MiniLM-L6-v2"], "minilm.pdf")   # doctest: +SKIP
PosixPath('minilm.pdf')
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from posviz.report.context import ReportContext, ReportItem, ReportOptions, source_date
from posviz.report.inputs import load_item
from posviz.report.render import render_report
from posviz.report.section import Section

__all__ = ["ReportContext", "ReportItem", "ReportOptions", "Section", "build_context", "build_report", "render_report"]


def build_context(
    models: Sequence[str],
    options: ReportOptions | None = None,
    *,
    progress: Callable[[Sequence[str]], Iterable[str]] | None = None,
) -> ReportContext:
    """Load and score every input, and stamp the report with its date and posviz version.

    Parameters
    ----------
    models
        Model folders, weight files, hub ids or synthetic controls.
    options
        Report settings (default :class:`ReportOptions`).
    progress
        Optional wrapper around the model list (e.g. a progress bar).
    """
    from posviz import __version__
    from posviz.errors import OptionError

    if not models:
        raise OptionError("give at least one MODEL", "for example: posviz report sentence-transformers/all-MiniLM-L6-v2 -o report.pdf")
    options = options or ReportOptions()
    _check_options(models, options)
    items = [load_item(m, options) for m in (progress(models) if progress else models)]
    for item in items:
        if item.spec in options.scores and not item.has_positions:
            raise OptionError(f"--score {item.spec}: {item.label} has no learned absolute position table to place on the ALBERT figure",
                              "give --score only for models or runs with position embeddings")
    return ReportContext(items, options, date=source_date().strftime("%Y-%m-%d"), version=__version__)


def _check_options(models: Sequence[str], options: ReportOptions) -> None:
    """Fail before any work on options that cannot apply (metric name, ``--score`` for an input not given)."""
    from posviz.errors import OptionError
    from posviz.reference import METRICS

    if options.metric not in METRICS:
        raise OptionError(f"unknown metric {options.metric!r}", f"choose one of: {', '.join(METRICS)}")
    for model in options.scores:
        if model not in models:
            raise OptionError(f"--score {model}: not one of the report's inputs",
                              f"give it as an input too: posviz report {model} --score {model}=VALUE")
    if options.scores and not options.albert:
        raise OptionError("--score places models on the ALBERT figure, which --no-albert leaves out")
    if options.extrapolate_lengths is not None:
        from posviz.extrapolation.extrapolate import parse_lengths

        parse_lengths(options.extrapolate_lengths)


def build_report(models: Sequence[str], output: str | os.PathLike, **options) -> Path:
    """Write a PDF report about ``models`` to ``output`` (atomically).

    Parameters
    ----------
    models
        Model folders, weight files, hub ids (``org/name[@rev]``), synthetic controls
        or ``posviz train`` run folders.
    output
        Target ``.pdf`` file; checked before any work is done.
    **options
        Fields of :class:`ReportOptions` (``title``, ``normalize``, ``null_draws``,
        ``seed``, ``positions``, ``table``, ``max_pixels``, ``cmap``, ``robust``,
        ``metric``, ``scores``, ``albert``).

    Returns
    -------
    Path
        The written file.

    Raises
    ------
    PosvizError
        Bad output path, unreadable model, or nothing to report.
    """
    from posviz.util.atomic import check_output_path

    path = check_output_path(output, (".pdf",))
    ctx = build_context(models, ReportOptions(**options))
    return render_report(ctx, path)
