"""Downstream fine-tuning of pre-trained models (``posviz finetune``): tasks, metrics, seeds and medians.

The public entry point is the plain function ``posviz.finetune`` (``posviz.finetune(sources, tasks=[...], seeds=[0, 1, 2])``), defined in
:mod:`posviz.finetuning.finetune` and re-exported by ``posviz``; this package holds its parts.

Modules (see ARCHITECTURE.md): :mod:`~posviz.finetuning.results` (where results live
and what a record is; no torch, so plots, the series and the report read results
cheaply), :mod:`~posviz.finetuning.finetune`, :mod:`~posviz.finetuning.targets`,
:mod:`~posviz.finetuning.tasks` and its loaders, :mod:`~posviz.finetuning.loop`,
:mod:`~posviz.finetuning.metrics`.
"""
