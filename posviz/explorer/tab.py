"""The one interface of a measure's own tab among the explorer's corpus tabs (what ``Measure.explorer`` names)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The measures whose tab the page's script draws with a view of its own (``VIEWS`` in ``assets/explorer.js``; a test
#: checks that the two agree). Any other text measure shows on the generic Measures tab.
PAGE_VIEWS = ("attention", "hidden")


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
