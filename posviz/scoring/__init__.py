"""Toeplitzness scores of models from their weights: one model (:mod:`~posviz.scoring.model`), many at once with
hub provenance and concurrency (:mod:`~posviz.scoring.batch`), their on-disk cache (:mod:`~posviz.scoring.cache`),
and layer selection and per-layer head scores (:mod:`~posviz.scoring.layers`); see ARCHITECTURE.md."""
