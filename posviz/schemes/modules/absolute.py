"""Learned absolute positions (ALBERT/BERT): a table E_P added to the input.

The table itself lives in the embeddings module as ``position_embeddings`` (the
name ALBERT uses, so weights map across). Its per-head positional scores are not
a module output but a function of the weights: for layer ``l`` and head ``h``,

    A_h = (X W_Q^h + b_Q^h)(X W_K^h + b_K^h)^T / sqrt(d_h),
    X   = map(LN(E_P + t_0))       (convention ``ln+type0``)

with ``map`` ALBERT's embedding→hidden projection (with its bias). Other
conventions: ``ln`` (no token-type row), ``none`` (no LayerNorm). This is an
approximation every analysis of absolute models makes: in the model the
LayerNorm acts on word + position + type embeddings together. The modes and the
LayerNorm are those of :mod:`posviz.schemes.absolute`; see ARCHITECTURE.md.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from posviz.schemes.absolute import LN_MODES, layer_norm

#: The conventions of :func:`absolute_head_factors` (the LayerNorm modes).
CONVENTIONS: tuple[str, ...] = LN_MODES


def absolute_head_factors(
    get: Callable[[str], np.ndarray],
    *,
    group: int,
    heads: int,
    n: int,
    layer_norm_eps: float,
    convention: str = "ln+type0",
) -> tuple[np.ndarray, np.ndarray]:
    """Factors ``(Q, K)``, each ``(heads, n, d_h)``, of every head's position-only logits.

    Parameters
    ----------
    get
        Returns a float64 array for a parameter-name suffix, e.g.
        ``embeddings.position_embeddings.weight``.
    group
        ALBERT layer group whose attention weights are used.
    heads
        Number of heads.
    n
        Positions ``0 .. n-1``.
    layer_norm_eps
        Epsilon of the embedding LayerNorm.
    convention
        ``none``, ``ln`` or ``ln+type0``.

    Returns
    -------
    left, right
        ``A_h = left[h] @ right[h].T``; the scale ``1/sqrt(d_h)`` is folded into ``left``.
    """
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {', '.join(CONVENTIONS)}, got {convention!r}")
    x = get("embeddings.position_embeddings.weight")[:n]  # (n, embedding_size)
    if convention == "ln+type0":
        x = x + get("embeddings.token_type_embeddings.weight")[0]
    if convention != "none":
        x = layer_norm(x, get("embeddings.LayerNorm.weight"), get("embeddings.LayerNorm.bias"), layer_norm_eps)
    x = x @ get("encoder.embedding_hidden_mapping_in.weight").T + get("encoder.embedding_hidden_mapping_in.bias")  # (n, hidden)
    att = f"encoder.albert_layer_groups.{group}.albert_layers.0.attention."
    q = x @ get(att + "query.weight").T + get(att + "query.bias")
    k = x @ get(att + "key.weight").T + get(att + "key.bias")
    d = q.shape[1] // heads
    q = q.reshape(n, heads, d).transpose(1, 0, 2) / np.sqrt(d)  # (n, hidden) -> (heads, n, d_h)
    k = k.reshape(n, heads, d).transpose(1, 0, 2)
    return q, k
