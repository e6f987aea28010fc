"""ALiBi (Press et al., 2022): a fixed linear distance bias per head.

``f_h(k) = -m_h |k|`` with geometric slopes ``m_h``: ``2^(-8 h / H)`` for a
power-of-two head count ``H``, interleaved with the next power of two
otherwise (BLOOM, Falcon and the posviz builder), or MPT's variant with
``alibi_bias_max``. Nothing is learned. See ARCHITECTURE.md.
"""

from __future__ import annotations

import math

import numpy as np

from posviz.errors import UnsupportedModelError
from posviz.schemes.offsets import offset_axis

#: Slope rules: ``bloom`` (transformers' ``_get_alibi_slopes``) and ``mpt`` (``build_mpt_alibi_tensor``).
SLOPE_KINDS: tuple[str, ...] = ("bloom", "mpt")


def _geometric(p2: int) -> np.ndarray:
    """Press et al.'s slopes for ``p2`` heads (a power of two): ``r^1 .. r^p2`` with ``r = 2^(-8 / p2)``."""
    ratio = 2.0 ** (-(2.0 ** -(math.log2(p2) - 3)))
    return ratio ** np.arange(1, p2 + 1)


def slopes(num_heads: int, *, kind: str = "bloom", alibi_bias_max: float = 8.0) -> np.ndarray:
    """Per-head ALiBi slopes ``m_h``, float64, shape ``(num_heads,)``.

    Parameters
    ----------
    num_heads
        Number of heads.
    kind
        ``bloom`` (also Falcon and the posviz builder): the geometric slopes for the
        largest power of two ``H <= num_heads``, then every other slope of ``2H``;
        ``mpt``: ``2^(-h * alibi_bias_max / P)`` for the next power of two ``P``,
        odd entries first, cut to ``num_heads``.
    alibi_bias_max
        MPT's ``attn_config.alibi_bias_max``.

    Notes
    -----
    transformers computes the slopes in float32; these are the same closed forms
    in float64 (the tests compare both to float32 precision).
    """
    if num_heads < 1:
        raise UnsupportedModelError(f"ALiBi needs at least one head, got {num_heads}")
    if kind == "mpt":
        p2 = 2 ** math.ceil(math.log2(num_heads))
        out = 1.0 / 2.0 ** (np.arange(1, p2 + 1) * (alibi_bias_max / p2))
        if p2 != num_heads:
            out = np.concatenate([out[1::2], out[::2]])[:num_heads]
        return out
    p2 = 2 ** math.floor(math.log2(num_heads))
    out = _geometric(p2)
    if p2 != num_heads:
        out = np.concatenate([out, _geometric(2 * p2)[0::2][: num_heads - p2]])
    return out


def bias_offsets(head_slopes: np.ndarray, n: int) -> np.ndarray:
    """The symmetric ALiBi bias ``f_h(k) = -m_h |k|``, shape ``(heads, 2n - 1)``.

    For causal models this equals ``-m_h (i - j)`` on the keys a query may see
    (``k <= 0``); transformers adds ``m_h j`` instead, which differs by a
    per-row constant that the softmax ignores.
    """
    return -np.outer(np.asarray(head_slopes, dtype=np.float64), np.abs(offset_axis(n)))
