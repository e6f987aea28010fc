"""The Toeplitz projection: the least-squares closest Toeplitz matrix.

``T(A)`` replaces every diagonal of ``A`` (offset ``k = j - i``) by its mean;
Toeplitzness R^2 (:mod:`posviz.toeplitz.r2`) measures how much of ``A``'s
variance ``T(A)`` keeps. See ARCHITECTURE.md for the definitions.
"""

from __future__ import annotations

import numpy as np


def toeplitz_projection(matrix: np.ndarray) -> np.ndarray:
    """Least-squares closest Toeplitz matrix: each diagonal replaced by its mean.

    Parameters
    ----------
    matrix
        Dense ``(n, n)`` matrix.

    Returns
    -------
    numpy.ndarray
        ``(n, n)`` float64 Toeplitz matrix.
    """
    a = np.asarray(matrix, dtype=np.float64)
    n = a.shape[0]
    i, j = np.indices((n, n))
    idx = j - i + n - 1
    means = np.bincount(idx.ravel(), weights=a.ravel(), minlength=2 * n - 1) / (n - np.abs(np.arange(1 - n, n)))
    return means[idx]
