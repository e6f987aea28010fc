"""A measure along a series of checkpoints (``posviz trajectory``): the points of a series, the measures' rows over
them (weights, bands, text), their integrity checks, training-run trajectories and downstream paths, and the
library entry point :func:`posviz.trajectory` (:mod:`posviz.series.trajectory`); see ARCHITECTURE.md."""
