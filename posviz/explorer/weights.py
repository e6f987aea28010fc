"""The weight tabs' numbers: a loop over the registry's measures of the weights that have a tab of their own.

``toeplitzness`` has the P tab (:mod:`posviz.explorer.embeddings`: P, its Toeplitz part and residual, the offset
profile) and ``heads`` the Heads tab (:mod:`posviz.explorer.heads`: every layer's position-only map of every head).
Each is a :class:`~posviz.explorer.tab.WeightsTab`, the measure's ``explorer`` part, read from the checkpoint alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from posviz.explorer.tab import WeightsTab


@dataclass(frozen=True)
class WeightSettings:
    """The explorer's options of its weight tabs (as :func:`posviz.explore` names them)."""

    layers: str = "all"
    max_positions: int = 512
    positions: str | None = None
    table: str | None = None
    null_draws: int = 10
    seed: int = 0
    progress: bool = False


def weight_tab_measures() -> list[Any]:
    """The registry's measures with a weight tab on the page, in registry order."""
    from posviz.explorer.tab import WEIGHT_VIEWS
    from posviz.measures import get_measure, measure_names

    # only names of the page's views can have a tab: no other package's measure is imported to find them
    names = [name for name in measure_names() if name in WEIGHT_VIEWS]
    return [m for m in map(get_measure, names) if m.explorer]


def p_view(spec: str, settings: WeightSettings) -> dict[str, Any]:
    """The P tab of one model: its position table's P, exact up to ``max_positions`` and block-averaged above."""
    from posviz.explorer.embeddings import embeddings_view
    from posviz.read.embeddings import load_position_embeddings

    pe = load_position_embeddings(spec, table=settings.table, positions=settings.positions)
    return embeddings_view(pe, max_positions=settings.max_positions, null_draws=settings.null_draws, seed=settings.seed)


def heads_view(spec: str, settings: WeightSettings) -> dict[str, Any] | None:
    """The Heads tab of one model; ``None`` for a control (``sinusoidal:512x384``), which has no heads."""
    from posviz.explorer.heads import heads_view as view
    from posviz.read.embeddings import is_synthetic

    if is_synthetic(spec):
        return None
    return view(spec, layers=settings.layers, positions=settings.positions, table=settings.table,
                progress=settings.progress)


#: ``toeplitzness``'s tab.
P_TAB = WeightsTab("P = E Eᵀ", "p", "P", p_view)
#: ``heads``'s tab.
HEADS_TAB = WeightsTab("Heads", "heads", "Heads", heads_view)
