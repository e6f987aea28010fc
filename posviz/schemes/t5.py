"""T5's relative-position buckets (Raffel et al., 2020), as transformers computes them.

Each head adds a learned scalar per bucket of the offset ``k = j - i``:
``F[h, i, j] = W[bucket(j - i), h]``. Buckets are exact for short offsets and
logarithmic up to ``max_distance`` (half of them for ``k > 0`` when
bidirectional; causal attention uses ``k <= 0`` only). The arithmetic mirrors
transformers' ``T5Attention._relative_position_bucket`` step by step, in
float32 like it, so every bucket index is the same (tests compare both). See
ARCHITECTURE.md.
"""

from __future__ import annotations

import math

import numpy as np

from posviz.schemes.offsets import offset_axis


def relative_position_bucket(
    relative_position: np.ndarray, *, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128
) -> np.ndarray:
    """Bucket of every relative position ``k = j - i`` (memory minus query position).

    Parameters
    ----------
    relative_position
        Integer array of any shape.
    bidirectional
        Separate buckets for ``k > 0`` (encoders); ``False`` folds ``k > 0`` into bucket 0.
    num_buckets, max_distance
        T5's ``relative_attention_num_buckets`` and ``relative_attention_max_distance``.

    Returns
    -------
    numpy.ndarray
        int64 buckets in ``[0, num_buckets)``, same shape as ``relative_position``.
    """
    rel = np.asarray(relative_position, dtype=np.int64)
    buckets = np.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets += (rel > 0).astype(np.int64) * num_buckets
        rel = np.abs(rel)
    else:
        rel = -np.minimum(rel, 0)
    max_exact = num_buckets // 2
    is_small = rel < max_exact
    # float32 throughout, as transformers; small offsets are clipped only to keep log() finite
    ratio = np.maximum(rel, max_exact).astype(np.float32) / np.float32(max_exact)
    scaled = np.log(ratio) / np.float32(math.log(max_distance / max_exact)) * np.float32(num_buckets - max_exact)
    large = np.minimum(max_exact + scaled.astype(np.int64), num_buckets - 1)
    return buckets + np.where(is_small, rel, large)


def offset_buckets(n: int, *, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128) -> np.ndarray:
    """Bucket of every offset ``k = -(n-1) .. n-1``, shape ``(2n - 1,)``."""
    return relative_position_bucket(offset_axis(n), bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)


def bias_offsets(weight: np.ndarray, n: int, *, bidirectional: bool, num_buckets: int, max_distance: int) -> np.ndarray:
    """T5's relative bias as offset values ``f_h(k)``, shape ``(heads, 2n - 1)``.

    Parameters
    ----------
    weight
        ``relative_attention_bias.weight``, shape ``(num_buckets, heads)``.
    n
        Number of positions.
    bidirectional
        True for the encoder, False for the decoder's causal self-attention.
    num_buckets, max_distance
        Bucket settings of the config.
    """
    idx = offset_buckets(n, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    return np.asarray(weight, dtype=np.float64)[idx].T.copy()
