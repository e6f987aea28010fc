"""An interactive offline explorer of what posviz measures, as one self-contained HTML file (``posviz explore``).

The package itself is callable: ``posviz.explore("MODEL").save("explorer.html")``
runs :func:`posviz.explore.api.explore` (so ``posviz.explore`` is both the function
of the public API and this package; importing a submodule never hides it).

Modules (see ARCHITECTURE.md and docs/explore.md): :mod:`~posviz.explore.api` (the
entry point and :class:`~posviz.explore.api.Explorer`), one module per tab's numbers
(:mod:`~posviz.explore.embeddings`, :mod:`~posviz.explore.heads`,
:mod:`~posviz.explore.corpus`, :mod:`~posviz.explore.series`), the sidebar
(:mod:`~posviz.explore.provenance`), typed arrays (:mod:`~posviz.explore.arrays`)
and the page (:mod:`~posviz.explore.page`, with ``assets/``).
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    """This package, callable as :func:`posviz.explore.api.explore` (imported on the first call)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from posviz.explore.api import explore

        return explore(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
