"""The permutation null baseline of Toeplitzness: exact mean and sampled spread.

Null baseline (ARCHITECTURE.md): the same score for the position embeddings
``E`` with their rows randomly permuted; ``excess = (R^2 - null) / (1 - null)``.
For any matrix built row-wise from ``E`` (``E E^T``, or a head's
``(E W_Q + b_Q)(E W_K + b_K)^T``, LayerNorm included) permuting the rows permutes
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

The spread of the null comes from seeded random permutations
(:func:`sampled_null`): only the diagonal sums change under a permutation, so
each draw costs one pass of a diagonal-sum kernel.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from posviz.positional_scores import PosvizWarning, normalize_embeddings
from posviz.toeplitz.diagonals import DiagonalSums, diagonal_sums_factored, diagonal_sums_fft, max_abs
from posviz.toeplitz.r2 import toeplitzness_from_sums


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
        variance gets 1.0, as in :func:`posviz.toeplitz.r2.toeplitzness_from_sums`.
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


def exact_null_mean(embeddings: np.ndarray) -> tuple[float, float]:
    """Mean of R^2 (full, off-diagonal) of ``P = E E^T`` over all row permutations of ``E``.

    Permuting rows permutes rows and columns of ``P`` together, which leaves the
    denominator of R^2 unchanged; the mean residual then depends only on a few
    permutation-invariant moments of ``P``, computed from ``E^T E`` in
    ``O(n d^2)`` without forming ``P``.
    """
    e = np.asarray(embeddings, dtype=np.float64)
    e = e / max_abs(e)
    m = moments_factored(e.T, e.T)
    return float(expected_toeplitzness(m)), float(expected_toeplitzness(m, exclude_diagonal=True))


#: ``permuted_sums(perm) -> (heads, 2n - 1)``: the diagonal sums of every head of
#: ``A[perm][:, perm]``, in the units of the unpermuted statistics.
PermutedSums = Callable[[np.ndarray], np.ndarray]


def sampled_null(base: Sequence[DiagonalSums], permuted_sums: PermutedSums, draws: int, seed: int) -> np.ndarray:
    """R^2 (full, off-diagonal) of every head for ``draws`` seeded row permutations.

    Parameters
    ----------
    base
        Each head's statistics, unpermuted. Totals, sums of squares and the main
        diagonal do not change when rows and columns are permuted together: only
        the diagonal sums are recomputed per draw.
    permuted_sums
        Diagonal sums of every head under a permutation (one permutation of the
        positions per draw, shared by all heads).
    draws
        Number of permutations.
    seed
        Seed of ``numpy.random.default_rng``.

    Returns
    -------
    numpy.ndarray
        ``(draws, heads, 2)``: full and off-diagonal R^2 (NaN for ``n < 2``).
    """
    n = base[0].n
    rng = np.random.default_rng(seed)
    out = np.empty((draws, len(base), 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PosvizWarning)
        for t in range(draws):
            sums = permuted_sums(rng.permutation(n))
            for h, ds in enumerate(base):
                p = ds.with_sums(sums[h])
                off = toeplitzness_from_sums(p, exclude_diagonal=True) if n >= 2 else float("nan")
                out[t, h] = (toeplitzness_from_sums(p), off)
    return out


def null_spread(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Standard deviation over draws of :func:`sampled_null`'s output: ``(heads,)`` full and off-diagonal."""
    sd = values.std(axis=0, ddof=1 if values.shape[0] > 1 else 0)
    return sd[:, 0], sd[:, 1]


def permuted_gram_sums(embeddings: np.ndarray, base: DiagonalSums) -> PermutedSums:
    """Diagonal sums of ``E E^T`` under row permutations of ``E``, in the units of ``base``.

    ``base`` is :func:`~posviz.toeplitz.diagonals.diagonal_sums_factored` of ``E``
    (units ``P / base.scale``), so ``E`` is divided by ``sqrt(base.scale)``.
    """
    scaled = embeddings / np.sqrt(base.scale)
    return lambda perm: diagonal_sums_fft(scaled[perm], None)[None]


def null_baseline(
    embeddings: np.ndarray,
    *,
    normalize: str = "none",
    draws: int = 10,
    seed: int = 0,
    base: DiagonalSums | None = None,
) -> np.ndarray:
    """Toeplitzness of ``P`` for row-permuted copies of ``E``.

    Parameters
    ----------
    embeddings
        ``(n, d)`` position embeddings.
    normalize
        As in :func:`~posviz.positional_scores.normalize_embeddings` (applied
        before permuting; both normalisations commute with row permutations).
    draws
        Number of random permutations.
    seed
        Seed of ``numpy.random.default_rng``.
    base
        The diagonal sums of the (normalised) unpermuted ``E``, if already computed.

    Returns
    -------
    numpy.ndarray
        Shape ``(draws, 2)``: full and off-diagonal R^2 of each draw.
    """
    e = normalize_embeddings(embeddings, normalize)
    base = diagonal_sums_factored(e) if base is None else base
    return sampled_null([base], permuted_gram_sums(e, base), draws, seed)[:, 0]


def null_method_text(draws: int, seed: int, *, per_head: bool = False) -> str:
    """How the null baseline is computed, in one phrase.

    Parameters
    ----------
    draws, seed
        Sampled permutations for the spread (the mean is always exact).
    per_head
        The wording of per-head tables (``posviz heads``) instead of that of an
        E_P score (``posviz toeplitzness``, which reports no spread below 2 draws).
    """
    if per_head:
        text = "exact mean over all row permutations of E_P (closed form)"
        return text + (f"; sd from {draws} seeded permutations" if draws > 0 else "")
    sd = f"sd over {draws} seeded random permutations (seed {seed})" if draws > 1 else "no sd (fewer than 2 draws)"
    return f"exact mean over all row permutations of E (closed form); {sd}"
