"""Diagonal sums: the statistics of a matrix that determine its Toeplitzness.

For an ``n x n`` matrix ``A`` and offset ``k = j - i`` (key position minus query
position), ``S_k`` is the sum of the diagonal at offset ``k``. Together with
``sum(A)``, ``sum(A**2)`` and the main diagonal's sum of squares they give R^2
(:mod:`posviz.toeplitz.r2`) and the offset profile (:mod:`posviz.toeplitz.profile`).
Kernels, one per way a matrix is given:

* dense: :func:`skewed_sums` (diagonals turned into columns, one vectorised pass),
  for one matrix given by row blocks or for a stack ``(..., n, n)``
  (:func:`diagonal_sums_array`, used by ``posviz attention`` and ``posviz hidden``);
* factored ``A = Q K^T``: ``S_k`` from FFT cross-correlations of the columns
  (O(n r log n)), ``sum A**2 = tr((Q^T Q)(K^T K))`` and
  ``sum A = (sum_i q_i) . (sum_j k_j)``, never building ``A``
  (:func:`diagonal_sums_factored` for one matrix, :func:`diagonal_sums_stacked`
  for all heads of a layer at once);
* offsets ``A[i, j] = f(k)``: ``S_k = (n - |k|) f(k)``.

The dense computation stays in the tests as the reference; ARCHITECTURE.md
describes how these kernels feed the scoring engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from posviz.positional_scores import PositionalScores

#: ``rows(i0, i1) -> A[i0:i1]``: a matrix given by blocks of rows.
Rows = Callable[[int, int], np.ndarray]


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

    def with_sums(self, sums: np.ndarray) -> DiagonalSums:
        """The same statistics with other diagonal sums (a row-and-column permutation of ``A``)."""
        return DiagonalSums(self.n, sums, self.total, self.total_sq, self.diag_sq, self.scale)


def max_abs(x: np.ndarray) -> float:
    """Largest ``|x|``, or 1.0 where that is 0 or not finite (a safe divisor)."""
    m = float(np.max(np.abs(x))) if x.size else 0.0
    return m if np.isfinite(m) and m > 0 else 1.0


def skewed_sums(n: int, rows: Rows, *, block: int = 256, squares: bool = True) -> tuple[np.ndarray, float]:
    """Diagonal sums and sum of squares of an ``n x n`` matrix given by row blocks.

    Parameters
    ----------
    n
        Matrix size.
    rows
        ``rows(i0, i1) -> A[i0:i1]``.
    block
        Rows per block (memory ``O(block * n)``).
    squares
        Also sum the squares (``False``: ``total_sq`` is 0).

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
        return a[:, 0].copy(), float(np.sum(a * a)) if squares else 0.0
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
        if squares:
            total_sq += float(np.sum(blk * blk))
    return sums, total_sq


def diagonal_sums_array(x: np.ndarray) -> np.ndarray:
    """Sums of a stack of square matrices along each offset ``k = j - i``.

    Parameters
    ----------
    x
        ``(..., n, n)``, any float or bool dtype (summed in float64).

    Returns
    -------
    numpy.ndarray
        ``(..., 2n - 1)``; index ``k + n - 1`` holds the sum of the diagonal at offset ``k``.

    Notes
    -----
    The kernel of :func:`skewed_sums`, applied to each matrix of the stack.
    """
    a = np.asarray(x, dtype=np.float64)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"expected square matrices (..., n, n), got shape {a.shape}")
    n = a.shape[-1]
    flat = a.reshape(-1, n, n)
    out = np.empty((flat.shape[0], 2 * n - 1))
    for r, m in enumerate(flat):
        out[r] = skewed_sums(n, lambda i0, i1, m=m: m[i0:i1], squares=False)[0]
    return out.reshape(*a.shape[:-2], 2 * n - 1)


def diagonal_sums_dense(matrix: np.ndarray) -> DiagonalSums:
    """Diagonal statistics of a dense square matrix.

    Parameters
    ----------
    matrix
        Array of shape ``(n, n)``.

    Returns
    -------
    DiagonalSums
        In the units of ``matrix / max|matrix|``.
    """
    a = np.asarray(matrix, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"expected a square matrix, got shape {a.shape}")
    scale = max_abs(a)
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

    from posviz.util.compat import rfft_into

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
            rfft_into(block, length, out)  # zero-padded to `length`
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


def diagonal_sums_fft(q: np.ndarray, k: np.ndarray | None) -> np.ndarray:
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

    Returns
    -------
    DiagonalSums
        In the units of ``A / (max|q| max|k|)``.

    Notes
    -----
    ``S_k`` come from FFT cross-correlations of the columns (O(n r log n));
    ``sum A**2 = tr((q^T q)(k^T k))``, ``sum A = (sum_i q_i) . (sum_j k_j)`` and the
    main diagonal is ``q_i . k_i``.
    """
    q = np.asarray(q, dtype=np.float64)
    same = k is None
    k = q if same else np.asarray(k, dtype=np.float64)
    if q.ndim != 2 or q.shape != k.shape:
        raise ValueError(f"factors must have the same (n, r) shape, got {q.shape} and {k.shape}")
    sq, sk = max_abs(q), (max_abs(q) if same else max_abs(k))
    q = q / sq
    k = q if same else k / sk
    sums = diagonal_sums_fft(q, None if same else k)
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


def diagonal_sums_offsets(values: np.ndarray) -> DiagonalSums:
    """Diagonal statistics of the Toeplitz matrix ``A[i, j] = f(j - i)``.

    Parameters
    ----------
    values
        ``f(k)`` for ``k = -(n-1) .. n-1``, shape ``(2n - 1,)``.
    """
    f = np.asarray(values, dtype=np.float64)
    n = (f.shape[0] + 1) // 2
    counts = n - np.abs(np.arange(1 - n, n))
    scale = float(np.max(np.abs(f))) or 1.0
    g = f / scale
    sums = g * counts
    return DiagonalSums(n, sums, float(sums.sum()), float((g * g * counts).sum()), float(n * g[n - 1] ** 2), scale)


def diagonal_sums(stack: PositionalScores, h: int) -> DiagonalSums:
    """Diagonal statistics of head ``h`` of a stack, in closed form where possible.

    Parameters
    ----------
    stack
        Any :class:`~posviz.positional_scores.PositionalScores`.
    h
        Head index.
    """
    if stack.form == "factored":
        return diagonal_sums_factored(stack.left[h], None if stack.is_gram else stack.right[h])
    if stack.form == "offsets":
        return diagonal_sums_offsets(stack.offsets[h])
    return diagonal_sums_dense(stack.dense[h])
