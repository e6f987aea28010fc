"""Offset profiles: the mean (and spread) of a matrix along each offset ``k = j - i``.

The mean along diagonal ``k`` is the Toeplitz projection's value there, the
empirical counterpart of TISA's ``f(k)`` (ARCHITECTURE.md). Means come from the
diagonal sums of :mod:`posviz.toeplitz.diagonals`; the spread from row blocks,
never the whole matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from posviz.positional_scores import PositionalScores
from posviz.toeplitz.diagonals import Rows, diagonal_sums


@dataclass(frozen=True)
class DiagonalProfile:
    """Mean and spread of a matrix along each offset ``k = j - i``.

    ``mean`` is the empirical counterpart of TISA's ``f(k)``.

    Attributes
    ----------
    offsets
        ``k = -(n-1) .. n-1``.
    mean
        Mean of each diagonal.
    std
        Standard deviation of each diagonal (``None`` when not computed).
    count
        Entries on each diagonal, ``n - |k|``.
    """

    offsets: np.ndarray
    mean: np.ndarray
    std: np.ndarray | None
    count: np.ndarray


def diagonal_sumsq_from_rows(n: int, rows: Rows, block: int, center: np.ndarray | None = None) -> np.ndarray:
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


def head_profile(stack: PositionalScores, h: int = 0, *, spread: bool = True, block: int = 512) -> DiagonalProfile:
    """Mean and spread along each offset ``k = j - i`` of head ``h`` of a stack.

    Parameters
    ----------
    stack
        Any :class:`~posviz.positional_scores.PositionalScores`.
    h
        Head index.
    spread
        Also compute the standard deviation of each diagonal (one pass over
        row blocks of the matrix, memory ``O(block * n)``; zero for offset stacks).
    block
        Rows per block.
    """
    ds = diagonal_sums(stack, h)
    counts = ds.counts
    mean = ds.sums * ds.scale / counts
    std = None
    if spread:
        if stack.form == "offsets":
            std = np.zeros_like(mean)
        else:
            sq = diagonal_sumsq_from_rows(stack.n, lambda i0, i1: stack.rows(h, i0, i1), block, center=mean)
            std = np.sqrt(sq / counts)
    return DiagonalProfile(ds.offsets, mean, std, counts)


def diagonal_profile(
    matrix: np.ndarray | None = None,
    *,
    factors: tuple[np.ndarray, np.ndarray] | None = None,
    embeddings: np.ndarray | None = None,
    spread: bool = True,
    block: int = 512,
) -> DiagonalProfile:
    """Mean (and standard deviation) of the entries on each diagonal of one matrix.

    Parameters
    ----------
    matrix, factors, embeddings
        One of them, as in :func:`posviz.toeplitz.engine.toeplitzness`.
    spread, block
        As in :func:`head_profile`.
    """
    if matrix is not None:
        stack = PositionalScores.from_dense(matrix)
    elif factors is not None:
        stack = PositionalScores.from_factors(*factors)
    elif embeddings is not None:
        stack = PositionalScores.from_factors(embeddings)
    else:
        raise TypeError("give matrix, factors or embeddings")
    return head_profile(stack, 0, spread=spread, block=block)
