"""Finding plotted data in a matplotlib figure by the ``gid`` posviz gives its artists."""

from __future__ import annotations

from typing import Any


def by_gid(fig: Any, gid: str) -> Any:
    """The one artist of ``fig`` with this ``gid`` (asserts there is exactly one)."""
    hits = fig.findobj(lambda a: a.get_gid() == gid)
    assert len(hits) == 1, (gid, hits)
    return hits[0]
