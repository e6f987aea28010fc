"""Toeplitzness: how translation-invariant a stack of positional score matrices is.

A :class:`~posviz.positional_scores.PositionalScores` stack goes in; numbers come
out: diagonal sums (:mod:`~posviz.toeplitz.diagonals`), R^2 and the one choice of
how to compute it (:mod:`~posviz.toeplitz.r2`), the Toeplitz projection
(:mod:`~posviz.toeplitz.projection`), offset profiles (:mod:`~posviz.toeplitz.profile`),
the permutation null (:mod:`~posviz.toeplitz.null`), and one scoring engine
(:mod:`~posviz.toeplitz.statistics`, :mod:`~posviz.toeplitz.engine`) whose result
is a :class:`~posviz.toeplitz.result.ToeplitzScore`. The definitions (offset
``k = j - i``, projection, R^2 full / exclude_diagonal, null, excess) are in
ARCHITECTURE.md.

The public names below are imported lazily, on first use.
"""

from __future__ import annotations

from posviz.util.lazy import lazy_exports

_EXPORTS = {
    "toeplitzness": "posviz.toeplitz.engine",
    "score": "posviz.toeplitz.engine",
    "score_layer": "posviz.toeplitz.engine",
    "score_stacked": "posviz.toeplitz.engine",
    "score_embeddings": "posviz.toeplitz.engine",
    "ToeplitzScore": "posviz.toeplitz.result",
    "head_statistics": "posviz.toeplitz.statistics",
    "stacked_factors": "posviz.toeplitz.statistics",
    "DENSE_POSITIONS": "posviz.toeplitz.statistics",
    "toeplitz_projection": "posviz.toeplitz.projection",
    "diagonal_profile": "posviz.toeplitz.profile",
    "head_profile": "posviz.toeplitz.profile",
    "DiagonalProfile": "posviz.toeplitz.profile",
    "null_baseline": "posviz.toeplitz.null",
    "exact_null_mean": "posviz.toeplitz.null",
    "null_method_text": "posviz.toeplitz.null",
    "toeplitzness_from_sums": "posviz.toeplitz.r2",
    "toeplitzness_from_rows": "posviz.toeplitz.r2",
    "r2_method": "posviz.toeplitz.r2",
    "EXACT_LIMIT": "posviz.toeplitz.r2",
    "Method": "posviz.toeplitz.r2",
    "DiagonalSums": "posviz.toeplitz.diagonals",
    "diagonal_sums": "posviz.toeplitz.diagonals",
    "diagonal_sums_dense": "posviz.toeplitz.diagonals",
    "diagonal_sums_factored": "posviz.toeplitz.diagonals",
    "diagonal_sums_stacked": "posviz.toeplitz.diagonals",
    "fft_length": "posviz.toeplitz.diagonals",
    "gram": "posviz.positional_scores",
    "normalize_embeddings": "posviz.positional_scores",
    "NORMALIZE_CHOICES": "posviz.positional_scores",
    "PosvizWarning": "posviz.positional_scores",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
