"""Exact permutation null of Toeplitzness, in closed form.

The null baseline of DESIGN.md permutes the rows of the position embeddings
before the matrix is formed. For any matrix built row-wise from them (``E E^T``,
or a head's ``(E W_Q + b_Q)(E W_K + b_K)^T``, LayerNorm included) this permutes
rows and columns of ``A`` together: ``A -> Pi A Pi^T``. Under that null the
denominator of R^2 (the total variance) does not change, so the *mean* of R^2
over all ``n!`` permutations is ``1 - E[residual] / total`` with

``E[residual] = sum(A**2) - sum_k E[S_k**2] / (n - |k|)``,

and ``E[S_k**2]`` (``S_k`` the diagonal sum at offset ``k``) depends only on a
few permutation-invariant moments of ``A``: the mean of ``A_ab**2`` over
``a != b``, of ``A_xy A_yz`` over distinct ``x, y, z`` ("chains") and of
``A_ab A_cd`` over distinct ``a, b, c, d``. For ``A = Q K^T`` all of them come
from ``r x r`` Gram matrices and length-``n`` vectors (``O(n r^2)``), so the null
mean costs less than one draw of the sampled baseline and has no sampling
noise. The tests check it against exhaustive enumeration of all permutations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PermutationMoments:
    """Permutation-invariant statistics of a square matrix ``A`` (arrays broadcast over heads).

    Attributes
    ----------
    n
        Matrix size.
    total, trace
        ``sum(A)`` and ``trace(A)``.
    total_sq, diag_sq
        ``sum(A**2)`` and ``sum(diag(A)**2)``.
    chain
        ``sum A_xy A_yz`` over distinct ``x, y, z``.
    disjoint
        ``sum A_ab A_cd`` over distinct ``a, b, c, d``.
    """

    n: int
    total: np.ndarray
    trace: np.ndarray
    total_sq: np.ndarray
    diag_sq: np.ndarray
    chain: np.ndarray
    disjoint: np.ndarray


def _moments(n, total, trace, total_sq, diag_sq, diag, rows, cols, tr_a2) -> PermutationMoments:
    """Assemble the moments from row sums, column sums and the diagonal (last axis: positions)."""
    # sum over distinct x, y, z of A_xy A_yz, by inclusion-exclusion from the sum over all triples
    chain = np.sum(cols * rows, axis=-1) - np.sum(diag * rows, axis=-1) - np.sum(cols * diag, axis=-1) - tr_a2 + 2 * diag_sq
    off_total = total - trace
    off_sq = total_sq - diag_sq
    # A_ab A_ad over b != d (both != a): (off-diagonal row sum)^2 minus the b == d terms; summed over
    # rows the b == d terms give off_sq, so no per-row sum of squares is needed. Same for columns.
    same_row = np.sum((rows - diag) ** 2, axis=-1) - off_sq
    same_col = np.sum((cols - diag) ** 2, axis=-1) - off_sq
    transposed = tr_a2 - diag_sq  # A_ab A_ba, a != b
    disjoint = off_total**2 - off_sq - transposed - same_row - same_col - 2 * chain
    return PermutationMoments(n, np.asarray(total), np.asarray(trace), np.asarray(total_sq), np.asarray(diag_sq), chain, disjoint)


def moments_dense(matrix: np.ndarray) -> PermutationMoments:
    """Moments of a dense ``(n, n)`` (or ``(heads, n, n)``) matrix (the reference path)."""
    a = np.asarray(matrix, dtype=np.float64)
    n = a.shape[-1]
    diag = np.diagonal(a, axis1=-2, axis2=-1)
    return _moments(
        n,
        a.sum(axis=(-2, -1)),
        diag.sum(axis=-1),
        np.sum(a * a, axis=(-2, -1)),
        np.sum(diag**2, axis=-1),
        diag,
        a.sum(axis=-1),
        a.sum(axis=-2),
        np.einsum("...ij,...ji->...", a, a),
    )


def moments_factored(qt: np.ndarray, kt: np.ndarray, *, gram: np.ndarray | None = None) -> PermutationMoments:
    """Moments of ``A = Q K^T`` from transposed factors, without forming ``A``.

    Parameters
    ----------
    qt, kt
        ``(r, n)`` or ``(heads, r, n)``: the factors with positions on the last
        axis (``qt = Q^T``); passing the same array twice takes the Gram-matrix
        shortcut (one ``r x r`` product).
    gram
        Optional precomputed ``[Q K]^T [Q K]``, shape ``(..., 2r, 2r)``.
    """
    same = qt is kt
    qt = np.asarray(qt, dtype=np.float64)
    kt = qt if same else np.asarray(kt, dtype=np.float64)
    r = qt.shape[-2]
    if gram is None and same:  # a Gram matrix E E^T: all three blocks are E^T E
        gq = gk = kq = qt @ np.swapaxes(qt, -1, -2)
    else:
        if gram is None:
            z = np.concatenate([qt, kt], axis=-2)
            gram = z @ np.swapaxes(z, -1, -2)
        gq = gram[..., :r, :r]  # Q^T Q
        gk = gram[..., r:, r:]  # K^T K
        kq = gram[..., r:, :r]  # K^T Q
    sum_q = qt.sum(axis=-1)
    sum_k = kt.sum(axis=-1)
    diag = np.einsum("...rn,...rn->...n", qt, kt)  # A_ii = q_i . k_i
    rows = (sum_k[..., None, :] @ qt)[..., 0, :]  # sum_j A_ij = q_i . sum_j k_j
    cols = (sum_q[..., None, :] @ kt)[..., 0, :]  # sum_i A_ij
    tr_a2 = np.sum(kq * np.swapaxes(kq, -1, -2), axis=(-2, -1))  # trace(A A) = trace((K^T Q)^2)
    return _moments(
        qt.shape[-1],
        np.sum(sum_q * sum_k, axis=-1),
        diag.sum(axis=-1),
        np.sum(gq * gk, axis=(-2, -1)),
        np.sum(diag**2, axis=-1),
        diag,
        rows,
        cols,
        tr_a2,
    )


def _safe_div(num: np.ndarray, den: float) -> np.ndarray:
    return num / den if den > 0 else np.zeros_like(num)


def expected_explained(m: PermutationMoments) -> np.ndarray:
    """Mean over permutations of ``sum_{k != 0} S_k**2 / (n - |k|)``."""
    n = m.n
    k = np.arange(1, n, dtype=np.float64)
    c = n - k  # entries on diagonal k
    chains = np.maximum(n - 2 * k, 0.0)  # pairs of entries on diagonal k that share an index, per order
    m2 = _safe_div(m.total_sq - m.diag_sq, n * (n - 1.0))
    mc = _safe_div(m.chain, n * (n - 1.0) * (n - 2.0))
    md = _safe_div(m.disjoint, n * (n - 1.0) * (n - 2.0) * (n - 3.0))
    # E[S_k^2] = c m2 + 2 chains mc + (c^2 - c - 2 chains) md; the same for k and -k.
    w_m2 = np.sum(c / c)
    w_mc = np.sum(2 * chains / c)
    w_md = np.sum((c * c - c - 2 * chains) / c)
    return 2 * (np.asarray(m2) * w_m2 + np.asarray(mc) * w_mc + np.asarray(md) * w_md)


def expected_toeplitzness(m: PermutationMoments, *, exclude_diagonal: bool = False) -> np.ndarray:
    """Exact mean of R^2 over all row permutations of the embeddings.

    Parameters
    ----------
    m
        Output of :func:`moments_dense` or :func:`moments_factored`.
    exclude_diagonal
        The variant that leaves the main diagonal out (the main diagonal's sum,
        the trace, is itself permutation invariant).

    Returns
    -------
    numpy.ndarray
        One value per head (a 0-d array for a single matrix). A matrix with zero
        variance gets 1.0, as in :func:`posviz.toeplitz.core.toeplitzness_from_sums`.
    """
    n = m.n
    explained_off = expected_explained(m)
    if exclude_diagonal:
        off_sq = m.total_sq - m.diag_sq
        resid = off_sq - explained_off
        tot = off_sq - (m.total - m.trace) ** 2 / (n * n - n)
    else:
        resid = m.total_sq - m.trace**2 / n - explained_off
        tot = m.total_sq - m.total**2 / (n * n)
    tiny = 1e-13 * np.maximum(m.total_sq, np.finfo(float).tiny)
    safe = np.where(tot > tiny, tot, 1.0)
    return np.where(tot > tiny, 1.0 - np.maximum(resid, 0.0) / safe, 1.0)
