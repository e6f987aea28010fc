"""Downstream fine-tuning of pre-trained models (``posviz finetune``): tasks, metrics, seeds and medians.

The package itself is callable: ``posviz.finetune(sources, tasks=[...], seeds=[0, 1, 2])``
runs :func:`posviz.finetune.api.finetune` (so ``posviz.finetune`` is both the
function of the public API and this package; importing a submodule never hides it).

Modules (see ARCHITECTURE.md): :mod:`~posviz.finetune.results` (where results live
and what a record is; no torch, so plots, ``compare`` and the report read results
cheaply), :mod:`~posviz.finetune.api`, :mod:`~posviz.finetune.targets`,
:mod:`~posviz.finetune.tasks` and its loaders, :mod:`~posviz.finetune.loop`,
:mod:`~posviz.finetune.metrics`.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    """This package, callable as :func:`posviz.finetune.api.finetune` (imported on the first call)."""

    def __call__(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        from posviz.finetune.api import finetune

        return finetune(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
