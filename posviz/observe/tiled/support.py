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

    def key_ranges(self) -> tuple[np.ndarray, np.ndarray]:
        """``(n,)`` ints ``first, stop``: query ``i`` sees the keys ``first[i] … stop[i] - 1`` (always one run)."""
        i = np.arange(self.n)
        first = np.zeros(self.n, dtype=int) if self.window is None else np.maximum(0, i - self.window + 1)
        last = i if self.causal else (np.full(self.n, self.n - 1) if self.window is None else np.minimum(self.n - 1, i + self.window - 1))
        return first, last + 1

    def keys_seen(self) -> np.ndarray:
        """``(n,)``: how many keys each query sees."""
        first, stop = self.key_ranges()
        return (stop - first).astype(float)

    def queries_seeing(self) -> np.ndarray:
        """``(n,)``: how many queries see each key."""
        j = np.arange(self.n)
        last = np.full(self.n, self.n - 1) if self.window is None else np.minimum(self.n - 1, j + self.window - 1)
        first = j if self.causal else (np.zeros(self.n, dtype=int) if self.window is None else np.maximum(0, j - self.window + 1))
        return (last - first + 1).astype(float)

    def size(self) -> int:
        """The number of entries in the support."""
        return int(self.keys_seen().sum())

    def block_counts(self, m: int) -> np.ndarray:
        """``(m, m)``: the support entries in each cell of an ``m x m`` grid of position blocks (``i`` in block ``i * m // n``).

        Each query's keys are one run, so its count in a block of keys is the overlap of two ranges: O(n m) work, a
        slab of rows at a time (at most 2**22 numbers at once), never a tile of the mask. Read-only; cached per support
        and ``m`` (every layer of a pass asks for the same counts).
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


@functools.lru_cache(maxsize=8)
def _block_counts(support: Support, m: int) -> np.ndarray:
    n = support.n
    block = (np.arange(n) * m) // n
    starts = np.searchsorted(block, np.arange(m + 1))  # key (and query) block c holds positions starts[c] … starts[c + 1] - 1
    first, stop = support.key_ranges()
    counts = np.zeros((m, m))
    per_slab = max(1, 2**22 // max(1, m * -(-n // m)))  # row blocks per slab
    for a0 in range(0, m, per_slab):
        a1 = min(m, a0 + per_slab)
        i0, i1 = starts[a0], starts[a1]
        if i1 == i0:
            continue  # blocks with no rows (m > n)
        overlap = np.minimum(stop[i0:i1, None], starts[None, 1:]) - np.maximum(first[i0:i1, None], starts[None, :-1])
        rows = np.unique(block[i0:i1])
        counts[rows] = np.add.reduceat(np.maximum(overlap, 0), starts[rows] - i0, axis=0)
    counts.setflags(write=False)
    return counts
