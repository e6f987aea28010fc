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


def _one_minus(resid: np.ndarray, tot: np.ndarray, scale: np.ndarray) -> np.ndarray | float:
    """``1 - resid / tot``; 1.0 for a constant matrix; a float for one matrix.

    Constant means ``tot <= 1e-13 * scale`` (``scale``: the sum of squares), the rule of
    :mod:`posviz.toeplitz.r2`: a head whose attention is uniform up to float rounding
    (its mean over blocks is not exactly constant) would otherwise score its noise.
    """
    flat = tot <= 1e-13 * np.maximum(scale, np.finfo(float).tiny)
    out = np.where(flat, 1.0, 1.0 - resid / np.where(flat, 1.0, tot))
    return float(out) if out.ndim == 0 else out


def _inside(matrix: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``matrix`` (float64) with zeros outside ``mask`` (``np.copyto``: several times faster than ``np.where`` here)."""
    out = np.zeros(np.shape(matrix))
    np.copyto(out, matrix, where=mask)
    return out


def _sum_sq(x: np.ndarray) -> np.ndarray:
    """Sum of squares over the last two axes, without a squared copy."""
    return np.einsum("...ij,...ij->...", x, x)


def masked_toeplitzness(matrix: np.ndarray, mask: np.ndarray) -> np.ndarray | float:
    """Toeplitzness R^2 over the entries of ``mask``.

    The Toeplitz projection restricted to the mask replaces each entry by the mean of
    its diagonal's masked entries. With a full mask this is
    :func:`posviz.toeplitz.toeplitzness`; with ``j <= i`` it scores a causal matrix
    without counting the masked zeros. Computed as :mod:`posviz.toeplitz.r2` does
    (``checked``): the closed form from the diagonal sums where its rounding error
    bound is within :data:`~posviz.toeplitz.r2.ACCURACY`, two passes (projection,
    then residuals) for the other matrices (near-constant ones).

    Parameters
    ----------
    matrix
        ``(n, n)``, or a stack ``(..., n, n)`` scored matrix by matrix (every head of a layer at once).
    mask
        ``(n, n)`` bool, shared by the stack.

    Returns
    -------
    float or numpy.ndarray
        One R^2 per matrix (a float for one matrix).
    """
    return _toeplitzness_inside(_inside(matrix, mask), mask)


def _toeplitzness_inside(inside: np.ndarray, mask: np.ndarray) -> np.ndarray | float:
    """:func:`masked_toeplitzness` of matrices already zero outside ``mask``."""
    counts = diagonal_sums_array(mask.astype(float))
    return toeplitzness_from_sums(diagonal_sums_array(inside), counts, _sum_sq(inside), lambda: (inside, mask))


def toeplitzness_from_sums(sums: np.ndarray, counts: np.ndarray, sq: np.ndarray,
                           matrices: Callable[[], tuple[np.ndarray, np.ndarray]]) -> np.ndarray | float:
    """:func:`masked_toeplitzness` from the diagonal sums ``sums`` (``(..., 2n - 1)``) of matrices zero outside a
    mask, the mask's diagonal counts ``counts`` and the matrices' sums of squares ``sq`` (``(...,)``).

    ``matrices()`` returns the stack and its mask; it is called only where the closed form is ill-conditioned
    (near-constant matrices), whose scores are then computed in two passes.
    """
    from posviz.toeplitz.r2 import ACCURACY, CLOSED_FORM_GROWTH

    ok = counts > 0
    resid = np.maximum(sq - (sums[..., ok] ** 2 / counts[ok]).sum(axis=-1), 0.0)
    tot = sq - sums.sum(axis=-1) ** 2 / counts.sum()
    ill = np.atleast_1d(CLOSED_FORM_GROWTH * np.finfo(float).eps * sq > ACCURACY * tot)
    if ill.any():  # near-constant matrices: the closed form would cancel the digits that are scored
        inside, mask = matrices()
        n = inside.shape[-1]
        k = (np.arange(n)[None, :] - np.arange(n)[:, None] + n - 1)[mask]
        stack, f = inside.reshape(-1, n, n)[ill], (sums / np.maximum(counts, 1.0)).reshape(-1, 2 * n - 1)[ill]
        values = stack[:, mask]
        resid, tot = np.array(resid, ndmin=1), np.array(tot, ndmin=1)
        resid[ill] = ((values - f[:, k]) ** 2).sum(axis=-1)
        tot[ill] = ((values - values.mean(axis=-1, keepdims=True)) ** 2).sum(axis=-1)
        resid, tot = resid.reshape(sq.shape), tot.reshape(sq.shape)
    return _one_minus(resid, tot, sq)


def _standard_support(mask: np.ndarray) -> tuple[bool, bool] | None:
    """``(causal, exclude_diagonal)`` when ``mask`` is one of the four supports of :func:`_support`, else ``None``."""
    n = mask.shape[-1]
    for causal in (False, True):
        for exclude in (False, True):
            if np.array_equal(mask, _support(n, causal, exclude)):
                return causal, exclude
    return None


def _row_summer(mask: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """A function ``values -> diagonal_sums_array(np.where(mask, values[..., :, None], 0))``, classified once per mask.

    ``values`` is ``(n,)`` or a stack ``(..., n)`` (one row vector per head). For the
    standard supports (all entries or ``j <= i``, with or without the diagonal) the
    rows of offset ``k`` are one contiguous range, so prefix sums give every offset in
    O(n) instead of O(n**2); any other mask takes the dense sums.
    """
    kind = _standard_support(mask)
    if kind is None:
        return lambda values: diagonal_sums_array(np.where(mask, np.asarray(values)[..., :, None], 0.0))
    causal, exclude = kind
    n = mask.shape[-1]
    k = np.arange(-(n - 1), n)
    lo, hi = np.maximum(0, -k), np.minimum(n, n - k)  # rows i with 0 <= i + k < n
    dropped = (k > 0) if causal else np.zeros(k.shape, dtype=bool)
    if exclude:
        dropped = dropped | (k == 0)

    def sums(values: np.ndarray) -> np.ndarray:
        v = np.asarray(values, dtype=float)
        prefix = np.concatenate([np.zeros((*v.shape[:-1], 1)), np.cumsum(v, axis=-1)], axis=-1)
        return np.where(dropped, 0.0, prefix[..., hi] - prefix[..., lo])

    return sums


def row_diagonal_sums(row_values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``diagonal_sums_array(np.where(mask, row_values[:, None], 0))``: per offset, the sum of ``row_values`` over its rows.

    O(n) for the standard supports (:func:`_row_summer`).
    """
    return _row_summer(mask)(row_values)


def _expected_explained(row_mean: np.ndarray, row_var: np.ndarray, mask: np.ndarray, scale: float) -> np.ndarray:
    """``sum_k E[S_k**2] / (scale * c_k)`` when each row puts one independent draw on each diagonal it meets.

    ``row_mean`` and ``row_var`` are ``(n,)`` or stacks ``(..., n)``: one value per stack entry.

    ``S_k`` sums, over the rows ``i`` of diagonal ``k``, a random entry of row ``i``
    with mean ``row_mean[i]`` and variance ``row_var[i]``; so ``E[S_k**2]`` is the
    sum of the variances plus the square of the summed means.
    """
    sums = _row_summer(mask)  # the mask is classified once for the three sums
    counts, m, v = sums(np.ones(mask.shape[0])), sums(row_mean), sums(row_var)
    ok = counts > 0
    return ((v[..., ok] + m[..., ok] ** 2) / (scale * counts[ok])).sum(axis=-1)


def toeplitz_null_mean(matrix: np.ndarray, mask: np.ndarray) -> np.ndarray | float:
    """Exact mean Toeplitzness of ``matrix`` with each row's entries shuffled within the row's part of ``mask``.

    The shuffle keeps the multiset of masked entries, so the denominator of R^2 is
    fixed and only the explained part moves: each row contributes one uniformly
    drawn entry to each diagonal it meets, independently of the other rows.
    ``matrix`` may be a stack ``(..., n, n)``, scored matrix by matrix (a float for one matrix).
    """
    return _null_mean_inside(_inside(matrix, mask), mask)


def _null_mean_inside(values: np.ndarray, mask: np.ndarray) -> np.ndarray | float:
    """:func:`toeplitz_null_mean` of matrices already zero outside ``mask``."""
    return null_mean_from_rows(values.sum(axis=-1), np.einsum("...ij,...ij->...i", values, values), mask)


def null_mean_from_rows(row_sum: np.ndarray, row_sq: np.ndarray, mask: np.ndarray) -> np.ndarray | float:
    """:func:`toeplitz_null_mean` from the row sums and row sums of squares (``(..., n)``) of matrices zero outside
    ``mask``: the shuffle keeps each row's multiset, so these are all it needs."""
    size = mask.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(size > 0, row_sum / size, 0.0)
        var = np.where(size > 0, row_sq / size - mean**2, 0.0)
    sq = row_sq.sum(axis=-1)
    tot = sq - row_sum.sum(axis=-1) ** 2 / size.sum()
    return _one_minus(sq - _expected_explained(mean, np.maximum(var, 0.0), mask, 1.0), tot, sq)


def positional_shares(sums: LayerSums, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positional share of every head over the blocks, and its exact null mean.

    Returns
    -------
    share, null
        ``(heads,)`` each: ``1 - sum_b sum_ij (A_b - f(j - i))**2 / sum_b sum_ij (A_b - mean)**2``
        over the support, and its mean when every row of every block is shuffled
        within its support (1.0 for a head whose attention never varies). Rows
        outside a full mask's support hold zeros (causal masks), so the streamed row
        sums are sums over the support.
    """
    b, total = sums.blocks, _inside(sums.total, mask)
    counts = diagonal_sums_array(mask.astype(float))
    s = diagonal_sums_array(total)
    ok = counts > 0
    sq = sums.row_sq.sum(axis=-1)
    explained = (s[..., ok] ** 2 / (b * counts[ok])).sum(axis=-1)
    tot = sq - total.sum(axis=(-2, -1)) ** 2 / (b * mask.sum())
    size = mask.sum(axis=1)
    mean = total.sum(axis=-1) / size  # sum over blocks of each row's mean entry
    var = sums.row_sq / size - sums.row_sum_sq / size**2  # sum over blocks of each row's variance
    null_explained = _expected_explained(mean, np.maximum(var, 0.0), mask, float(b))
    return np.asarray(_one_minus(sq - explained, tot, sq)), np.asarray(_one_minus(sq - null_explained, tot, sq))


def positional_share(sums: LayerSums, h: int, mask: np.ndarray) -> tuple[float, float]:
    """Positional share of head ``h`` and its exact null mean (:func:`positional_shares` for one head)."""
    one = LayerSums(sums.blocks, sums.total[h : h + 1], sums.row_sq[h : h + 1], sums.row_sum_sq[h : h + 1])
    share, null = positional_shares(one, mask)
    return float(share[0]), float(null[0])


class ExcessScores:
    """The excess Toeplitzness of a statistics class with ``toeplitzness``, ``null_mean`` and their off-diagonal twins."""

    toeplitzness: np.ndarray
    toeplitzness_offdiag: np.ndarray
    null_mean: np.ndarray
    null_mean_offdiag: np.ndarray

    @property
    def excess(self) -> np.ndarray:
        """``(R^2 - null) / (1 - null)``, full variant."""
        return _excess(self.toeplitzness, self.null_mean)

    @property
    def excess_offdiag(self) -> np.ndarray:
        """``(R^2 - null) / (1 - null)``, off-diagonal variant."""
        return _excess(self.toeplitzness_offdiag, self.null_mean_offdiag)


@dataclass(frozen=True)
class HeadAttention(ExcessScores):
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
    n = mean.shape[-1]
    full, off = _support(n, causal, False), _support(n, causal, True)
    inside, inside_off = _inside(mean, full), _inside(mean, off)
    if causal:
        r2, r2_off = _toeplitzness_inside(inside, full), _toeplitzness_inside(inside_off, off)
    else:
        scored = score(PositionalScores.from_dense(mean), null=False)
        r2, r2_off = np.atleast_1d(scored.toeplitzness), np.atleast_1d(scored.toeplitzness_offdiag)
    counts = diagonal_sums_array(full.astype(float))
    profiles = np.where(counts > 0, diagonal_sums_array(inside) / np.maximum(counts, 1), np.nan)
    share, share_null = positional_shares(sums, full)
    return HeadAttention(
        toeplitzness=np.atleast_1d(r2),
        toeplitzness_offdiag=np.atleast_1d(r2_off),
        null_mean=np.atleast_1d(_null_mean_inside(inside, full)),
        null_mean_offdiag=np.atleast_1d(_null_mean_inside(inside_off, off)),
        positional_share=share,
        positional_share_null=share_null,
        sink_mass=mean[:, 1:, 0].mean(axis=1) if n > 1 else mean[:, 0, 0],
        profiles=profiles,
        profile_peak=profile_peaks(profiles),
    )
