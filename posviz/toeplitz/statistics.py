"""What the scoring engine needs from a stack, computed the cheapest exact way.

For every head: its diagonal sums (:mod:`posviz.toeplitz.diagonals`), its rows
in the same units (for the two-pass R^2), and, where a permutation null applies,
the exact null mean and the diagonal sums under a permutation (for the sampled
spread). :func:`head_statistics` picks one route per stack:

* offsets ``f(k)``: exactly Toeplitz, no null;
* dense: :func:`~posviz.toeplitz.diagonals.skewed_sums` per head, no null;
* one Gram matrix ``P = E E^T`` (the E_P score): with ``method="auto"`` and at
  most :data:`DENSE_POSITIONS` positions ``P`` is built and every sum taken over
  it (one matrix product and a few ``O(n^2)`` passes cost less than the FFTs and
  ``d x d`` Gram matrices, and every sum is exact); above that, or with
  ``closed``/``exact``, the factored Gram kernels, never building ``P``;
* factored heads ``Q_h K_h^T``: all heads at once from one contiguous
  ``(heads, 2, r, n)`` array (zero-padded real FFTs of every query and key row,
  a per-head sum of the cross-spectra, one inverse FFT per head, one batched
  product for all Gram matrices).

How R^2 is then computed is decided by :func:`posviz.toeplitz.r2.r2_method`.
ARCHITECTURE.md places this in the data flow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from posviz.positional_scores import PositionalScores
from posviz.toeplitz import null as pnull
from posviz.toeplitz.diagonals import (
    DiagonalSums,
    Rows,
    diagonal_sums_dense,
    diagonal_sums_factored,
    diagonal_sums_offsets,
    diagonal_sums_stacked,
    max_abs,
    skewed_sums,
)
from posviz.toeplitz.r2 import Method, R2Method, r2_method

#: A one-head Gram stack (``P = E E^T``) scored with ``method="auto"`` builds ``P``
#: (at most 32 MiB) for up to this many positions.
DENSE_POSITIONS = 2048


@dataclass(frozen=True)
class HeadStatistics:
    """The statistics of every head of a stack that R^2, profile and null need.

    Attributes
    ----------
    how
        How R^2 is computed (:func:`~posviz.toeplitz.r2.r2_method`).
    sums
        Each head's diagonal statistics (profiles are ``sums * scale / counts``).
    rows
        ``rows(h)`` gives head ``h``'s ``rows(i0, i1)`` in the units of ``sums[h]``.
    null_mean
        Exact permutation-null mean of R^2, ``(full, off-diagonal)`` arrays over
        heads; ``None`` where no null applies or none was asked for.
    permuted_sums
        Diagonal sums of every head under a permutation of the positions
        (:func:`~posviz.toeplitz.null.sampled_null`); ``None`` without a null.
    """

    how: R2Method
    sums: list[DiagonalSums]
    rows: Callable[[int], Rows]
    null_mean: tuple[np.ndarray, np.ndarray] | None = None
    permuted_sums: pnull.PermutedSums | None = None


def head_statistics(stack: PositionalScores, *, method: Method = "auto", null: bool = True) -> HeadStatistics:
    """Statistics of every head of ``stack`` by the route that suits its form.

    Parameters
    ----------
    stack
        Any :class:`~posviz.positional_scores.PositionalScores`.
    method
        ``auto``, ``closed`` or ``exact``, as in :func:`~posviz.toeplitz.r2.r2_method`.
    null
        Compute the exact null mean (factored stacks; others have no null).
    """
    if stack.form == "offsets":
        return _offsets(stack)
    if stack.form == "dense":
        return _dense(stack.dense, r2_method("dense", stack.n, None, method))
    if stack.heads == 1 and stack.is_gram:
        if method == "auto" and stack.n <= DENSE_POSITIONS:
            return _dense_gram(stack.left[0], null=null)
        return _gram(stack.left[0], r2_method("factored", stack.n, stack.rank, method), null=null)
    how = r2_method("factored", stack.n, stack.rank, method)
    return stacked_statistics(stacked_factors(stack.left, stack.right), how, null=null)


def _offsets(stack: PositionalScores) -> HeadStatistics:
    sums = [diagonal_sums_offsets(f) for f in stack.offsets]
    return HeadStatistics("construction", sums, lambda h: lambda i0, i1: stack.rows(h, i0, i1) / sums[h].scale)


def _dense(a: np.ndarray, how: R2Method) -> HeadStatistics:
    sums = [diagonal_sums_dense(m) for m in a]
    return HeadStatistics(how, sums, lambda h: lambda i0, i1: a[h, i0:i1] / sums[h].scale)


def _dense_gram(e: np.ndarray, *, null: bool) -> HeadStatistics:
    """``P = E E^T`` built, rescaled so that nothing overflows, and summed over directly."""
    me = max_abs(e)
    es = e / me
    p = es @ es.T
    mp = max_abs(p)
    p /= mp  # max |p| is now 1: the units of ds, whose scale records the true one
    ds0 = diagonal_sums_dense(p)
    ds = DiagonalSums(ds0.n, ds0.sums, ds0.total, ds0.total_sq, ds0.diag_sq, me * me * mp)
    n = p.shape[0]
    mean = permuted = None
    if null:
        m = pnull.moments_dense(p)
        full, off = pnull.expected_toeplitzness(m), pnull.expected_toeplitzness(m, exclude_diagonal=True)
        mean = (np.atleast_1d(full), np.atleast_1d(off))

        def permuted(perm: np.ndarray) -> np.ndarray:  # rows and columns of P permuted together, by row blocks
            return skewed_sums(n, lambda i0, i1: p.take(perm[i0:i1], axis=0).take(perm, axis=1))[0][None]

    return HeadStatistics(r2_method("dense", n, None), [ds], lambda h: lambda i0, i1: p[i0:i1], mean, permuted)


def _gram(e: np.ndarray, how: R2Method, *, null: bool) -> HeadStatistics:
    """``P = E E^T`` from its factor: FFT autocorrelations and ``d x d`` Gram matrices."""
    ds = diagonal_sums_factored(e)
    es = e / max_abs(e)  # the units of ds
    mean = permuted = None
    if null:
        full, off = pnull.exact_null_mean(e)
        mean = (np.array([full]), np.array([off]))
        permuted = pnull.permuted_gram_sums(e, ds)
    return HeadStatistics(how, [ds], lambda h: lambda i0, i1: es[i0:i1] @ es.T, mean, permuted)


def stacked_factors(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """``(heads, n, r)`` factors -> one contiguous ``(heads, 2, r, n)`` array: queries, then keys, positions last.

    This is the layout :func:`stacked_statistics` takes.
    """
    h, n, r = left.shape
    z = np.empty((h, 2, r, n))
    z[:, 0] = np.swapaxes(left, 1, 2)
    z[:, 1] = np.swapaxes(right, 1, 2)
    return z


def _gram_blocks(z: np.ndarray) -> np.ndarray:
    """``[Q_h K_h]^T [Q_h K_h]`` of every head, shape ``(heads, 2r, 2r)``."""
    h, _, r, n = z.shape
    zv = z.reshape(h, 2 * r, n)
    return np.einsum("hin,hjn->hij", zv, zv, optimize=True)


def _safe_gram(gram: np.ndarray) -> bool:
    """True when every factor's squared column norms lie well inside float64's range.

    Then ``max |q| <= 1e60`` and ``max |q| >= 1e-60 / sqrt(n)``, so ``sum A**2`` can
    neither overflow nor underflow and no rescaled copy is needed.
    """
    d = np.diagonal(gram, axis1=1, axis2=2)
    r = d.shape[1] // 2
    peak = np.stack([d[:, :r].max(axis=1), d[:, r:].max(axis=1)])
    return bool(np.all(np.isfinite(peak) & (peak < 1e120) & (peak > 1e-120)))


def _rescaled(z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Copy of ``z`` with each head's factors divided by their max |entry|; returns (z, sq, sk)."""
    m = np.max(np.abs(z), axis=(2, 3))  # (heads, 2)
    m = np.where(np.isfinite(m) & (m > 0), m, 1.0)
    return z / m[:, :, None, None], m[:, 0], m[:, 1]


def stacked_statistics(z: np.ndarray, how: R2Method, *, null: bool = True) -> HeadStatistics:
    """Statistics of all heads ``A_h = Q_h K_h^T`` from their stacked factors.

    Parameters
    ----------
    z
        ``(heads, 2, r, n)``, contiguous: ``z[h, 0, :, i]`` is position ``i``'s
        query vector of head ``h`` and ``z[h, 1, :, i]`` its key vector.
        :func:`stacked_factors` makes it from ``(heads, n, r)`` factors;
        :meth:`posviz.extract.absolute.AbsoluteHeads.score` projects straight into it.
    how
        Output of :func:`~posviz.toeplitz.r2.r2_method`.
    null
        Compute the exact null mean (the moments are computed anyway: they give
        the totals).
    """
    from threadpoolctl import threadpool_limits

    h, n = z.shape[0], z.shape[3]
    # The per-head products are small (d_h x n by n x d_h): extra BLAS threads only add
    # synchronisation, and on a busy machine each call can stall for a whole time slice.
    with threadpool_limits(limits=1, user_api="blas"):
        gram = _gram_blocks(z)  # one batched product gives Q^T Q, K^T K and K^T Q
        scale = np.ones(h)
        if not _safe_gram(gram):
            z, sq, sk = _rescaled(z)  # huge or tiny values: work on a rescaled copy
            scale = sq * sk
            gram = _gram_blocks(z)
        sums = diagonal_sums_stacked(z)
        moments = pnull.moments_factored(z[:, 0], z[:, 1], gram=gram)
    stats = [
        DiagonalSums(
            n, sums[i], float(moments.total[i]), float(moments.total_sq[i]), float(moments.diag_sq[i]), float(scale[i])
        )
        for i in range(h)
    ]
    mean = permuted = None
    if null:
        full = np.atleast_1d(pnull.expected_toeplitzness(moments))
        off = np.atleast_1d(pnull.expected_toeplitzness(moments, exclude_diagonal=True)) if n >= 2 else np.full(h, np.nan)
        mean = (full, off)

        def permuted(perm: np.ndarray) -> np.ndarray:
            return diagonal_sums_stacked(np.ascontiguousarray(z[..., perm]))

    def rows(i: int) -> Rows:
        q, kt = z[i, 0].T, z[i, 1]
        return lambda i0, i1: q[i0:i1] @ kt

    return HeadStatistics(how, stats, rows, mean, permuted)
