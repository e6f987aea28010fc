"""The interfaces of a measure's own tab in the explorer (what ``Measure.explorer`` names).

A text measure's tab (:class:`ExplorerTab`) is drawn from its result of the one pass over the corpus; a weight
measure's (:class:`WeightsTab`: P, Heads) from the checkpoint alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The measures whose tab the page's script draws with a view of its own (``VIEWS`` in ``assets/explorer.js``; a test
#: checks that the two agree). Any other text measure shows on the generic Measures tab.
PAGE_VIEWS = ("attention", "hidden")

#: The weight measures whose tab the page's script draws (``WEIGHT_VIEWS`` in ``assets/explorer.js``; a test checks
#: that the two agree), in the order of their tabs.
WEIGHT_VIEWS = ("toeplitzness", "heads")


@dataclass(frozen=True)
class ExplorerTab:
    """A text measure's own tab in ``posviz explore --corpus``.

    Attributes
    ----------
    title
        The tab's button.
    data
        ``data(result) -> dict``: what the page's view of the measure (its name in :data:`PAGE_VIEWS`) draws, JSON-ready
        (NaN as ``None``; arrays as :mod:`posviz.explorer.arrays` specs).
    layers
        Whether the explorer's ``layers`` option chooses its layers (attention's layers are the model's blocks; hidden
        states, numbered from the embedding output, are all scored).
    """

    title: str
    data: Callable[[Any], dict[str, Any]]
    layers: bool = False


@dataclass(frozen=True)
class WeightsTab:
    """A weight measure's own tab in ``posviz explore``, drawn from the checkpoint (no text).

    Attributes
    ----------
    title
        The tab's button.
    key
        Where a model's entry of the page's data holds it (``p``, ``heads``: what the page's view reads).
    short
        Its name in a note on a model that lacks it (``no P tab: ...``).
    data
        ``data(spec, settings) -> dict | None``: the view of one model (with its ``model`` name), JSON-ready;
        ``None`` when the model has nothing of this kind and nothing to say about it (a control has no heads).
        ``settings`` is a :class:`posviz.explorer.weights.WeightSettings`. Raises ``UnsupportedModelError`` when the
        model lacks what it reads (the page notes it).
    """

    title: str
    key: str
    short: str
    data: Callable[[str, Any], dict[str, Any] | None]
