"""Which keys each query may attend to, described by a rule instead of an ``n x n`` mask.

A :class:`Support` is one of the supports transformers use for text without padding: all keys
(bidirectional), keys ``j <= i`` (causal), and either of them restricted to a window of ``w`` keys
(``|j - i| < w``; causal: ``i - w < j <= i``, the sliding window of Mistral, Gemma and Qwen, which
keeps ``w`` keys counting the query itself). Every quantity the statistics need from the mask is then
O(n): the number of entries on each diagonal, the number of keys each query sees, the number of
queries that see each key, and sums of row values along each diagonal. A tile of the mask is formed
only when a tile of logits is (:meth:`Support.tile`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Support:
    """The entries ``(i, j)`` of an ``n x n`` attention map that a query may attend to.

    Attributes
    ----------
    n
        Positions.
    causal
        Keys ``j <= i`` only.
    window
        Keys ``|j - i| < window`` only (``None``: no window). A window of ``n`` or more changes nothing.
    """

    n: int
    causal: bool
    window: int | None = None

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"a support needs at least one position, got n={self.n}")
        if self.window is not None and self.window < 1:
            raise ValueError(f"a window keeps at least the query itself, got window={self.window}")

    @property
    def offsets(self) -> np.ndarray:
        """``(2n - 1,)`` int: the offsets ``k = j - i`` in the order of every per-offset array (``-(n-1) … n-1``)."""
        return np.arange(-(self.n - 1), self.n)

    def keep(self, offsets: Any) -> Any:
        """Whether the support keeps each offset ``k = j - i`` of ``offsets`` (a numpy array or a torch tensor of
        ints: the one rule behind every mask, tile and kernel tile)."""
        keep = offsets <= 0 if self.causal else offsets == offsets
        if self.window is not None:
            keep = keep & (abs(offsets) < self.window)
        return keep

    def allowed_offsets(self) -> np.ndarray:
        """``(2n - 1,)`` bool: the offsets that the support keeps (on every row where they fit)."""
        return self.keep(self.offsets)

    def _row_ranges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        k = self.offsets
        lo, hi = np.maximum(0, -k), np.minimum(self.n, self.n - k)  # rows i with 0 <= i + k < n
        return lo, hi, self.allowed_offsets()

    def diagonal_counts(self) -> np.ndarray:
        """``(2n - 1,)``: the entries of the support on each diagonal."""
        lo, hi, keep = self._row_ranges()
        return np.where(keep, hi - lo, 0).astype(float)

    def row_sums_by_offset(self, values: np.ndarray) -> np.ndarray:
        """Per offset ``k``, the sum of ``values[..., i]`` over the rows ``i`` whose entry ``(i, i + k)`` is in the support.

        ``values`` is ``(..., n)``; returns ``(..., 2n - 1)`` (prefix sums: O(n)).
        """
        v = np.asarray(values, dtype=float)
        prefix = np.concatenate([np.zeros((*v.shape[:-1], 1)), np.cumsum(v, axis=-1)], axis=-1)
        lo, hi, keep = self._row_ranges()
        return np.where(keep, prefix[..., hi] - prefix[..., lo], 0.0)

    def band(self) -> tuple[int, int]:
        """``(lo, hi)``: the support is the band of diagonals ``lo <= j - i <= hi`` (from :meth:`allowed_offsets`)."""
        kept = np.flatnonzero(self.allowed_offsets()) - (self.n - 1)
        return int(kept[0]), int(kept[-1])

    def key_ranges(self) -> tuple[np.ndarray, np.ndarray]:
        """``(n,)`` ints ``first, stop``: query ``i`` sees the keys ``first[i] … stop[i] - 1`` (always one run)."""
        lo, hi = self.band()
        i = np.arange(self.n)
        return np.maximum(0, i + lo), np.minimum(self.n, i + hi + 1)

    def keys_seen(self) -> np.ndarray:
        """``(n,)``: how many keys each query sees."""
        first, stop = self.key_ranges()
        return (stop - first).astype(float)

    def queries_seeing(self) -> np.ndarray:
        """``(n,)``: how many queries see each key."""
        lo, hi = self.band()
        j = np.arange(self.n)  # the queries i with lo <= j - i <= hi
        return (np.minimum(self.n - 1, j - lo) - np.maximum(0, j - hi) + 1).astype(float)

    def size(self) -> int:
        """The number of entries in the support."""
        return int(self.keys_seen().sum())

    def block_counts(self, m: int) -> np.ndarray:
        """``(m, m)``: the support entries in each cell of an ``m x m`` grid of position blocks (``i`` in block ``i * m // n``).

        The support is a band of diagonals, so each cell's count is a closed form in the cell's corners: O(m**2) work
        whatever ``n``, never a tile of the mask. Read-only; cached per support and ``m`` (every layer of a pass asks
        for the same counts).
        """
        return _block_counts(self, m)

    def dense(self) -> np.ndarray:
        """``(n, n)`` bool: the whole mask (for tests and for maps small enough to hold)."""
        return self.tile(0, self.n, 0, self.n)

    def tile(self, i0: int, i1: int, j0: int, j1: int) -> np.ndarray:
        """``(i1 - i0, j1 - j0)`` bool: the mask of queries ``i0:i1`` and keys ``j0:j1``."""
        return self.keep(np.arange(j0, j1)[None, :] - np.arange(i0, i1)[:, None])

    def covers(self, i0: int, i1: int, j0: int, j1: int) -> bool:
        """Whether every entry of the tile of queries ``i0:i1`` and keys ``j0:j1`` is in the support."""
        lowest, highest = j0 - (i1 - 1), (j1 - 1) - i0
        if self.causal and highest > 0:
            return False
        return self.window is None or (lowest > -self.window and highest < self.window)

    def touches(self, i0: int, i1: int, j0: int, j1: int) -> bool:
        """Whether the tile of queries ``i0:i1`` and keys ``j0:j1`` holds any entry of the support."""
        lowest, highest = j0 - (i1 - 1), (j1 - 1) - i0  # the offsets the tile spans
        if self.causal and lowest > 0:
            return False
        if self.window is not None and (highest <= -self.window or lowest >= self.window):
            return False
        return True


def _ramp(p: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """``sum(max(0, i + b) for i in range(p))``, elementwise (ints)."""
    first = np.clip(1 - b, 0, p)  # the first i whose term is positive (p: none is)
    terms = p - first
    return terms * (first + b + p - 1 + b) // 2  # an arithmetic series: its terms times the mean of the ends


def _pairs_below(p: np.ndarray, q: np.ndarray, u: int) -> np.ndarray:
    """How many ``(i, j)`` with ``0 <= i < p``, ``0 <= j < q`` have ``j - i <= u``, elementwise (ints).

    Row ``i`` holds ``clip(i + u + 1, 0, q)`` of them, and ``clip(x, 0, q) = max(0, x) - max(0, x - q)``.
    """
    return _ramp(p, u + 1) - _ramp(p, u + 1 - q)


@functools.lru_cache(maxsize=8)
def _block_counts(support: Support, m: int) -> np.ndarray:
    # The support is the band lo <= j - i <= hi of the n x n square; the entries of a cell A x C of the grid with
    # j - i <= u come from four corner counts (inclusion-exclusion), each a sum of clipped linear terms in closed form.
    n = support.n
    starts = np.searchsorted((np.arange(n) * m) // n, np.arange(m + 1)).astype(np.int64)  # block c: starts[c] … starts[c + 1] - 1
    lo, hi = support.band()
    p, q = np.meshgrid(starts, starts, indexing="ij")  # corners (row boundary, key boundary)

    def below(u: int) -> np.ndarray:  # per cell, its entries with j - i <= u
        corner = _pairs_below(p, q, u)
        return corner[1:, 1:] - corner[:-1, 1:] - corner[1:, :-1] + corner[:-1, :-1]

    counts = (below(hi) - below(lo - 1)).astype(float)
    counts.setflags(write=False)
    return counts
