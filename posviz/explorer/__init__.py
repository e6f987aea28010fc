"""An interactive offline explorer of what posviz measures, as one self-contained HTML file (``posviz explore``).

The public entry point is the plain function ``posviz.explore`` (``posviz.explore("MODEL").save("explorer.html")``), defined in
:mod:`posviz.explorer.explorer` and re-exported by ``posviz``; this package holds its parts.

Modules (see ARCHITECTURE.md and docs/explore.md): :mod:`~posviz.explorer.explorer` (the
entry point and :class:`~posviz.explorer.explorer.Explorer`), one module per tab's numbers
(:mod:`~posviz.explorer.embeddings`, :mod:`~posviz.explorer.heads`,
:mod:`~posviz.explorer.corpus`, :mod:`~posviz.explorer.series`), the sidebar
(:mod:`~posviz.explorer.provenance`), typed arrays (:mod:`~posviz.explorer.arrays`)
and the page (:mod:`~posviz.explorer.page`, with ``assets/``).
"""
