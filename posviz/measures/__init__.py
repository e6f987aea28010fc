"""Measures: what posviz measures about position, in one registry that the front ends loop over.

A :class:`~posviz.measures.contract.Measure` declares what it needs from a model (its weights, or a pass over text),
how it runs, and its views (a series along checkpoints, a table, a figure). The registry
(:mod:`posviz.measures.registry`) holds posviz's own measures and those that other packages register under the
``posviz.measures`` entry-point group; ``posviz measures`` lists them and ``posviz trajectory --measure NAME`` runs
any of them along a checkpoint series. See ARCHITECTURE.md ("The measure contract") and docs/extending.md.
"""

from posviz.measures.contract import Measure, SeriesOptions
from posviz.measures.registry import GROUP, MeasurePluginError, get_measure, measure_names, measures

__all__ = ["GROUP", "Measure", "MeasurePluginError", "SeriesOptions", "get_measure", "measure_names", "measures"]
