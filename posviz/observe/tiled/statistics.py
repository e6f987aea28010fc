"""Per-head statistics of one layer from its tiled sums: today's attention statistics, and those of long context.

Definitions as in :mod:`posviz.observe.statistics` and :mod:`posviz.extrapolation.rows` (docs/definitions.md), over
the support (the keys a query may see), for blocks ``b = 1 … B``:

* offset profile, positional share and its exact null, sink mass, entropy (raw and normalised by the log of the
  keys a query sees), largest weight: **exact at every n** (they need only diagonal, row and column sums);
* Toeplitzness of the mean attention and its row-shuffle null: exact while ``n <= map_size``; beyond, they
  score the **block-averaged map** (each cell the mean of the support entries of an ``n/m x n/m`` block of
  positions, over the cells that hold any) with the same definitions. Blocks average away fine structure
  within ``n/m`` positions, so this is the Toeplitzness of the map at that resolution, not of the full map;
* **sink rate** (Gu et al., ICLR 2025): the share of heads whose sink mass (mean attention of queries
  ``1 … n - 1`` to the first token) exceeds ``eps`` (0.3);
* **attention received** by key ``j``: the mass it gets, averaged over the (block, query) pairs that can see it:
  the positional-bias curve ("lost in the middle" shows as a U);
* **mass by distance** ``|j - i|``: the share of all attention at each distance bin
  (:func:`~posviz.observe.tiled.sums.distance_edges`: exact below 64, log-spaced beyond);
* **effective span** ``span50`` / ``span90``: per (block, query), the smallest distance ``D`` such that keys within
  ``D`` hold 50 % (90 %) of the query's attention (exact below 64; beyond, the mass of a bin is taken as spread
  evenly over its distances); its mean and quantiles over queries ``1 … n - 1`` and blocks.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from posviz.observe.statistics import ExcessScores
from posviz.observe.tiled.sums import TiledSums, distance_edges
from posviz.observe.tiled.support import Support

#: Gu et al.'s threshold on a head's mean attention to the first token for it to count as a sink.
SINK_EPSILON = 0.3


@dataclass(frozen=True)
class TiledHeadAttention(ExcessScores):
    """Every statistic of every head of one layer (arrays of shape ``(heads,)`` unless stated)."""

    toeplitzness: np.ndarray
    toeplitzness_offdiag: np.ndarray
    null_mean: np.ndarray
    null_mean_offdiag: np.ndarray
    map_exact: bool  # False: the four above score the block-averaged map
    map_size: int
    positional_share: np.ndarray
    positional_share_null: np.ndarray
    sink_mass: np.ndarray
    entropy: np.ndarray
    entropy_normalised: np.ndarray
    max_weight: np.ndarray
    profiles: np.ndarray  # (heads, 2n - 1), NaN outside the support
    profile_peak: np.ndarray
    received: np.ndarray  # (heads, n)
    distance_edges: np.ndarray  # (bins + 1,)
    distance_mass: np.ndarray  # (heads, bins): share of all attention per distance bin
    span50: np.ndarray
    span90: np.ndarray
    span50_quantiles: np.ndarray  # (heads, 3): 10 %, 50 %, 90 %
    span90_quantiles: np.ndarray
    mean_map: np.ndarray  # (heads, m, m): the mean attention over blocks, exact or block-averaged (map_exact)

    def sink_rate(self, eps: float = SINK_EPSILON) -> float:
        """The share of this layer's heads whose sink mass exceeds ``eps``."""
        return float(np.mean(self.sink_mass > eps))

    def received_profile(self, points: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """The received curve in at most ``points`` equal position buckets: ``(bucket starts, (heads, buckets))``.

        Each bucket is the mean of its positions' values (positions are weighted alike).
        """
        n = self.received.shape[-1]
        m = min(n, points)
        starts = (np.arange(m) * n) // m
        sums = np.add.reduceat(self.received, starts, axis=-1)
        return starts, sums / np.diff(np.append(starts, n))


def layer_statistics(sums: TiledSums, support: Support) -> TiledHeadAttention:
    """Every statistic of every head of one layer (see the module docstring)."""
    s = sums.numpy()
    b, n = s["blocks"], support.n
    counts = support.diagonal_counts()
    with np.errstate(invalid="ignore", divide="ignore"):
        profiles = np.where(counts > 0, s["offsets"] / (b * np.maximum(counts, 1.0)), np.nan)
    mean_map, (r2, r2_off, null, null_off) = _map_scores(s["map"], sums.exact_map, support, n, b)
    share, share_null = _positional_shares(s, support)
    keys = support.keys_seen()
    queries = slice(1, n) if n > 1 else slice(0, 1)
    entropy = s["entropy"] / b
    with np.errstate(invalid="ignore", divide="ignore"):
        normalised = np.where(keys > 1, entropy / np.log(np.maximum(keys, 2.0)), np.nan)
    edges = distance_edges(n)
    folded = _mass_by_distance(s["offsets"], n)
    bins = np.add.reduceat(folded, edges[:-1], axis=-1)
    from posviz.observe.statistics import profile_peaks

    return TiledHeadAttention(
        toeplitzness=r2, toeplitzness_offdiag=r2_off, null_mean=null, null_mean_offdiag=null_off,
        map_exact=sums.exact_map, map_size=int(s["map"].shape[-1]),
        positional_share=share, positional_share_null=share_null,
        sink_mass=s["sink"] / (b * (n - 1)) if n > 1 else s["received"][:, 0] / b,
        entropy=entropy[:, queries].mean(axis=1), entropy_normalised=np.nanmean(normalised[:, queries], axis=1),
        max_weight=(s["max_weight"] / b)[:, queries].mean(axis=1),
        profiles=profiles, profile_peak=profile_peaks(profiles),
        received=s["received"] / (b * support.queries_seeing()),
        distance_edges=edges, distance_mass=bins / bins.sum(axis=-1, keepdims=True),
        span50=_mean_of(s["span50"]), span90=_mean_of(s["span90"]),
        span50_quantiles=_quantiles(s["span50"]), span90_quantiles=_quantiles(s["span90"]), mean_map=mean_map,
    )


def _mass_by_distance(offsets: np.ndarray, n: int) -> np.ndarray:
    """``(heads, n)``: the mass at each distance ``|k|``, from the mass at each offset ``k``."""
    out = offsets[:, n - 1 :].copy()
    out[:, 1:] += offsets[:, : n - 1][:, ::-1]
    return out


def _mean_of(histogram: np.ndarray) -> np.ndarray:
    """Per head, the mean of the values whose counts ``histogram[:, v]`` holds."""
    values = np.arange(histogram.shape[-1])
    return (histogram * values).sum(axis=-1) / histogram.sum(axis=-1)


def _quantiles(histogram: np.ndarray, q: tuple[float, ...] = (0.1, 0.5, 0.9)) -> np.ndarray:
    """Per head, the lower quantiles ``q`` of the values whose counts ``histogram[:, v]`` holds."""
    cum = np.cumsum(histogram, axis=-1)
    out = np.empty((histogram.shape[0], len(q)))
    for h in range(histogram.shape[0]):
        out[h] = np.searchsorted(cum[h], np.asarray(q) * cum[h, -1], side="left")
    return out


def _positional_shares(s: dict, support: Support) -> tuple[np.ndarray, np.ndarray]:
    """Positional share and its exact null, as :func:`posviz.observe.statistics.positional_shares`, from O(n) sums."""
    from posviz.observe.statistics import _one_minus

    b = s["blocks"]
    counts, size = support.diagonal_counts(), support.keys_seen()
    ok = counts > 0
    sq = s["row_sq"].sum(axis=-1)
    explained = (s["offsets"][..., ok] ** 2 / (b * counts[ok])).sum(axis=-1)
    tot = sq - s["row_mass"].sum(axis=-1) ** 2 / (b * support.size())
    mean = s["row_mass"] / size
    var = np.maximum(s["row_sq"] / size - s["row_sum_sq"] / size**2, 0.0)
    m, v = support.row_sums_by_offset(mean), support.row_sums_by_offset(var)
    null_explained = ((v[..., ok] + m[..., ok] ** 2) / (b * counts[ok])).sum(axis=-1)
    return np.asarray(_one_minus(sq - explained, tot, sq)), np.asarray(_one_minus(sq - null_explained, tot, sq))


@functools.lru_cache(maxsize=8)
def _map_cells(support: Support, m: int, exact: bool) -> tuple[np.ndarray, ...]:
    """For an ``m x m`` map of ``support``: its mask, the mask less the diagonal, the factor from a cell's sum to its
    mean (per block), and the two masks' diagonal counts. Read-only; cached (every layer of a pass has the same)."""
    from posviz.toeplitz.diagonals import diagonal_sums_array

    if exact:
        mask, inverse = support.dense(), np.ones(())  # 0-d: each cell is its own mean
    else:
        cells = support.block_counts(m)
        mask, inverse = cells > 0, 1.0 / np.maximum(cells, 1.0)
    off = mask.copy()
    off[np.arange(m), np.arange(m)] = False
    counts = diagonal_sums_array(mask.astype(float))
    counts_off = counts.copy()
    counts_off[m - 1] = 0.0  # offset 0: the diagonal
    out = (mask, off, inverse, counts, counts_off)
    for x in out:
        x.setflags(write=False)
    return out


def _map_scores(grid: np.ndarray, exact: bool, support: Support, n: int, b: int) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """The mean map (exact, or each cell the mean of the support entries of its block of positions, 0 where it has
    none), and its Toeplitzness (full, off-diagonal) with their row-shuffle nulls.

    Both variants come from one set of sums over the map with its diagonal zeroed in place (diagonal, row and
    squared-row sums), to which the diagonal is added back for the full variant: one pass over the heads x m x m
    map where scoring each variant on its own took two (and added, not subtracted, so no digits cancel).
    """
    from posviz.observe.statistics import null_mean_from_rows, toeplitzness_from_sums
    from posviz.toeplitz.diagonals import diagonal_sums_array

    m = grid.shape[-1]
    mask, off, inverse, counts, counts_off = _map_cells(support, m, exact)
    # each cell: the mean of the support entries of its block of positions (the entry itself where exact); the sums
    # hold nothing outside the support, so `mean` is already zero outside `mask` (no masked copy needed)
    mean = grid * (inverse / b)
    idx = np.arange(m)
    diagonal = mean[..., idx, idx].copy()
    mean[..., idx, idx] = 0.0
    sums_off = diagonal_sums_array(mean)
    row_sum_off, row_sq_off = mean.sum(axis=-1), np.einsum("...ij,...ij->...i", mean, mean)

    # the two-pass fallback (only where the closed form is ill-conditioned) reads `mean` while its diagonal is zero
    offdiag = (toeplitzness_from_sums(sums_off, counts_off, row_sq_off.sum(axis=-1), lambda: (mean, off)),
               null_mean_from_rows(row_sum_off, row_sq_off, off))
    mean[..., idx, idx] = diagonal
    sums = sums_off.copy()
    sums[..., m - 1] = diagonal.sum(axis=-1)  # offset 0
    row_sq = row_sq_off + diagonal**2
    full = (toeplitzness_from_sums(sums, counts, row_sq.sum(axis=-1), lambda: (mean, mask)),
            null_mean_from_rows(row_sum_off + diagonal, row_sq, mask))
    return mean, tuple(np.atleast_1d(np.asarray(x, dtype=float)) for x in (full[0], offdiag[0], full[1], offdiag[1]))
