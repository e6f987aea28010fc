"""One RoPE layer's query/key weights, read tensor by tensor, and the map from an input to q and k.

:func:`read_layer` reads only the layer's q/k projections (split from a fused
projection where the model fuses them), their biases, the layer's input norm and
its QK norms (:mod:`posviz.read.rope_layouts` says where). :class:`RopeLayer`
then gives the *effective* per-head weights for band energy (norm weights folded
in, see docs/definitions.md) and the exact q/k of given inputs for probe profiles.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from posviz.errors import CheckpointError
from posviz.extract.base import read_finite
from posviz.read.rope_layouts import RopeLayout, kv_heads
from posviz.schemes.absolute import layer_norm
from posviz.schemes.rope_bands import rms_norm, row_sq_norms


@dataclass(frozen=True)
class Norm:
    """A norm as the model applies it: kind, weight, bias, epsilon."""

    kind: str
    weight: np.ndarray | None
    bias: np.ndarray | None
    eps: float

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.kind in ("rms", "rms1p"):
            return rms_norm(x, self.weight, self.eps, 1.0 if self.kind == "rms1p" else 0.0)
        return layer_norm(x, self.weight, self.bias, self.eps)

    @property
    def gain(self) -> np.ndarray | None:
        """The per-dimension factor the norm applies after normalising (``None``: 1)."""
        if self.weight is None:
            return None
        return 1.0 + self.weight if self.kind == "rms1p" else self.weight


@dataclass
class RopeLayer:
    """Query/key projections of one layer, per head.

    Attributes
    ----------
    wq, wk
        ``(heads, d, D)`` and ``(kv_heads, d, D)``.
    bq, bk
        ``(heads, d)``/``(kv_heads, d)`` biases, or ``None``.
    input_norm
        The norm in front of attention (``None``: the layer sees the raw residual stream).
    q_norm, k_norm, qk_norm_width
        QK norms and whether they act per head (``head``) or over all heads (``full``).
    tensors
        The checkpoint tensors read, for provenance.
    """

    wq: np.ndarray
    wk: np.ndarray
    bq: np.ndarray | None
    bk: np.ndarray | None
    input_norm: Norm | None
    q_norm: Norm | None
    k_norm: Norm | None
    qk_norm_width: str
    tensors: list[str]

    def effective_row_norms(self) -> tuple[np.ndarray, np.ndarray]:
        """Squared row norms ``(heads, d)``, ``(kv_heads, d)`` of :meth:`effective`'s weights, without building them."""
        gain_in = None if self.input_norm is None else self.input_norm.gain
        out = []
        for w, norm in ((self.wq, self.q_norm), (self.wk, self.k_norm)):
            sq = row_sq_norms(w, gain_in)
            if norm is not None and norm.gain is not None:
                sq = sq * (norm.gain.reshape(sq.shape) if self.qk_norm_width == "full" else norm.gain) ** 2
            out.append(sq)
        return out[0], out[1]

    def effective(self) -> tuple[np.ndarray, np.ndarray]:
        """Weights from the normalised input to the (QK-normed) q and k: ``diag(g_qk) W diag(g_in)``."""
        out = []
        for w, norm in ((self.wq, self.q_norm), (self.wk, self.k_norm)):
            if self.input_norm is not None and self.input_norm.gain is not None:
                w = w * self.input_norm.gain
            if norm is not None and norm.gain is not None:
                w = w * norm.gain.reshape(w.shape[0], w.shape[1], 1) if self.qk_norm_width == "full" else w * norm.gain[:, None]
            out.append(w)
        return out[0], out[1]

    def project(self, x: np.ndarray, *, normed: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """q ``(n, heads, d)`` and k ``(n, kv_heads, d)`` of layer inputs ``x`` ``(n, D)``, as the model computes them."""
        xh = x if normed or self.input_norm is None else self.input_norm(x)
        q = np.einsum("hdD,nD->nhd", self.wq, xh)
        k = np.einsum("hdD,nD->nhd", self.wk, xh)
        if self.bq is not None:
            q = q + self.bq
        if self.bk is not None:
            k = k + self.bk
        return self._qk_norm(q, self.q_norm), self._qk_norm(k, self.k_norm)

    def _qk_norm(self, v: np.ndarray, norm: Norm | None) -> np.ndarray:
        if norm is None:
            return v
        if self.qk_norm_width == "head":
            return norm(v)
        return norm(v.reshape(len(v), -1)).reshape(v.shape)


def _norm(ckpt, module: str | None, kind: str | None, eps: float, tensors: list[str]) -> Norm | None:
    if module is None or kind is None:
        return None
    if kind == "layer_plain":
        return Norm("layer", None, None, eps)
    weight = ckpt.require(module + ".weight", "norm weight")
    bias = ckpt.find(module + ".bias") if kind == "layer" else None
    tensors += [weight] + ([bias] if bias else [])
    return Norm(kind, read_finite(ckpt, weight), read_finite(ckpt, bias) if bias else None, eps)


def _split_fused(w: np.ndarray, layout: RopeLayout, heads: int, kv: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Query and key rows of a fused projection (weights ``(out, D)`` or biases ``(out,)``)."""
    tail = w.shape[1:]
    if layout.fused == "neox":  # HF GPTNeoXAttention: view(..., heads, 3 * d), then chunk into q, k, v
        per_head = w.reshape(heads, 3, d, *tail)
        return per_head[:, 0], per_head[:, 1]
    q = w[: heads * d].reshape(heads, d, *tail)
    k = w[heads * d : (heads + kv) * d].reshape(kv, d, *tail)
    return q, k


def read_layer(ckpt, layout: RopeLayout, config: Mapping[str, Any], layer: int, heads: int, head_dim: int) -> RopeLayer:
    """Read one layer's q/k projections, biases and norms (nothing else).

    Raises
    ------
    CheckpointError
        A tensor is missing or its shape does not match the config.
    """
    kv = kv_heads(config) if layout.fused != "neox" else heads
    tensors: list[str] = []
    eps = layout.eps(config)
    mats, biases = [], []
    for module in (layout.query, layout.key) if layout.key else (layout.query,):
        name = ckpt.require(layout.name(module, layer) + ".weight", "query/key projection")
        bias = ckpt.find(layout.name(module, layer) + ".bias")
        tensors += [name] + ([bias] if bias else [])
        mats.append(read_finite(ckpt, name))
        biases.append(read_finite(ckpt, bias) if bias else None)
    try:
        if layout.key:
            wq, wk = mats[0].reshape(heads, head_dim, -1), mats[1].reshape(kv, head_dim, -1)
            bq = None if biases[0] is None else biases[0].reshape(heads, head_dim)
            bk = None if biases[1] is None else biases[1].reshape(kv, head_dim)
        else:
            wq, wk = _split_fused(mats[0], layout, heads, kv, head_dim)
            bq, bk = (None, None) if biases[0] is None else _split_fused(biases[0], layout, heads, kv, head_dim)
    except ValueError as e:
        raise CheckpointError(f"{ckpt.source.label}: layer {layer}'s query/key shapes do not match "
                              f"{heads} heads x {head_dim} dims ({kv} key/value heads): {e}") from None
    module = layout.name(layout.input_norm, layer) if layout.input_norm else None
    input_norm = _norm(ckpt, module, layout.norm, eps, tensors)
    qk_kind = "rms1p" if layout.norm == "rms1p" else "rms"
    q_norm = _norm(ckpt, layout.name(layout.q_norm, layer) if layout.q_norm else None, qk_kind, eps, tensors)
    k_norm = _norm(ckpt, layout.name(layout.k_norm, layer) if layout.k_norm else None, qk_kind, eps, tensors)
    return RopeLayer(np.ascontiguousarray(wq), np.ascontiguousarray(wk), bq, bk, input_norm, q_norm, k_norm,
                     layout.qk_norm_width, tensors)
