"""The report's sections, in page order (the title page is added in front by the renderer).

A measure of the registry brings its own section (its ``report`` part, :mod:`posviz.measures.contract`), placed in
registry order after the summary; a measure on text without one shows, when asked with ``--measure``, on the page of
other measures on text (:mod:`~posviz.report.sections.measures`). The sections about training runs, fine-tuning and
the ALBERT comparison follow, and the methods page comes last. A section whose ``build`` returns no pages for the
given inputs is left out of the report, its bookmarks and its contents line; the methods page states the definitions
of the sections that were included.
"""

from __future__ import annotations

from posviz.report.section import Section
from posviz.report.sections import albert, finetune, measures, methods, summary, training


def sections() -> list[Section]:
    """Every section in page order: the summary, the measures' own sections in registry order (with the page of
    other measures on text where the first measure on text without a section stands), ALBERT, training, fine-tuning,
    methods."""
    from posviz.measures import measures as registry

    out = [summary.SECTION]
    for measure in registry().values():
        section = measure.load("report") if measure.report else measures.SECTION if measure.request else None
        if section is not None and section not in out:
            out.append(section)
    if measures.SECTION not in out:
        out.append(measures.SECTION)
    return [*out, albert.SECTION, training.SECTION, finetune.SECTION, methods.SECTION]  # methods last: it describes the rest
