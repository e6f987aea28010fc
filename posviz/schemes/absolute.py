"""Learned absolute positions: how the table ``E_P`` enters a head's attention.

The position-only logits of a head are ``(X W_Q + b_Q)(X W_K + b_K)^T * scale``
with ``X`` built from ``E_P`` in one of three modes (every output states which):

* ``none``: ``X = E_P``;
* ``ln``: ``E_P`` through the LayerNorm(s) the model applies before attention;
* ``ln+type0``: as ``ln`` with token-type row 0 added to ``E_P`` first (what a
  BERT-style model sees for a first segment, without the word embeddings).

This is the approximation every analysis of absolute models makes: in the model
the LayerNorm acts on word + position + type embeddings together. See
ARCHITECTURE.md.
"""

from __future__ import annotations

import numpy as np

#: The ways ``E_P`` enters the position-only logits (``posviz heads --ln``).
LN_MODES: tuple[str, ...] = ("none", "ln", "ln+type0")


def layer_norm(x: np.ndarray, gamma: np.ndarray | None, beta: np.ndarray | None, eps: float) -> np.ndarray:
    """``torch.nn.LayerNorm`` over the last axis (biased variance), in float64.

    Parameters
    ----------
    x
        ``(..., d)`` input.
    gamma, beta
        Affine weight and bias, ``(d,)``, or ``None`` for none.
    eps
        Added to the variance.

    Returns
    -------
    numpy.ndarray
        Same shape as ``x``.
    """
    mu = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    out = (x - mu) / np.sqrt(var + eps)
    if gamma is not None:
        out = out * gamma
    if beta is not None:
        out = out + beta
    return out
