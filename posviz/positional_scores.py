"""Positional score matrices: the one data type the analysis consumes.

A :class:`PositionalScores` is a stack of ``(heads, n, n)`` float64 matrices with
metadata. It is stored in whichever form is cheapest and exact:

* ``factored``: ``A_h = Q_h K_h^T`` (``E E^T``; the position-only part of a
  head's attention logits), never materialised at scale;
* ``offsets``: ``A_h[i, j] = f_h(k)`` with offset ``k = j - i`` (T5, ALiBi,
  RoPE, TISA), exactly Toeplitz;
* ``dense``: anything else (TUPE's untied term, small matrices).

This module holds the type and access to it (rows, dense matrices, pooled views
for plots) plus the embedding normalisation that :meth:`PositionalScores.from_embeddings`
applies. Everything analytical (diagonal sums, R^2, profiles, null baselines) is
in :mod:`posviz.toeplitz`; ARCHITECTURE.md shows where the type sits in the data flow.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

Form = Literal["factored", "offsets", "dense"]
Normalize = Literal["none", "cosine", "center"]
NORMALIZE_CHOICES: tuple[str, ...] = ("none", "cosine", "center")


class PosvizWarning(UserWarning):
    """A result is defined but deserves attention (e.g. zero variance)."""


def normalize_embeddings(embeddings: np.ndarray, normalize: str = "none") -> np.ndarray:
    """Transform ``E`` so that ``E E^T`` is the requested kind of similarity.

    Parameters
    ----------
    embeddings
        ``(n, d)`` position embeddings.
    normalize
        ``none`` (raw inner products), ``cosine`` (rows scaled to unit norm) or
        ``center`` (column means removed: ``P`` becomes a covariance-like Gram matrix).

    Returns
    -------
    numpy.ndarray
        ``(n, d)`` float64 (the input itself for ``none`` when it is float64).
    """
    e = np.asarray(embeddings, dtype=np.float64)
    if normalize == "none":
        return e
    if normalize == "center":
        return e - e.mean(axis=0, keepdims=True)
    if normalize == "cosine":
        norms = np.linalg.norm(e, axis=1, keepdims=True)
        if np.any(norms == 0):
            warnings.warn("some position vectors are zero; their cosine rows are set to 0", PosvizWarning, stacklevel=2)
        return np.divide(e, norms, out=np.zeros_like(e), where=norms > 0)
    raise ValueError(f"normalize must be one of {NORMALIZE_CHOICES}, got {normalize!r}")


def gram(embeddings: np.ndarray, normalize: str = "none") -> np.ndarray:
    """Dense ``P = E E^T`` (float64) after :func:`normalize_embeddings`."""
    e = normalize_embeddings(embeddings, normalize)
    return e @ e.T


@dataclass
class PositionalScores:
    """A stack of positional score matrices, shape ``(heads, n, n)``.

    Attributes
    ----------
    form
        ``factored``, ``offsets`` or ``dense``.
    n
        Number of positions.
    heads
        Number of matrices in the stack.
    left, right
        ``(heads, n, r)`` factors when ``form == "factored"`` (the scale, e.g.
        ``1/sqrt(d_h)``, is already folded into ``left``). ``right is left``
        marks Gram matrices ``E E^T``, which the analysis scores faster.
    offsets
        ``(heads, 2n - 1)`` values ``f(k)`` for ``k = -(n-1) .. n-1`` when
        ``form == "offsets"``.
    dense
        ``(heads, n, n)`` when ``form == "dense"``.
    meta
        Provenance and conventions: source, scheme, layer, rows kept, ...
    """

    form: Form
    n: int
    heads: int
    left: np.ndarray | None = None
    right: np.ndarray | None = None
    offsets: np.ndarray | None = None
    dense: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    # ---- constructors -------------------------------------------------
    @classmethod
    def from_factors(cls, left: np.ndarray, right: np.ndarray | None = None, **meta: Any) -> PositionalScores:
        """Stack from factors ``(heads, n, r)`` (or ``(n, r)`` for one matrix).

        ``right=None`` (or ``right`` the same array as ``left``) gives the Gram
        matrices ``Q_h Q_h^T``, stored with ``right is left``.
        """
        same = right is None or right is left
        q = np.asarray(left, dtype=np.float64)
        k = q if same else np.asarray(right, dtype=np.float64)
        if q.ndim == 2:
            q = q[None]
            k = q if same else k[None]
        if q.shape != k.shape:
            raise ValueError(f"factor shapes differ: {q.shape} vs {k.shape}")
        return cls("factored", q.shape[1], q.shape[0], left=q, right=k, meta=dict(meta))

    @classmethod
    def from_embeddings(cls, embeddings: np.ndarray, normalize: str = "none", **meta: Any) -> PositionalScores:
        """``P = E E^T`` as a one-head stack (``normalize`` as in :func:`normalize_embeddings`)."""
        e = normalize_embeddings(embeddings, normalize)
        return cls.from_factors(e, None, normalize=normalize, **meta)

    @classmethod
    def from_offsets(cls, values: np.ndarray, **meta: Any) -> PositionalScores:
        """Stack of Toeplitz matrices from ``f(k)``, shape ``(heads, 2n - 1)``."""
        f = np.atleast_2d(np.asarray(values, dtype=np.float64))
        if f.shape[1] % 2 != 1:
            raise ValueError("offset values need odd length 2n - 1")
        return cls("offsets", (f.shape[1] + 1) // 2, f.shape[0], offsets=f, meta=dict(meta))

    @classmethod
    def from_dense(cls, matrices: np.ndarray, **meta: Any) -> PositionalScores:
        """Stack from dense ``(heads, n, n)`` (or ``(n, n)``) matrices."""
        a = np.asarray(matrices, dtype=np.float64)
        if a.ndim == 2:
            a = a[None]
        if a.ndim != 3 or a.shape[1] != a.shape[2]:
            raise ValueError(f"expected (heads, n, n), got {a.shape}")
        return cls("dense", a.shape[1], a.shape[0], dense=a, meta=dict(meta))

    # ---- access ---------------------------------------------------------
    @property
    def is_gram(self) -> bool:
        """True for factored stacks of Gram matrices ``Q_h Q_h^T`` (``right is left``)."""
        return self.form == "factored" and self.right is self.left

    @property
    def rank(self) -> int | None:
        """Inner dimension ``r`` of the factors (``None`` unless factored)."""
        return int(self.left.shape[2]) if self.form == "factored" else None

    def rows(self, h: int, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of matrix ``h`` (memory ``O((stop - start) * n)``)."""
        if self.form == "factored":
            return self.left[h, start:stop] @ self.right[h].T
        if self.form == "offsets":
            n = self.n
            idx = np.arange(n)[None, :] - np.arange(start, stop)[:, None] + n - 1
            return self.offsets[h][idx]
        return self.dense[h, start:stop]

    def matrix(self, h: int = 0) -> np.ndarray:
        """Dense ``n x n`` matrix of head ``h`` (only for small ``n``)."""
        return self.rows(h, 0, self.n)

    def to_dense(self) -> np.ndarray:
        """All heads as a dense ``(heads, n, n)`` array."""
        return np.stack([self.matrix(h) for h in range(self.heads)])

    def pooled(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        """Block-averaged matrices for display, at most ``size x size`` per head.

        Returns
        -------
        pooled, edges
            ``(heads, m, m)`` block means and the ``m + 1`` block edges in
            positions. For factored stacks the block mean of ``q_i . k_j`` is
            exactly ``mean(q_I) . mean(k_J)``, so no ``n x n`` matrix is built.
        """
        n = self.n
        m = min(n, max(1, size))
        edges = np.linspace(0, n, m + 1).round().astype(int)
        if m == n:
            return self.to_dense(), edges
        if self.form == "factored":
            ql = np.stack([np.add.reduceat(self.left[h], edges[:-1], axis=0) for h in range(self.heads)])
            kr = np.stack([np.add.reduceat(self.right[h], edges[:-1], axis=0) for h in range(self.heads)])
            w = np.diff(edges)[None, :, None]
            return np.einsum("hir,hjr->hij", ql / w, kr / w), edges
        out = np.empty((self.heads, m, m))
        widths = np.diff(edges)
        for h in range(self.heads):
            for b in range(m):
                blk = self.rows(h, edges[b], edges[b + 1])
                out[h, b] = np.add.reduceat(blk, edges[:-1], axis=1).sum(axis=0) / (widths[b] * widths)
        return out, edges
