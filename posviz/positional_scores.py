"""Positional score matrices: the one data type the analysis consumes.

A :class:`PositionalScores` is a stack of ``(heads, n, n)`` float64 matrices with
metadata. It is stored in whichever form is cheapest and exact:

* ``factored``: ``A_h = Q_h K_h^T`` (``E E^T``; the position-only part of a
  head's attention logits), never materialised at scale;
* ``offsets``: ``A_h[i, j] = f_h(j - i)`` (T5, ALiBi, RoPE, TISA), exactly Toeplitz;
* ``dense``: anything else (TUPE's untied term, small matrices).

Scoring, profiles and pooled views for plots work on every form without building
the ``n x n`` matrices of factored or offset stacks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from posviz.toeplitz import core as tz

Form = Literal["factored", "offsets", "dense"]


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
        ``1/sqrt(d_h)``, is already folded into ``left``).
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
        """Stack from factors ``(heads, n, r)`` (or ``(n, r)`` for one matrix)."""
        q = np.asarray(left, dtype=np.float64)
        k = q if right is None else np.asarray(right, dtype=np.float64)
        if q.ndim == 2:
            q, k = q[None], k[None]
        if q.shape != k.shape:
            raise ValueError(f"factor shapes differ: {q.shape} vs {k.shape}")
        return cls("factored", q.shape[1], q.shape[0], left=q, right=k, meta=dict(meta))

    @classmethod
    def from_embeddings(cls, embeddings: np.ndarray, normalize: str = "none", **meta: Any) -> PositionalScores:
        """``P = E E^T`` as a one-head stack (``normalize`` as in :func:`posviz.toeplitz.core.gram`)."""
        e = tz.normalize_embeddings(embeddings, normalize)
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

    def diagonal_sums(self, h: int) -> tz.DiagonalSums:
        """Diagonal statistics of head ``h`` in closed form where possible."""
        if self.form == "factored":
            return tz.diagonal_sums_factored(self.left[h], self.right[h])
        if self.form == "offsets":
            n, f = self.n, self.offsets[h]
            counts = n - np.abs(np.arange(1 - n, n))
            scale = float(np.max(np.abs(f))) or 1.0
            g = f / scale
            sums = g * counts
            return tz.DiagonalSums(n, sums, float(sums.sum()), float((g * g * counts).sum()), float(n * g[n - 1] ** 2), scale)
        return tz.diagonal_sums_dense(self.dense[h])

    # ---- analysis -------------------------------------------------------
    def toeplitzness(self, *, exclude_diagonal: bool = False, method: tz.Method = "auto") -> np.ndarray:
        """Toeplitzness R^2 of every head, shape ``(heads,)``.

        ``method`` as in :func:`posviz.toeplitz.core.toeplitzness`: ``auto`` sums squared
        deviations over row blocks when that is cheap (dense stacks, small
        factored ones) and uses the closed form otherwise; offset stacks are
        exactly Toeplitz and always use their closed form.
        """
        out = np.empty(self.heads)
        for h in range(self.heads):
            ds = self.diagonal_sums(h)
            if self.form == "offsets" or method == "closed":
                exact = False
            elif method == "exact" or self.form == "dense":
                exact = True
            else:
                exact = self.n * self.n * self.left.shape[2] <= tz.EXACT_LIMIT
            if exact:
                out[h] = tz.toeplitzness_from_rows(self.n, self._scaled_rows(h, ds.scale), ds, exclude_diagonal=exclude_diagonal)
            else:
                out[h] = tz.toeplitzness_from_sums(ds, exclude_diagonal=exclude_diagonal)
        return out

    def _scaled_rows(self, h: int, scale: float):
        """``rows(i0, i1) -> A_h[i0:i1] / scale`` without overflow for huge factors."""
        if self.form == "factored":
            ml, mr = (float(np.max(np.abs(x))) or 1.0 for x in (self.left[h], self.right[h]))
            ql, kr = self.left[h] / ml, self.right[h] / mr
            factor = ml * mr / scale
            return lambda i0, i1: (ql[i0:i1] @ kr.T) * factor
        return lambda i0, i1: self.rows(h, i0, i1) / scale

    def profile(self, h: int, *, spread: bool = True, block: int = 512) -> tz.DiagonalProfile:
        """Mean and spread along each offset ``k = j - i`` of head ``h``."""
        ds = self.diagonal_sums(h)
        counts = ds.counts
        mean = ds.sums * ds.scale / counts
        std = None
        if spread:
            if self.form == "offsets":
                std = np.zeros_like(mean)
            else:
                sq = tz.diagonal_sumsq_from_rows(self.n, lambda i0, i1: self.rows(h, i0, i1), block, center=mean)
                std = np.sqrt(sq / counts)
        return tz.DiagonalProfile(ds.offsets, mean, std, counts)

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
