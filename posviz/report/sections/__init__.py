"""The report's sections, in page order (the title page is added in front by the renderer).

Adding a section is one module with a ``SECTION = Section(...)`` and one line in
:data:`SECTIONS`. A section whose ``build`` returns no pages for the given inputs
is left out of the report, its bookmarks and its contents line; the methods page
(last) states the definitions of the sections that were included.
"""

from __future__ import annotations

from posviz.report.section import Section
from posviz.report.sections import (
    albert,
    attention,
    extrapolate,
    finetune,
    heads,
    heatmaps,
    hidden,
    measures,
    methods,
    summary,
    training,
)

SECTIONS: list[Section] = [
    summary.SECTION,
    heatmaps.SECTION,
    heads.SECTION,
    attention.SECTION,
    hidden.SECTION,
    measures.SECTION,
    extrapolate.SECTION,
    albert.SECTION,
    training.SECTION,
    finetune.SECTION,
    methods.SECTION,  # keep last: it describes the sections included before it
]
