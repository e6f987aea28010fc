"""Beyond the trained length (``posviz extrapolate``): held-out loss and attention statistics at several lengths.

The package itself is callable: ``posviz.extrapolate("gpt2", lengths="256,1024,2048")``
runs :func:`posviz.extrapolate.api.extrapolate` (so ``posviz.extrapolate`` is both the
function of the public API and this package; importing a submodule never hides it).

Modules, bottom to top: RoPE-scaling variants (:mod:`~posviz.extrapolate.scaling`), what a
config says about objective, table and training length (:mod:`~posviz.extrapolate.objective`),
the text budget and its windows at each length (:mod:`~posviz.extrapolate.blocks`), entropy and
largest-weight sums (:mod:`~posviz.extrapolate.rows`), one pass at one length
(:mod:`~posviz.extrapolate.evaluate`), the records (:mod:`~posviz.extrapolate.result`), one model
through its variants and lengths (:mod:`~posviz.extrapolate.models`), task runs on their task
(:mod:`~posviz.extrapolate.tasks`) and the entry point (:mod:`~posviz.extrapolate.api`). Definitions: docs/definitions.md.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    """This package, callable as :func:`posviz.extrapolate.api.extrapolate` (imported on the first call)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from posviz.extrapolate.api import extrapolate

        return extrapolate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
