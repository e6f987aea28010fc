"""The offset axis ``k = j - i`` (key minus query) of translation-invariant schemes.

A scheme that depends on the offset only is stored as its values ``f(k)`` for
``k = -(n-1) .. n-1`` (length ``2n - 1``); ``F[i, j] = f(j - i)`` reads them
through :func:`offset_index`. See ARCHITECTURE.md.
"""

from __future__ import annotations

import numpy as np


def offset_axis(n: int) -> np.ndarray:
    """Offsets ``k = j - i`` from ``-(n-1)`` to ``n-1``, shape ``(2n - 1,)``, int64."""
    return np.arange(1 - n, n, dtype=np.int64)


def offset_index(n: int) -> np.ndarray:
    """Index of ``f(j - i)`` in :func:`offset_axis` for every query ``i`` and key ``j``, shape ``(n, n)``.

    ``f[..., offset_index(n)]`` expands offset values ``(..., 2n - 1)`` into the
    Toeplitz matrices ``(..., n, n)``.
    """
    pos = np.arange(n, dtype=np.int64)
    return pos[None, :] - pos[:, None] + (n - 1)
