"""The scoring engine: a positional-score stack in, a :class:`ToeplitzScore` out.

Definitions (ARCHITECTURE.md): offset ``k = j - i``; Toeplitz projection
``T(A)`` (each diagonal replaced by its mean); Toeplitzness
``R^2 = 1 - sum((A - T(A))**2) / sum((A - mean(A))**2)``, ``full`` over all
``n**2`` entries or ``exclude_diagonal`` without the main diagonal; null baseline:
the same score with the rows of the position embeddings permuted (exact mean,
sampled spread); ``excess = (R^2 - null) / (1 - null)``.

:func:`score` scores every head of a stack: :mod:`posviz.toeplitz.statistics`
computes what each head needs by the route that suits the stack's form,
:func:`posviz.toeplitz.r2.r2_method` decides how R^2 is computed, and
:mod:`posviz.toeplitz.null` gives the null. Scoring ``P = E E^T``
(:func:`score_embeddings`) is the one-head case; :func:`toeplitzness` is R^2 of
one matrix alone.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from posviz.positional_scores import PositionalScores, normalize_embeddings
from posviz.toeplitz import null as pnull
from posviz.toeplitz.r2 import R2_METHOD_TEXT, Method, r2_method, toeplitzness_of
from posviz.toeplitz.result import ToeplitzScore, excess_over_null
from posviz.toeplitz.statistics import HeadStatistics, head_statistics, stacked_statistics


def score(
    stack: PositionalScores, *, null: bool = True, null_draws: int = 0, seed: int = 0, method: Method = "auto"
) -> ToeplitzScore:
    """Toeplitzness, null baseline and offset profile of every head of a stack.

    Parameters
    ----------
    stack
        A :class:`~posviz.positional_scores.PositionalScores`. Factored stacks
        (absolute models, DeBERTa's Gram matrix, E_P) get the exact
        permutation-null mean; offset stacks (T5, ALiBi, RoPE) are Toeplitz by
        construction and, like dense stacks, have no null (NaN).
    null
        Compute the exact null mean (``False``: R^2 and profiles only).
    null_draws
        Sampled row permutations (seeded) for the null's standard deviation; 0
        reports the exact mean only. Each draw costs about one FFT pass.
    seed
        Seed of ``numpy.random.default_rng`` for the draws.
    method
        How R^2 is computed: ``closed`` (from the diagonal sums), ``exact`` (a
        second pass over row blocks, no cancellation) or ``auto``, as decided by
        :func:`posviz.toeplitz.r2.r2_method`.

    Returns
    -------
    ToeplitzScore
        Arrays of shape ``(heads,)``; ``score(...)[h]`` is one head.

    Examples
    --------
    >>> import numpy as np
    >>> from posviz.positional_scores import PositionalScores
    >>> f = np.abs(np.arange(-7, 8.0))[None]        # f(k) = |k|: Toeplitz by construction
    >>> score(PositionalScores.from_offsets(f)).toeplitzness
    array([1.])
    """
    return _assemble(stack.form, head_statistics(stack, method=method, null=null), null_draws, seed)


#: The per-layer name of :func:`score` in the public API.
score_layer = score


def score_stacked(z: np.ndarray, *, null_draws: int = 0, seed: int = 0, method: Method = "auto") -> ToeplitzScore:
    """:func:`score` for factored heads already in the ``(heads, 2, r, n)`` layout.

    Parameters
    ----------
    z
        See :func:`posviz.toeplitz.statistics.stacked_statistics`.
    null_draws, seed, method
        See :func:`score`.
    """
    how = r2_method("factored", z.shape[3], z.shape[2], method)
    return _assemble("factored", stacked_statistics(z, how), null_draws, seed)


def _assemble(form: str, st: HeadStatistics, null_draws: int, seed: int) -> ToeplitzScore:
    """Both R^2 variants, the null and the profiles of every head."""
    h, n = len(st.sums), st.sums[0].n
    r2 = np.empty((h, 2))
    for i, ds in enumerate(st.sums):
        rows = st.rows(i)
        off = n >= 2 or st.how == "construction"
        full = toeplitzness_of(ds, rows, st.how)
        r2[i] = (full, toeplitzness_of(ds, rows, st.how, exclude_diagonal=True) if off else np.nan)
    counts = st.sums[0].counts
    profiles = np.stack([ds.sums * ds.scale / counts for ds in st.sums])
    nan = np.full(h, np.nan)
    mean, mean_off = st.null_mean if st.null_mean is not None else (nan, nan.copy())
    std, std_off = nan.copy(), nan.copy()
    if st.null_mean is None:
        draws, text = 0, {"offsets": "none (Toeplitz by construction)", "dense": "none"}.get(form, "")
    else:
        draws, text = int(null_draws), pnull.null_method_text(null_draws, seed, per_head=True)
        if null_draws > 0:
            std, std_off = pnull.null_spread(pnull.sampled_null(st.sums, st.permuted_sums, null_draws, seed))
    return ToeplitzScore(
        toeplitzness=r2[:, 0],
        toeplitzness_offdiag=r2[:, 1],
        null_mean=mean,
        null_std=std,
        null_mean_offdiag=mean_off,
        null_std_offdiag=std_off,
        excess=excess_over_null(r2[:, 0], mean),
        excess_offdiag=excess_over_null(r2[:, 1], mean_off),
        null_draws=draws,
        seed=int(seed),
        null_method=text,
        r2_method=R2_METHOD_TEXT[st.how],
        profiles=profiles,
    )


def score_embeddings(
    embeddings: np.ndarray,
    *,
    normalize: str = "none",
    null_draws: int = 10,
    seed: int = 0,
    method: Method = "auto",
) -> ToeplitzScore:
    """Toeplitzness of ``P = E E^T`` (both variants) with its null baseline.

    The one-head case of :func:`score`.

    Parameters
    ----------
    embeddings
        ``(n, d)`` position embeddings, any float dtype (computed in float64).
    normalize
        ``none``, ``cosine`` or ``center``.
    null_draws
        Random row permutations for the spread of the baseline (0: no baseline;
        1: its mean only). Its mean is exact (the average over all permutations,
        in closed form), so it carries no sampling noise whatever the number of draws.
    seed
        Seed for the permutations.
    method
        ``auto`` (default): for at most
        :data:`~posviz.toeplitz.statistics.DENSE_POSITIONS` positions, build ``P``
        and sum over it directly (R^2 by two passes, the null mean from
        :func:`posviz.toeplitz.null.moments_dense`, each null draw from ``P``
        with rows and columns permuted); above that, as in :func:`toeplitzness`
        (never building ``P``). ``closed`` and ``exact`` as in
        :func:`toeplitzness`, with the null draws by the closed form (they
        estimate a spread, and need no more precision than that).

    Returns
    -------
    ToeplitzScore
        One head: floats.

    Examples
    --------
    >>> import numpy as np
    >>> s = score_embeddings(np.random.default_rng(0).normal(size=(64, 16)), null_draws=5)
    >>> abs(s.excess) < 0.2
    True
    """
    e = normalize_embeddings(embeddings, normalize)
    if e.shape[0] < 2:
        raise ValueError("Toeplitzness needs at least 2 positions")
    # An E_P score reports no spread below 2 draws (a single draw has none).
    draws = null_draws if null_draws > 1 else 0
    s = score(PositionalScores.from_factors(e), null=null_draws > 0, null_draws=draws, seed=seed, method=method)[0]
    how = pnull.null_method_text(null_draws, seed) if null_draws > 0 else ""
    return dataclasses.replace(s, normalize=normalize, null_draws=int(null_draws), seed=int(seed), null_method=how)


def toeplitzness(
    matrix: np.ndarray | None = None,
    *,
    factors: tuple[np.ndarray, np.ndarray] | None = None,
    embeddings: np.ndarray | None = None,
    exclude_diagonal: bool = False,
    method: Method = "auto",
) -> float:
    """Toeplitzness R^2 of one positional score matrix.

    Give exactly one of ``matrix`` (dense ``n x n``), ``factors`` (``(Q, K)`` with
    ``A = Q K^T``) or ``embeddings`` (``E``, scoring ``P = E E^T``).

    Parameters
    ----------
    matrix
        Dense square matrix.
    factors
        ``(Q, K)``, each of shape ``(n, r)``.
    embeddings
        Position embeddings ``E`` of shape ``(n, d)``.
    exclude_diagonal
        Use the variant that leaves the main diagonal out.
    method
        ``closed``: the closed form from diagonal sums (FFT for factors; memory
        ``O(n r)``, never builds ``A``); ``exact``: a second pass over row blocks
        of ``A`` sums squared deviations directly (``O(n^2 r)`` time, ``O(n)``
        rows of memory); ``auto`` (default): ``exact`` for dense input and small
        factored problems (``n^2 r <= EXACT_LIMIT``), otherwise ``closed`` where its
        error bound is within ``ACCURACY`` (1e-9) and ``exact`` for ill-conditioned
        matrices (see :func:`posviz.toeplitz.r2.r2_method`; ``E E^T`` with at most
        ``DENSE_POSITIONS`` positions is built and summed directly).

    Returns
    -------
    float
        R^2 in ``(-inf, 1]``; 1 for an exactly Toeplitz matrix.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.linalg import toeplitz as make_toeplitz
    >>> round(toeplitzness(make_toeplitz(np.arange(5.0))), 12)
    1.0
    """
    given = [x is not None for x in (matrix, factors, embeddings)]
    if sum(given) != 1:
        raise TypeError("give exactly one of matrix, factors or embeddings")
    if matrix is not None:
        stack = PositionalScores.from_dense(matrix)
    elif factors is not None:
        stack = PositionalScores.from_factors(*factors)
    else:
        stack = PositionalScores.from_factors(embeddings)
    st = head_statistics(stack, method=method, null=False)
    return toeplitzness_of(st.sums[0], st.rows(0), st.how, exclude_diagonal=exclude_diagonal)
