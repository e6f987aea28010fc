"""Per-head statistics of attention over a corpus, from streaming sums: Toeplitzness, null, profile, positional share.

Definitions (docs/definitions.md, "Attention over a corpus"). ``A_b`` is one head's
attention matrix on block ``b`` (rows: queries ``i``, columns: keys ``j``), ``B``
blocks, offset ``k = j - i``. The **support** is the set of entries a query may
attend to: all ``n**2`` for bidirectional models, ``j <= i`` for causal ones. Every
statistic and every null is computed over the support only (for causal models the
zeros above the diagonal are the mask, not attention).

* mean attention ``Abar = (1/B) sum_b A_b``;
* Toeplitzness of ``Abar``: ``R^2 = 1 - sum(Abar - T(Abar))**2 / sum(Abar - mean)**2`` over the support (``full``)
  or over the support without the main diagonal (``exclude_diagonal``), ``T`` the per-diagonal means;
* its null: ``Abar`` with the entries of each row shuffled independently within the row's support
  (off-diagonal variant: within the support less the diagonal, which stays in place); rows stay distributions;
  the exact mean over all shuffles is :func:`toeplitz_null_mean`;
* offset profile ``f(k)``: mean of ``Abar`` along diagonal ``k`` (NaN outside the support);
* positional share: ``1 - sum_b sum_ij (A_b,ij - f(j - i))**2 / sum_b sum_ij (A_b,ij - mean)**2`` over the support,
  with the null of every block's rows shuffled the same way (exact mean: :func:`positional_share`);
* sink mass: mean of ``Abar[i, 0]`` over the queries ``i >= 1``.

Bidirectional Toeplitzness is scored by :mod:`posviz.toeplitz` (a dense
:class:`~posviz.positional_scores.PositionalScores`); causal matrices by the same
definition restricted to the support (:func:`masked_toeplitzness`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from posviz.positional_scores import PositionalScores
from posviz.toeplitz.diagonals import diagonal_sums_array


@dataclass(frozen=True)
class LayerSums:
    """Streaming sums of one layer's attention over ``blocks`` blocks (what every statistic needs).

    Attributes
    ----------
    blocks
        ``B``, the number of blocks summed.
    total
        ``(heads, n, n)``: ``sum_b A_b``.
    row_sq
        ``(heads, n)``: ``sum_b sum_j A_b[i, j]**2``.
    row_sum_sq
        ``(heads, n)``: ``sum_b (sum_j A_b[i, j])**2`` (``B`` for exact softmax rows).
    """

    blocks: int
    total: np.ndarray
    row_sq: np.ndarray
    row_sum_sq: np.ndarray

    @property
    def mean(self) -> np.ndarray:
        """``(heads, n, n)``: the mean attention ``Abar``."""
        return self.total / self.blocks


def support_mask(n: int, causal: bool) -> np.ndarray:
    """``(n, n)`` bool: the entries a query may attend to (``j <= i`` when ``causal``)."""
    return np.tril(np.ones((n, n), dtype=bool)) if causal else np.ones((n, n), dtype=bool)


def _support(n: int, causal: bool, exclude_diagonal: bool) -> np.ndarray:
    mask = support_mask(n, causal)
    if exclude_diagonal:
        mask = mask & ~np.eye(n, dtype=bool)
    return mask


def masked_toeplitzness(matrix: np.ndarray, mask: np.ndarray) -> float:
    """Toeplitzness R^2 of one matrix over the entries of ``mask`` (two passes: projection, then residuals).

    The Toeplitz projection restricted to the mask replaces each entry by the mean of
    its diagonal's masked entries. With a full mask this is
    :func:`posviz.toeplitz.toeplitzness`; with ``j <= i`` it scores a causal matrix
    without counting the masked zeros.
    """
    n = matrix.shape[-1]
    counts = diagonal_sums_array(mask.astype(float))
    sums = diagonal_sums_array(np.where(mask, matrix, 0.0))
    f = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
    k = np.arange(n)[None, :] - np.arange(n)[:, None] + n - 1
    values = matrix[mask]
    resid = float(((values - f[k][mask]) ** 2).sum())
    tot = float(((values - values.mean()) ** 2).sum())
    return 1.0 if tot <= 1e-300 else 1.0 - resid / tot


def _standard_support(mask: np.ndarray) -> tuple[bool, bool] | None:
    """``(causal, exclude_diagonal)`` when ``mask`` is one of the four supports of :func:`_support`, else ``None``."""
    n = mask.shape[-1]
    for causal in (False, True):
        for exclude in (False, True):
            if np.array_equal(mask, _support(n, causal, exclude)):
                return causal, exclude
    return None


def _row_summer(mask: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """A function ``values -> diagonal_sums_array(np.where(mask, values[:, None], 0))``, classified once per mask.

    For the standard supports (all entries or ``j <= i``, with or without the
    diagonal) the rows of offset ``k`` are one contiguous range, so prefix sums give
    every offset in O(n) instead of O(n**2); any other mask takes the dense sums.
    """
    kind = _standard_support(mask)
    if kind is None:
        return lambda values: diagonal_sums_array(np.where(mask, values[:, None], 0.0))
    causal, exclude = kind
    n = mask.shape[-1]
    k = np.arange(-(n - 1), n)
    lo, hi = np.maximum(0, -k), np.minimum(n, n - k)  # rows i with 0 <= i + k < n
    dropped = (k > 0) if causal else np.zeros(k.shape, dtype=bool)
    if exclude:
        dropped = dropped | (k == 0)

    def sums(values: np.ndarray) -> np.ndarray:
        prefix = np.concatenate([[0.0], np.cumsum(values, dtype=float)])
        return np.where(dropped, 0.0, prefix[hi] - prefix[lo])

    return sums


def row_diagonal_sums(row_values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``diagonal_sums_array(np.where(mask, row_values[:, None], 0))``: per offset, the sum of ``row_values`` over its rows.

    O(n) for the standard supports (:func:`_row_summer`).
    """
    return _row_summer(mask)(row_values)


def _expected_explained(row_mean: np.ndarray, row_var: np.ndarray, mask: np.ndarray, scale: float) -> float:
    """``sum_k E[S_k**2] / (scale * c_k)`` when each row puts one independent draw on each diagonal it meets.

    ``S_k`` sums, over the rows ``i`` of diagonal ``k``, a random entry of row ``i``
    with mean ``row_mean[i]`` and variance ``row_var[i]``; so ``E[S_k**2]`` is the
    sum of the variances plus the square of the summed means.
    """
    sums = _row_summer(mask)  # the mask is classified once for the three sums
    counts, m, v = sums(np.ones(mask.shape[0])), sums(row_mean), sums(row_var)
    ok = counts > 0
    return float(((v[ok] + m[ok] ** 2) / (scale * counts[ok])).sum())


def toeplitz_null_mean(matrix: np.ndarray, mask: np.ndarray) -> float:
    """Exact mean Toeplitzness of ``matrix`` with each row's entries shuffled within the row's part of ``mask``.

    The shuffle keeps the multiset of masked entries, so the denominator of R^2 is
    fixed and only the explained part moves: each row contributes one uniformly
    drawn entry to each diagonal it meets, independently of the other rows.
    """
    size = mask.sum(axis=1)
    values = np.where(mask, matrix, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(size > 0, values.sum(axis=1) / size, 0.0)
        var = np.where(size > 0, (values**2).sum(axis=1) / size - mean**2, 0.0)
    x = matrix[mask]
    tot = float(((x - x.mean()) ** 2).sum())
    if tot <= 1e-300:
        return 1.0
    resid = float((x**2).sum()) - _expected_explained(mean, np.maximum(var, 0.0), mask, 1.0)
    return 1.0 - resid / tot


def positional_share(sums: LayerSums, h: int, mask: np.ndarray) -> tuple[float, float]:
    """Positional share of head ``h`` over the blocks, and its exact null mean.

    Returns
    -------
    share, null
        ``1 - sum_b sum_ij (A_b - f(j - i))**2 / sum_b sum_ij (A_b - mean)**2`` over
        the support, and its mean when every row of every block is shuffled within
        its support. Rows outside a full mask's support hold zeros (causal masks),
        so the streamed row sums are sums over the support.
    """
    b, total = sums.blocks, np.where(mask, sums.total[h], 0.0)
    counts = diagonal_sums_array(mask.astype(float))
    s = diagonal_sums_array(total)
    ok = counts > 0
    sq = float(sums.row_sq[h].sum())
    explained = float((s[ok] ** 2 / (b * counts[ok])).sum())
    tot = sq - float(total.sum()) ** 2 / (b * mask.sum())
    if tot <= 1e-300:
        return 1.0, 1.0
    size = mask.sum(axis=1)
    row_total = total.sum(axis=1)
    mean = row_total / size  # sum over blocks of each row's mean entry
    var = sums.row_sq[h] / size - sums.row_sum_sq[h] / size**2  # sum over blocks of each row's variance
    null_explained = _expected_explained(mean, np.maximum(var, 0.0), mask, float(b))
    return 1.0 - (sq - explained) / tot, 1.0 - (sq - null_explained) / tot


@dataclass(frozen=True)
class HeadAttention:
    """The statistics of every head of one layer (arrays of shape ``(heads,)`` unless stated)."""

    toeplitzness: np.ndarray
    toeplitzness_offdiag: np.ndarray
    null_mean: np.ndarray
    null_mean_offdiag: np.ndarray
    positional_share: np.ndarray
    positional_share_null: np.ndarray
    sink_mass: np.ndarray
    profiles: np.ndarray  # (heads, 2n - 1), NaN outside the support
    profile_peak: np.ndarray  # int offsets

    @property
    def excess(self) -> np.ndarray:
        """``(R^2 - null) / (1 - null)``, full variant."""
        return _excess(self.toeplitzness, self.null_mean)

    @property
    def excess_offdiag(self) -> np.ndarray:
        """``(R^2 - null) / (1 - null)``, off-diagonal variant."""
        return _excess(self.toeplitzness_offdiag, self.null_mean_offdiag)


def _excess(r2: np.ndarray, null: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(null < 1.0, (r2 - null) / (1.0 - null), np.nan)


def profile_peaks(profiles: np.ndarray) -> np.ndarray:
    """Per head, the offset ``k`` with ``|k| <= n/2`` (inside the support) of the largest mean attention."""
    n = (profiles.shape[-1] + 1) // 2
    half = n // 2
    window = profiles[:, n - 1 - half : n + half]
    return np.nanargmax(window, axis=1) - half


def layer_statistics(sums: LayerSums, causal: bool) -> HeadAttention:
    """Every statistic of every head of one layer (see the module docstring).

    Parameters
    ----------
    sums
        The layer's streaming sums.
    causal
        Score over ``j <= i`` only.
    """
    from posviz.toeplitz.engine import score

    mean = sums.mean
    heads, n, _ = mean.shape
    full, off = _support(n, causal, False), _support(n, causal, True)
    if causal:
        r2 = np.array([masked_toeplitzness(a, full) for a in mean])
        r2_off = np.array([masked_toeplitzness(a, off) for a in mean])
    else:
        scored = score(PositionalScores.from_dense(mean), null=False)
        r2, r2_off = np.atleast_1d(scored.toeplitzness), np.atleast_1d(scored.toeplitzness_offdiag)
    counts = diagonal_sums_array(full.astype(float))
    profiles = np.where(counts > 0, diagonal_sums_array(np.where(full, mean, 0.0)) / np.maximum(counts, 1), np.nan)
    shares = np.array([positional_share(sums, h, full) for h in range(heads)])
    return HeadAttention(
        toeplitzness=r2,
        toeplitzness_offdiag=r2_off,
        null_mean=np.array([toeplitz_null_mean(a, full) for a in mean]),
        null_mean_offdiag=np.array([toeplitz_null_mean(a, off) for a in mean]),
        positional_share=shares[:, 0],
        positional_share_null=shares[:, 1],
        sink_mass=mean[:, 1:, 0].mean(axis=1) if n > 1 else mean[:, 0, 0],
        profiles=profiles,
        profile_peak=profile_peaks(profiles),
    )
