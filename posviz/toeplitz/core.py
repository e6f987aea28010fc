"""Toeplitzness: how translation-invariant a positional score matrix is.

Definitions (kept identical in code, docstrings and the report's methods page):

* offset ``k = j - i`` (key position minus query position);
* Toeplitz projection ``T(P)``: every diagonal replaced by its mean, the
  least-squares closest Toeplitz matrix;
* Toeplitzness ``R^2 = 1 - sum((P - T(P))**2) / sum((P - mean(P))**2)`` over all
  ``n**2`` entries (``full``) or over the off-diagonal entries only
  (``exclude_diagonal``);
* null baseline: the same score for ``E`` with its rows randomly permuted;
  ``excess = (R^2 - null) / (1 - null)``.

Everything is computed from five statistics of the matrix (diagonal sums
``S_k``, total, total of squares, main diagonal sum of squares). For a matrix
given by factors ``A = Q K^T`` these come in closed form without building ``A``:
``S_k`` from FFT cross-correlations of the columns (O(n r log n)),
``sum A**2 = tr((Q^T Q)(K^T K))`` and ``sum A = (sum_i q_i) . (sum_j k_j)``.
The dense computation is kept as the reference the tests compare against.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

Normalize = Literal["none", "cosine", "center"]
NORMALIZE_CHOICES: tuple[str, ...] = ("none", "cosine", "center")


class PosvizWarning(UserWarning):
    """A result is defined but deserves attention (e.g. zero variance)."""


@dataclass(frozen=True)
class DiagonalSums:
    """The statistics of an ``n x n`` matrix that determine its Toeplitzness.

    Attributes
    ----------
    n
        Matrix size.
    sums
        ``sums[k + n - 1]`` is the sum of the diagonal at offset ``k = j - i``.
    total
        Sum of all entries.
    total_sq
        Sum of all squared entries.
    diag_sq
        Sum of the squared main-diagonal entries.
    scale
        The statistics are those of ``A / scale`` (inputs are rescaled so that
        squares of huge values stay finite; R^2 does not depend on scale).
    """

    n: int
    sums: np.ndarray
    total: float
    total_sq: float
    diag_sq: float
    scale: float = 1.0

    @property
    def offsets(self) -> np.ndarray:
        """Offsets ``k = j - i`` from ``-(n-1)`` to ``n-1``."""
        return np.arange(-(self.n - 1), self.n)

    @property
    def counts(self) -> np.ndarray:
        """Number of entries on each diagonal, ``n - |k|``."""
        return self.n - np.abs(self.offsets)


def _as_float64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _max_abs(x: np.ndarray) -> float:
    m = float(np.max(np.abs(x))) if x.size else 0.0
    return m if np.isfinite(m) and m > 0 else 1.0


def skewed_sums(n: int, rows, *, block: int = 256) -> tuple[np.ndarray, float]:
    """Diagonal sums and sum of squares of an ``n x n`` matrix given by row blocks.

    Parameters
    ----------
    n
        Matrix size.
    rows
        ``rows(i0, i1) -> A[i0:i1]``.
    block
        Rows per block (memory ``O(block * n)``).

    Returns
    -------
    sums, total_sq
        ``sums[k + n - 1]`` is the sum of the diagonal at offset ``k = j - i``.

    Notes
    -----
    Each block is copied into a zeroed buffer with row ``i`` shifted right by
    ``n - 1 - i`` (one strided assignment): the diagonals become columns, summed
    in one vectorised pass, with no index arrays (several times faster than
    ``bincount``).
    """
    if n == 1:  # the shifted rows below need a row stride 2n - 2 >= n
        a = np.asarray(rows(0, 1), dtype=np.float64)
        return a[:, 0].copy(), float(np.sum(a * a))
    width = 2 * n - 1
    sums = np.zeros(width)
    total_sq = 0.0
    buf = np.empty(min(block, n) * width + n)
    for i0 in range(0, n, block):
        blk = rows(i0, min(n, i0 + block))
        b = blk.shape[0]
        buf.fill(0.0)
        # flat index of A[i0 + t, j] is t (2n - 1) + (j - t - i0) + n - 1 = t (2n - 2) + (n - 1 - i0) + j
        buf[n - 1 - i0 : n - 1 - i0 + b * (width - 1)].reshape(b, width - 1)[:, :n] = blk
        sums += buf[: b * width].reshape(b, width).sum(axis=0)
        total_sq += float(np.sum(blk * blk))
    return sums, total_sq


def diagonal_sums_dense(matrix: np.ndarray) -> DiagonalSums:
    """Diagonal statistics of a dense square matrix.

    Parameters
    ----------
    matrix
        Array of shape ``(n, n)``.
    """
    a = _as_float64(matrix)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"expected a square matrix, got shape {a.shape}")
    scale = _max_abs(a)
    n = a.shape[0]
    sums, total_sq = skewed_sums(n, lambda i0, i1: a[i0:i1] / scale)
    diag = np.diag(a) / scale
    return DiagonalSums(n, sums, float(sums.sum()), total_sq, float(np.sum(diag * diag)), scale)


def fft_length(n: int) -> int:
    """Length of the zero-padded FFT that turns circular into linear correlation.

    The smallest 5-smooth number (2^a 3^b 5^c) >= 2n - 1, which numpy's FFT
    handles fastest; computed here rather than with ``scipy.fft.next_fast_len``,
    whose import alone costs a quarter of a second.
    """
    target = max(1, 2 * n - 1)
    best = 1 << (target - 1).bit_length()  # a power of two always qualifies
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            # smallest power of two that lifts p35 to the target
            p = p35 << max(0, (-(-target // p35) - 1).bit_length())
            best = min(best, p)
            p35 *= 3
        p5 *= 5
    return best


def diagonal_sums_stacked(z: np.ndarray, *, chunk_bytes: int = 2**24, workers: int | None = None) -> np.ndarray:
    """Diagonal sums ``S_k`` of ``Q_h K_h^T`` for a stack of heads, by FFT.

    Parameters
    ----------
    z
        ``(heads, 2, r, n)``: ``z[h, 0]`` holds head ``h``'s query vectors as
        columns (``r x n``, positions last) and ``z[h, 1]`` its key vectors; or
        ``(heads, 1, r, n)`` for Gram matrices ``Q_h Q_h^T`` (one transform
        instead of two).
    chunk_bytes
        Spectrum memory per chunk of heads.
    workers
        Threads (numpy's FFT releases the GIL); default: the CPU count, at most 4.

    Returns
    -------
    numpy.ndarray
        ``(heads, 2n - 1)``, ``S_k = sum_i q_i . k_{i+k}`` at index ``k + n - 1``.

    Notes
    -----
    Every row gets a zero-padded real FFT (length :func:`fft_length`); the
    per-head sum of the cross-spectra needs one inverse FFT per head. Heads go in
    chunks, each worker reusing one buffer, so memory stays flat.
    """
    import os
    from concurrent.futures import ThreadPoolExecutor

    h, parts, r, n = z.shape
    length = fft_length(n)
    bins = length // 2 + 1
    # Work units: a block of heads, or a block of rows of one head when a head alone
    # would exceed chunk_bytes (e.g. E E^T with n = 32768, d = 768).
    rows = max(1, min(r, chunk_bytes // (parts * bins * 16)))
    per_head = max(1, min(h, chunk_bytes // (parts * r * bins * 16))) if rows == r else 1
    units = [(h0, min(h, h0 + per_head), 0, r) for h0 in range(0, h, per_head)] if rows == r else [
        (hh, hh + 1, r0, min(r, r0 + rows)) for hh in range(h) for r0 in range(0, r, rows)
    ]
    workers = max(1, min(workers or os.cpu_count() or 1, 4, len(units)))
    dtype = np.float64 if parts == 1 else np.complex128
    partial = [np.zeros((h, bins), dtype=dtype) for _ in range(workers)]  # one accumulator per worker: no races
    buffers = [np.empty((per_head * parts * rows, bins), dtype=np.complex128) for _ in range(workers)]

    def run(worker: int) -> None:
        spec, acc = buffers[worker], partial[worker]
        for h0, h1, r0, r1 in units[worker::workers]:
            block = z[h0:h1, :, r0:r1].reshape(-1, n)  # a copy only when z is a strided view
            out = spec[: block.shape[0]]
            np.fft.rfft(block, n=length, axis=1, out=out)  # zero-padded to `length`
            sp = out.reshape(h1 - h0, parts, r1 - r0, bins)
            if parts == 1:  # autocorrelation: |F|^2
                acc[h0:h1] += (sp[:, 0].real ** 2 + sp[:, 0].imag ** 2).sum(axis=1)
            else:
                np.conjugate(sp[:, 0], out=sp[:, 0])
                sp[:, 0] *= sp[:, 1]
                acc[h0:h1] += sp[:, 0].sum(axis=1)

    if workers == 1:
        run(0)
    else:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(run, range(workers)))
    cross = partial[0] if workers == 1 else np.sum(partial, axis=0)
    corr = np.fft.irfft(cross, n=length, axis=1)  # corr[m] = sum_i q_i . k_{i+m}; negative m wrap around
    if n == 1:
        return corr[:, :1]
    return np.concatenate([corr[:, length - (n - 1) :], corr[:, :n]], axis=1)


def _diagonal_sums_fft(q: np.ndarray, k: np.ndarray | None) -> np.ndarray:
    """``S_k`` of ``q k^T`` (``k=None``: of ``q q^T``) for one matrix; see :func:`diagonal_sums_stacked`."""
    # Transposed views, not copies: each work unit copies only its own rows.
    z = q.T[None, None] if k is None else np.stack([q.T, k.T])[None]
    return diagonal_sums_stacked(z)[0]


def diagonal_sums_factored(q: np.ndarray, k: np.ndarray | None = None) -> DiagonalSums:
    """Diagonal statistics of ``A = q @ k.T`` without forming ``A``.

    Parameters
    ----------
    q
        Left factor, shape ``(n, r)``.
    k
        Right factor, shape ``(n, r)``; ``None`` means ``k = q`` (a Gram matrix
        ``E E^T``).

    Notes
    -----
    ``S_k`` come from FFT cross-correlations of the columns (O(n r log n));
    ``sum A**2 = tr((q^T q)(k^T k))``, ``sum A = (sum_i q_i) . (sum_j k_j)`` and the
    main diagonal is ``q_i . k_i``.
    """
    q = _as_float64(q)
    same = k is None
    k = q if same else _as_float64(k)
    if q.ndim != 2 or q.shape != k.shape:
        raise ValueError(f"factors must have the same (n, r) shape, got {q.shape} and {k.shape}")
    sq, sk = _max_abs(q), (_max_abs(q) if same else _max_abs(k))
    q = q / sq
    k = q if same else k / sk
    sums = _diagonal_sums_fft(q, None if same else k)
    n, r = q.shape
    if n < r:  # sum A**2 directly is cheaper than the r x r Gram matrices (and A is small)
        a = q @ k.T
        total_sq = float(np.sum(a * a))
    elif same:
        g = q.T @ q
        total_sq = float(np.sum(g * g))
    else:
        total_sq = float(np.sum((q.T @ q) * (k.T @ k)))
    total = float(q.sum(axis=0) @ k.sum(axis=0))
    diag_sq = float(np.sum(np.einsum("ir,ir->i", q, k) ** 2))
    return DiagonalSums(n, sums, total, total_sq, diag_sq, sq * sk)


def _r2(resid: float, tot: float, scale: float, what: str) -> float:
    if tot <= 1e-13 * max(scale, np.finfo(float).tiny):
        warnings.warn(
            f"{what} has zero variance (constant matrix); Toeplitzness set to 1.0",
            PosvizWarning,
            stacklevel=3,
        )
        return 1.0
    return float(1.0 - max(resid, 0.0) / tot)


def toeplitzness_from_sums(ds: DiagonalSums, *, exclude_diagonal: bool = False) -> float:
    """Toeplitzness R^2 from diagonal statistics.

    Parameters
    ----------
    ds
        Output of :func:`diagonal_sums_dense` or :func:`diagonal_sums_factored`.
    exclude_diagonal
        Leave the main diagonal out of both sums.
    """
    n = ds.n
    counts = ds.counts
    explained = ds.sums**2 / counts  # sum over each diagonal of its mean squared
    if not exclude_diagonal:
        resid = ds.total_sq - explained.sum()
        tot = ds.total_sq - ds.total**2 / (n * n)
        return _r2(resid, tot, ds.total_sq, "the matrix")
    if n < 2:
        raise ValueError("exclude_diagonal needs n >= 2")
    off_sq = ds.total_sq - ds.diag_sq
    resid = off_sq - (explained.sum() - explained[n - 1])
    tot = off_sq - (ds.total - ds.sums[n - 1]) ** 2 / (n * n - n)
    return _r2(resid, tot, ds.total_sq, "the off-diagonal part of the matrix")


#: Factored matrices with ``n * n * r`` at most this are scored by the two-pass
#: row-block method (exact sums of squared deviations, a fraction of a second);
#: larger ones by the closed form, whose rounding error grows with
#: ``sum(A**2) / sum((A - mean)**2)``.
EXACT_LIMIT = 2e8

Method = Literal["auto", "closed", "exact"]


def toeplitzness_from_rows(n: int, rows, ds: DiagonalSums, *, exclude_diagonal: bool = False, block: int = 256) -> float:
    """Toeplitzness R^2 from the matrix's rows, summing squared deviations directly.

    Parameters
    ----------
    n
        Matrix size.
    rows
        ``rows(i0, i1) -> A[i0:i1] / ds.scale``, in the units of ``ds`` (so that
        huge inputs never overflow).
    ds
        The matrix's diagonal sums (for the diagonal means and the overall mean).
    exclude_diagonal
        Leave the main diagonal out of both sums.

    Notes
    -----
    A second pass over ``A`` costs ``O(n^2)`` but avoids the cancellation of
    ``sum(A**2) - sum_k S_k**2 / m_k``, which matters when one part of the matrix
    (often its diagonal) dwarfs the variation that is scored.
    """
    if exclude_diagonal and n < 2:
        raise ValueError("exclude_diagonal needs n >= 2")
    means = ds.sums / ds.counts
    if exclude_diagonal:
        mu = (ds.total - ds.sums[n - 1]) / (n * n - n)
    else:
        mu = ds.total / (n * n)
    resid = tot = 0.0
    cols = np.arange(n)
    for i0 in range(0, n, block):
        i1 = min(n, i0 + block)
        blk = rows(i0, i1)
        idx = cols[None, :] - np.arange(i0, i1)[:, None] + n - 1
        dev = blk - means[idx]
        var = blk - mu
        if exclude_diagonal:
            r = np.arange(i1 - i0)
            dev[r, r + i0] = 0.0
            var[r, r + i0] = 0.0
        resid += float(np.sum(dev * dev))
        tot += float(np.sum(var * var))
    return _r2(resid, tot, ds.total_sq, "the off-diagonal part of the matrix" if exclude_diagonal else "the matrix")


def toeplitzness(
    matrix: np.ndarray | None = None,
    *,
    factors: tuple[np.ndarray, np.ndarray] | None = None,
    embeddings: np.ndarray | None = None,
    exclude_diagonal: bool = False,
    method: Method = "auto",
) -> float:
    """Toeplitzness R^2 of a positional score matrix.

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
        factored problems (``n^2 r <= EXACT_LIMIT``), ``closed`` otherwise.

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
        a = _as_float64(matrix)
        ds = diagonal_sums_dense(a)
        exact = method != "closed"
        rows = lambda i0, i1: a[i0:i1] / ds.scale  # noqa: E731
    else:
        q, k = (embeddings, None) if embeddings is not None else factors
        q = _as_float64(q)
        kk = q if k is None else _as_float64(k)
        ds = diagonal_sums_factored(q, k if k is None else kk)
        n, r = q.shape
        exact = method == "exact" or (method == "auto" and n * n * r <= EXACT_LIMIT)
        qs, ks = q / _max_abs(q), kk / _max_abs(kk)  # the units of ds: A / (max|q| max|k|)
        rows = lambda i0, i1: qs[i0:i1] @ ks.T  # noqa: E731
    if exact:
        return toeplitzness_from_rows(ds.n, rows, ds, exclude_diagonal=exclude_diagonal)
    return toeplitzness_from_sums(ds, exclude_diagonal=exclude_diagonal)


def toeplitz_projection(matrix: np.ndarray) -> np.ndarray:
    """Least-squares closest Toeplitz matrix: each diagonal replaced by its mean."""
    a = _as_float64(matrix)
    n = a.shape[0]
    i, j = np.indices((n, n))
    idx = j - i + n - 1
    means = np.bincount(idx.ravel(), weights=a.ravel(), minlength=2 * n - 1) / (n - np.abs(np.arange(1 - n, n)))
    return means[idx]


def normalize_embeddings(embeddings: np.ndarray, normalize: str = "none") -> np.ndarray:
    """Transform ``E`` so that ``E E^T`` is the requested kind of similarity.

    Parameters
    ----------
    embeddings
        ``(n, d)`` position embeddings.
    normalize
        ``none`` (raw inner products), ``cosine`` (rows scaled to unit norm) or
        ``center`` (column means removed: ``P`` becomes a covariance-like Gram matrix).
    """
    e = _as_float64(embeddings)
    if normalize == "none":
        return e
    if normalize == "center":
        return e - e.mean(axis=0, keepdims=True)
    if normalize == "cosine":
        norms = np.linalg.norm(e, axis=1, keepdims=True)
        if np.any(norms == 0):
            warnings.warn("some position vectors are zero; their cosine rows are set to 0", PosvizWarning, stacklevel=2)
        return np.divide(e, norms, out=np.zeros_like(e), where=norms > 0)
    raise ValueError(f"normalize must be one of {NORMALIZE_CHOICES}, got {normalize!r}")


def gram(embeddings: np.ndarray, normalize: str = "none") -> np.ndarray:
    """Dense ``P = E E^T`` (float64) after :func:`normalize_embeddings`."""
    e = normalize_embeddings(embeddings, normalize)
    return e @ e.T


@dataclass(frozen=True)
class DiagonalProfile:
    """Mean and spread of a matrix along each offset ``k = j - i``.

    ``mean`` is the empirical counterpart of TISA's ``f(k)``.
    """

    offsets: np.ndarray
    mean: np.ndarray
    std: np.ndarray | None
    count: np.ndarray


def diagonal_profile(
    matrix: np.ndarray | None = None,
    *,
    factors: tuple[np.ndarray, np.ndarray] | None = None,
    embeddings: np.ndarray | None = None,
    spread: bool = True,
    block: int = 512,
) -> DiagonalProfile:
    """Mean (and standard deviation) of the entries on each diagonal.

    Same inputs as :func:`toeplitzness`. The spread of a factored matrix is
    accumulated from row blocks of ``A`` (memory ``O(block * n)``), never the
    full matrix.
    """
    from posviz.positional_scores import PositionalScores

    if matrix is not None:
        stack = PositionalScores.from_dense(matrix)
    elif factors is not None:
        stack = PositionalScores.from_factors(*factors)
    elif embeddings is not None:
        stack = PositionalScores.from_factors(embeddings)
    else:
        raise TypeError("give matrix, factors or embeddings")
    return stack.profile(0, spread=spread, block=block)


def diagonal_sumsq_from_rows(n: int, rows, block: int, center: np.ndarray | None = None) -> np.ndarray:
    """Per-diagonal sums of squares from row blocks ``rows(i0, i1) -> A[i0:i1]``.

    With ``center`` (the ``2n - 1`` diagonal means) the squared deviations from
    each diagonal's mean are summed instead, which avoids the cancellation of
    ``E[x^2] - mean^2``. Memory is ``O(block * n)``.
    """
    out = np.zeros(2 * n - 1)
    cols = np.arange(n)
    for i0 in range(0, n, block):
        i1 = min(n, i0 + block)
        blk = rows(i0, i1)
        idx = cols[None, :] - np.arange(i0, i1)[:, None] + n - 1
        dev = blk if center is None else blk - center[idx]
        out += np.bincount(idx.ravel(), weights=(dev * dev).ravel(), minlength=2 * n - 1)
    return out


@dataclass(frozen=True)
class ToeplitzScore:
    """Toeplitzness of ``P = E E^T`` with its permutation null baseline.

    Attributes
    ----------
    toeplitzness, toeplitzness_offdiag
        R^2, full and ``exclude_diagonal`` variants.
    null_mean, null_std
        Null baseline of the full-variant R^2: its exact mean over all ``n!`` row
        permutations of ``E`` (closed form, :mod:`posviz.toeplitz.null`) and its
        standard deviation over ``null_draws`` seeded random permutations (NaN
        for fewer than 2 draws).
    null_mean_offdiag, null_std_offdiag
        The same for the off-diagonal variant.
    excess, excess_offdiag
        ``(R^2 - null) / (1 - null)`` for each variant.
    normalize
        How ``E`` was normalised before forming ``P``.
    null_draws, seed
        Baseline settings (reproducible); ``null_draws=0`` computes no baseline.
    null_method
        How the baseline was computed, in words (for outputs and reports).
    """

    toeplitzness: float
    toeplitzness_offdiag: float
    null_mean: float
    null_std: float
    null_mean_offdiag: float
    null_std_offdiag: float
    excess: float
    excess_offdiag: float
    normalize: str
    null_draws: int
    seed: int
    null_method: str = ""

    def to_dict(self) -> dict:
        """Plain-JSON dictionary of the fields."""
        return asdict(self)


def _excess(r2: float, null: float) -> float:
    if not np.isfinite(null) or null >= 1.0:
        return float("nan")
    return float((r2 - null) / (1.0 - null))


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
        As in :func:`normalize_embeddings` (applied before permuting; both
        normalisations commute with row permutations).
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
    # Totals, sums of squares and the main diagonal do not change when rows are
    # permuted: compute them once, and only the diagonal sums per draw.
    base = diagonal_sums_factored(e) if base is None else base
    scaled = e / np.sqrt(base.scale)
    return _null_draws(base, lambda perm: _diagonal_sums_fft(scaled[perm], None), draws, seed)


def _null_draws(base: DiagonalSums, permuted_sums, draws: int, seed: int) -> np.ndarray:
    """R^2 (full, off-diagonal) of ``draws`` seeded row permutations.

    ``permuted_sums(perm)`` returns the diagonal sums of ``A[perm][:, perm]`` in
    the units of ``base``; everything else in ``base`` is permutation invariant.
    """
    rng = np.random.default_rng(seed)
    out = np.empty((draws, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PosvizWarning)
        for t in range(draws):
            sums = permuted_sums(rng.permutation(base.n))
            ds = DiagonalSums(base.n, sums, base.total, base.total_sq, base.diag_sq, base.scale)
            out[t] = (toeplitzness_from_sums(ds), toeplitzness_from_sums(ds, exclude_diagonal=True))
    return out


#: ``score_embeddings`` builds ``P`` (at most 32 MiB) for up to this many
#: positions: one matrix product and a few ``O(n^2)`` passes then cost less than
#: the closed form's FFTs and ``d x d`` Gram matrices, and every sum is exact.
DENSE_POSITIONS = 2048


def _score_dense(e: np.ndarray, null_draws: int, seed: int) -> tuple[float, ...]:
    """R^2, off-diagonal R^2, null means and sds of ``P = E E^T``, building ``P``."""
    from posviz.toeplitz.null import expected_toeplitzness, moments_dense

    es = e / _max_abs(e)
    p = es @ es.T
    p /= _max_abs(p)  # the units of ds (scale 1): nothing overflows below
    ds = diagonal_sums_dense(p)
    n = p.shape[0]
    rows = lambda i0, i1: p[i0:i1]  # noqa: E731
    r2, r2_off = (toeplitzness_from_rows(n, rows, ds, exclude_diagonal=x) for x in (False, True))
    nm = ns = nmo = nso = float("nan")
    if null_draws > 0:
        m = moments_dense(p)
        nm, nmo = float(expected_toeplitzness(m)), float(expected_toeplitzness(m, exclude_diagonal=True))
    if null_draws > 1:
        # rows and columns of P permuted together, a block of rows at a time
        def permuted_sums(perm):
            return skewed_sums(n, lambda i0, i1: p.take(perm[i0:i1], axis=0).take(perm, axis=1))[0]

        ns, nso = (float(x) for x in _null_draws(ds, permuted_sums, null_draws, seed).std(axis=0, ddof=1))
    return r2, r2_off, nm, nmo, ns, nso


def score_embeddings(
    embeddings: np.ndarray,
    *,
    normalize: str = "none",
    null_draws: int = 10,
    seed: int = 0,
    method: Method = "auto",
) -> ToeplitzScore:
    """Toeplitzness of ``P = E E^T`` (both variants) with its null baseline.

    Parameters
    ----------
    embeddings
        ``(n, d)`` position embeddings, any float dtype (computed in float64).
    normalize
        ``none``, ``cosine`` or ``center``.
    null_draws
        Random row permutations for the spread of the baseline (0: no baseline).
        Its mean is exact (the average over all permutations, in closed form),
        so it carries no sampling noise whatever the number of draws.
    seed
        Seed for the permutations.
    method
        ``auto`` (default): for at most :data:`DENSE_POSITIONS` positions, build
        ``P`` and sum over it directly (R^2 by two passes, the null mean from
        :func:`posviz.toeplitz.null.moments_dense`, each null draw from ``P``
        with rows and columns permuted); above that, as in :func:`toeplitzness`
        (never building ``P``). ``closed`` and ``exact`` as in
        :func:`toeplitzness`, with the null draws by the closed form (they
        estimate a spread, and need no more precision than that).

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
    n, d = e.shape
    if method == "auto" and n <= DENSE_POSITIONS:
        r2, r2_off, nm, nmo, ns, nso = _score_dense(e, null_draws, seed)
    else:
        ds = diagonal_sums_factored(e)
        if method == "exact" or (method == "auto" and n * n * d <= EXACT_LIMIT):
            es = e / _max_abs(e)  # the units of ds
            rows = lambda i0, i1: es[i0:i1] @ es.T  # noqa: E731
            r2, r2_off = (toeplitzness_from_rows(n, rows, ds, exclude_diagonal=x) for x in (False, True))
        else:
            r2, r2_off = (toeplitzness_from_sums(ds, exclude_diagonal=x) for x in (False, True))
        nm = ns = nmo = nso = float("nan")
        if null_draws > 0:
            nm, nmo = exact_null_mean(e)
        if null_draws > 1:
            ns, nso = (float(x) for x in null_baseline(e, draws=null_draws, seed=seed, base=ds).std(axis=0, ddof=1))
    how = null_method_text(null_draws, seed) if null_draws > 0 else ""
    return ToeplitzScore(
        toeplitzness=r2,
        toeplitzness_offdiag=r2_off,
        null_mean=nm,
        null_std=ns,
        null_mean_offdiag=nmo,
        null_std_offdiag=nso,
        excess=_excess(r2, nm),
        excess_offdiag=_excess(r2_off, nmo),
        normalize=normalize,
        null_draws=int(null_draws),
        seed=int(seed),
        null_method=how,
    )


def exact_null_mean(embeddings: np.ndarray) -> tuple[float, float]:
    """Mean of R^2 (full, off-diagonal) of ``P = E E^T`` over all row permutations of ``E``.

    Permuting rows permutes rows and columns of ``P`` together, which leaves the
    denominator of R^2 unchanged; the mean residual then depends only on a few
    permutation-invariant moments of ``P`` (:mod:`posviz.toeplitz.null`), computed
    from ``E^T E`` in ``O(n d^2)`` without forming ``P``.
    """
    from posviz.toeplitz.null import expected_toeplitzness, moments_factored

    e = _as_float64(embeddings)
    e = e / _max_abs(e)
    m = moments_factored(e.T, e.T)
    return float(expected_toeplitzness(m)), float(expected_toeplitzness(m, exclude_diagonal=True))


def null_method_text(draws: int, seed: int) -> str:
    """How :func:`score_embeddings` computes the null baseline, in one phrase."""
    sd = f"sd over {draws} seeded random permutations (seed {seed})" if draws > 1 else "no sd (fewer than 2 draws)"
    return f"exact mean over all row permutations of E (closed form); {sd}"
