"""RoPE per head, from its weights: frequency bands, band energy and the content-probe profile.

RoPE rotates pair ``b`` of the first ``d_rot`` query/key dimensions by ``p * theta_b``.
Which two dimensions form pair ``b`` is the model's *pairing*:

* ``half`` (rotate-half: LLaMA, Mistral, Qwen, Gemma, OLMo, Phi, GPT-NeoX): dims ``b`` and ``b + d_rot/2``;
* ``interleaved`` (GPT-J: ``rotate_every_two``): dims ``2b`` and ``2b + 1``.

Written as a complex number ``z_b = x[re_b] + i x[im_b]``, a rotation by ``phi`` is
``z_b e^{i phi}``, so the logit between a query at ``i`` and a key at ``j = i + k`` is

``s(k) = scale * (a^2 Re sum_b q_b conj(k_b) e^{-i k theta_b} + q_pass . k_pass)``

(``a``: the attention factor of YaRN-style scaling; ``pass``: the dimensions that do not
rotate). Band 0 is the highest frequency (``theta_0 = 1`` without scaling). Definitions
of band energy, the probe profile and its summaries: docs/definitions.md. Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from posviz.schemes.offsets import offset_axis

#: Pairings of rotated dimensions, as ``posviz heads`` names them.
PAIRINGS: tuple[str, ...] = ("half", "interleaved")


def pair_indices(rotary_dim: int, pairing: str) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the real and imaginary dimension of each band, ``(d_rot / 2,)`` each."""
    bands = np.arange(rotary_dim // 2)
    if pairing == "half":
        return bands, bands + rotary_dim // 2
    if pairing == "interleaved":
        return 2 * bands, 2 * bands + 1
    raise ValueError(f"unknown pairing {pairing!r}; expected one of {PAIRINGS}")


def to_bands(x: np.ndarray, rotary_dim: int, pairing: str) -> tuple[np.ndarray, np.ndarray]:
    """Split head vectors ``(..., d)`` into complex bands ``(..., d_rot/2)`` and the pass-through ``(..., d - d_rot)``."""
    re, im = pair_indices(rotary_dim, pairing)
    return x[..., re] + 1j * x[..., im], x[..., rotary_dim:]


def rms_norm(x: np.ndarray, weight: np.ndarray | None, eps: float, offset: float = 0.0) -> np.ndarray:
    """RMSNorm over the last axis: ``x / sqrt(mean(x^2) + eps) * (offset + weight)`` (Gemma: ``offset = 1``)."""
    out = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return out if weight is None else out * (offset + weight)


def kv_group(heads: int, kv_heads: int) -> np.ndarray:
    """Key/value head of each query head (GQA/MQA, transformers' ``repeat_kv``): ``h // (heads / kv_heads)``."""
    if kv_heads <= 0 or heads % kv_heads:
        raise ValueError(f"{heads} query heads cannot share {kv_heads} key/value heads evenly")
    return np.arange(heads) // (heads // kv_heads)


def row_sq_norms(w: np.ndarray, column_gain: np.ndarray | None = None, block: int = 1024) -> np.ndarray:
    """Squared norm of every row of ``w diag(column_gain)``, ``w`` of shape ``(..., D)``; in row blocks, no full copy."""
    flat = w.reshape(-1, w.shape[-1])
    out = np.empty(len(flat))
    for a in range(0, len(flat), block):
        x = flat[a : a + block] if column_gain is None else flat[a : a + block] * column_gain
        out[a : a + block] = np.einsum("rD,rD->r", x, x)
    return out.reshape(w.shape[:-1])


def band_norms(w: np.ndarray, rotary_dim: int, pairing: str) -> np.ndarray:
    """Frobenius norm of each band's two rows of per-head weights ``(heads, d, D)``: ``(heads, d_rot/2)``."""
    return bands_from_rows(row_sq_norms(w), rotary_dim, pairing)


def bands_from_rows(row_sq: np.ndarray, rotary_dim: int, pairing: str) -> np.ndarray:
    """Band norms ``(heads, d_rot/2)`` from squared row norms ``(heads, d)``."""
    re, im = pair_indices(rotary_dim, pairing)
    return np.sqrt(row_sq[:, re] + row_sq[:, im])


def band_energy(wq: np.ndarray, wk: np.ndarray, rotary_dim: int, pairing: str) -> np.ndarray:
    """``E[h, b] = ||W_Q,h,b||_F * ||W_K,g(h),b||_F``, shape ``(heads, d_rot/2)``.

    ``wq`` is ``(heads, d, D)`` and ``wk`` ``(kv_heads, d, D)`` (query head ``h`` uses
    key head ``g(h)``, :func:`kv_group`). The product bounds the Frobenius norm of
    the band's bilinear form ``W_Q,b^T R(k theta_b) W_K,b`` at every offset ``k``.
    """
    return band_energy_from_rows(row_sq_norms(wq), row_sq_norms(wk), rotary_dim, pairing)


def band_energy_from_rows(q_sq: np.ndarray, k_sq: np.ndarray, rotary_dim: int, pairing: str) -> np.ndarray:
    """:func:`band_energy` from squared row norms ``(heads, d)`` and ``(kv_heads, d)``."""
    group = kv_group(q_sq.shape[0], k_sq.shape[0])
    return bands_from_rows(q_sq, rotary_dim, pairing) * bands_from_rows(k_sq, rotary_dim, pairing)[group]


def high_frequency_weights(bands: int) -> np.ndarray:
    """Weight of each band in the high-frequency half: 1 below the middle, 0.5 for a middle band, 0 above."""
    mid = (bands - 1) / 2
    b = np.arange(bands)
    return np.where(b < mid, 1.0, np.where(b == mid, 0.5, 0.0))


@dataclass(frozen=True)
class BandSummary:
    """Per-head summaries of band energy.

    Attributes
    ----------
    share
        ``E[h, b] / sum_b E[h, b]``, ``(heads, bands)``.
    dominant
        Band of largest energy per head.
    high_share
        Share of energy in the high-frequency half (bands ``b < (B - 1)/2``, half of a middle band).
    """

    share: np.ndarray
    dominant: np.ndarray
    high_share: np.ndarray


def summarize_bands(energy: np.ndarray) -> BandSummary:
    """Shares, dominant band and high-frequency share of a ``(heads, bands)`` energy array."""
    total = energy.sum(axis=1, keepdims=True)
    share = np.divide(energy, total, out=np.zeros_like(energy), where=total > 0)
    return BandSummary(share, np.argmax(energy, axis=1), share @ high_frequency_weights(energy.shape[1]))


def beyond_context(wavelength: np.ndarray, context: float) -> np.ndarray:
    """Bands whose wavelength ``2 pi / theta_b`` exceeds the context ``T``: ``(bands,)`` booleans.

    These bands never turn through a full rotation within ``T`` positions (Liu et
    al., ICLR 2024); a zero frequency (infinite wavelength) counts as beyond.
    """
    return np.asarray(wavelength, dtype=np.float64) > context


def context_boundary(beyond: np.ndarray) -> int | None:
    """The first band beyond the context (``None`` when every band turns fully within it)."""
    hits = np.flatnonzero(beyond)
    return int(hits[0]) if hits.size else None


def beyond_context_share(energy: np.ndarray, beyond: np.ndarray) -> np.ndarray:
    """Each head's share of band energy in the bands beyond the context, ``(heads,)``.

    The same shares as :attr:`BandSummary.share`, summed over the bands ``beyond``
    marks (:func:`beyond_context`); 0 for a head without band energy.
    """
    return summarize_bands(energy).share @ np.asarray(beyond, dtype=np.float64)


def probe_profile(
    q: np.ndarray,
    k: np.ndarray,
    inv_freq: np.ndarray,
    n: int,
    *,
    rotary_dim: int,
    pairing: str,
    scale: float,
    attention_factor: float = 1.0,
) -> np.ndarray:
    """Position-only logits ``f_h(k)``, ``k = j - i = -(n-1) .. n-1``, of probe queries and keys.

    Parameters
    ----------
    q, k
        Probe query ``(heads, d)`` and key ``(kv_heads, d)`` vectors, after biases and QK norms.
    inv_freq
        ``theta_b``, ``(d_rot / 2,)``.
    n
        Positions; the result has ``2n - 1`` offsets (the ``offsets`` form of
        :class:`~posviz.positional_scores.PositionalScores`).
    rotary_dim, pairing
        Rotated dimensions and their pairing (:data:`PAIRINGS`).
    scale
        The model's logit scale (``1/sqrt(d_h)``, Gemma 2/3: ``query_pre_attn_scalar^-1/2``).
    attention_factor
        ``a`` of YaRN/LongRoPE (cos and sin are multiplied by it), else 1.

    Returns
    -------
    numpy.ndarray
        ``(heads, 2n - 1)``.
    """
    group = kv_group(q.shape[0], k.shape[0])
    qb, qp = to_bands(q, rotary_dim, pairing)
    kb, kp = to_bands(k[group], rotary_dim, pairing)
    cross = qb * np.conj(kb)  # (heads, bands)
    offsets = offset_axis(n).astype(np.float64)
    phase = np.exp(-1j * np.outer(np.asarray(inv_freq, dtype=np.float64), offsets))  # (bands, 2n - 1)
    rotary = (cross @ phase).real * attention_factor**2
    return scale * (rotary + np.sum(qp * kp, axis=1, keepdims=True))


def band_logits(
    q: np.ndarray,
    k: np.ndarray,
    inv_freq: np.ndarray,
    *,
    rotary_dim: int,
    pairing: str,
    scale: float,
    attention_factor: float = 1.0,
) -> np.ndarray:
    """Logits ``(heads, n, n)`` of queries ``(n, heads, d)`` and keys ``(n, kv_heads, d)`` at positions ``0 .. n-1``.

    The band decomposition written out: ``s[h, i, j] = scale * (a^2 Re sum_b q_b(i) conj(k_b(j))
    e^{i (i - j) theta_b} + q_pass(i) . k_pass(j))``; equal to the model's rotated ``q_i . k_j``
    (the tests check it against transformers' attention).
    """
    group = kv_group(q.shape[1], k.shape[1])
    qb, qp = to_bands(q, rotary_dim, pairing)
    kb, kp = to_bands(k[:, group], rotary_dim, pairing)
    turn = np.exp(1j * np.outer(np.arange(len(q)), np.asarray(inv_freq, dtype=np.float64)))[:, None, :]  # (n, 1, bands)
    rotary = np.einsum("ihb,jhb->hij", qb * turn, np.conj(kb * turn)).real * attention_factor**2
    return scale * (rotary + np.einsum("ihd,jhd->hij", qp, kp))


@dataclass(frozen=True)
class ProfileSummary:
    """Per-head summaries of a causal probe profile over the keys a query sees (``k <= 0``).

    Attributes
    ----------
    peak_offset
        ``argmax_k f(k)`` over ``k = -(n-1) .. 0``.
    locality
        Width (in offsets) of the contiguous run around the peak where ``f - mean(f)``
        stays at or above half its value at the peak (shift-invariant, as softmax is).
    weight_prev
        Softmax weight of ``k = -1`` among ``k = -(n-1) .. 0`` (the last query's previous token).
    logit_prev
        ``f(-1)``.
    """

    peak_offset: np.ndarray
    locality: np.ndarray
    weight_prev: np.ndarray
    logit_prev: np.ndarray


def summarize_profiles(f: np.ndarray) -> ProfileSummary:
    """Peak offset, locality and previous-token weight of ``(heads, 2n - 1)`` profiles."""
    n = (f.shape[1] + 1) // 2
    seen = f[:, : n]  # k = -(n-1) .. 0
    peak = np.argmax(seen, axis=1)
    g = seen - seen.mean(axis=1, keepdims=True)
    width = np.empty(len(f), dtype=np.int64)
    for h, p in enumerate(peak):
        above = g[h] >= g[h, p] / 2
        lo, hi = p, p
        while lo > 0 and above[lo - 1]:
            lo -= 1
        while hi < n - 1 and above[hi + 1]:
            hi += 1
        width[h] = hi - lo + 1
    z = seen - seen.max(axis=1, keepdims=True)
    weights = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    prev = weights[:, n - 2] if n > 1 else np.full(len(f), np.nan)
    return ProfileSummary(peak - (n - 1), width, prev, seen[:, n - 2] if n > 1 else np.full(len(f), np.nan))
