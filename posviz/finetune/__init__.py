"""Downstream fine-tuning of pre-trained models (``posviz finetune``): tasks, metrics, seeds and medians.

Modules (see ARCHITECTURE.md):

* :mod:`~posviz.finetune.results`: where results live and what a record is (no torch:
  plots, ``compare`` and the report read results cheaply).
"""
