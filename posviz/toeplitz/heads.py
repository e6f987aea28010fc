"""Scores of every head of a layer: Toeplitzness, null baseline, offset profile.

All heads of a factored stack are scored together from one contiguous
``(heads, 2, r, n)`` array: zero-padded real FFTs of every query and key row
(positions on the contiguous axis), a per-head sum of the cross-spectra, one
inverse FFT per head, and one batched product for all Gram matrices. This gives exactly
the statistics of :func:`posviz.toeplitz.core.diagonal_sums_factored` for each head
(the tests check both against the dense computation) at a fraction of the
cost of calling it head by head. The null baseline of a factored head is the
exact mean over row permutations (:mod:`posviz.toeplitz.null`), optionally with
sampled permutations for its spread.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from posviz.positional_scores import PositionalScores
from posviz.toeplitz import core as tz
from posviz.toeplitz import null as perm


@dataclass
class HeadScores:
    """Scores of the heads of one layer.

    Attributes
    ----------
    toeplitzness, toeplitzness_offdiag
        ``(heads,)`` R^2, full and off-diagonal variants.
    null_mean, null_mean_offdiag
        Exact permutation-null means (NaN where no null applies).
    null_std, null_std_offdiag
        Spread over ``null_draws`` sampled permutations (NaN when none drawn).
    profiles
        ``(heads, 2n - 1)`` offset profiles ``f_hat(k)``, ``k = -(n-1) .. n-1``.
    null_method
        How the null was obtained, in words.
    null_draws, seed
        Sampled-null settings.
    r2_method
        How R^2 was computed (closed form, two-pass over row blocks, or exact
        by construction).
    """

    toeplitzness: np.ndarray
    toeplitzness_offdiag: np.ndarray
    null_mean: np.ndarray
    null_mean_offdiag: np.ndarray
    null_std: np.ndarray
    null_std_offdiag: np.ndarray
    profiles: np.ndarray
    null_method: str
    null_draws: int
    seed: int
    r2_method: str = "closed form (FFT diagonal sums)"

    @property
    def heads(self) -> int:
        """Number of heads."""
        return int(self.toeplitzness.shape[0])

    @property
    def n(self) -> int:
        """Number of positions."""
        return (self.profiles.shape[1] + 1) // 2

    def excess(self, *, exclude_diagonal: bool = False) -> np.ndarray:
        """``(R^2 - null) / (1 - null)`` per head (NaN without a null)."""
        r2 = self.toeplitzness_offdiag if exclude_diagonal else self.toeplitzness
        null = self.null_mean_offdiag if exclude_diagonal else self.null_mean
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(np.isfinite(null) & (null < 1.0), (r2 - null) / (1.0 - null), np.nan)

    def peak_offsets(self) -> np.ndarray:
        """Per head, the offset ``k`` (``|k| <= n/2``) where ``f_hat(k)`` is largest."""
        n = self.n
        half = n // 2
        window = self.profiles[:, n - 1 - half : n + half]
        return np.argmax(window, axis=1) - half

    def rows(self, *, profiles: bool = False) -> list[dict[str, Any]]:
        """One plain dict per head (JSON-ready)."""
        ex, exo, peak = self.excess(), self.excess(exclude_diagonal=True), self.peak_offsets()
        out = []
        for h in range(self.heads):
            r: dict[str, Any] = {
                "head": h,
                "toeplitzness": float(self.toeplitzness[h]),
                "toeplitzness_offdiag": float(self.toeplitzness_offdiag[h]),
                "null_mean": float(self.null_mean[h]),
                "null_mean_offdiag": float(self.null_mean_offdiag[h]),
                "null_std": float(self.null_std[h]),
                "null_std_offdiag": float(self.null_std_offdiag[h]),
                "excess": float(ex[h]),
                "excess_offdiag": float(exo[h]),
                "null_method": self.null_method,
                "r2_method": self.r2_method,
                "null_draws": self.null_draws,
                "seed": self.seed,
                "peak_offset": int(peak[h]),
                "f_hat_0": float(self.profiles[h, self.n - 1]),
            }
            if profiles:
                r["profile"] = [float(v) for v in self.profiles[h]]
            out.append(r)
        return out


def stacked_factors(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """``(heads, n, r)`` factors -> one contiguous ``(heads, 2, r, n)`` array: queries, then keys, positions last.

    This is the layout :func:`score_stacked` takes.
    """
    h, n, r = left.shape
    z = np.empty((h, 2, r, n))
    z[:, 0] = np.swapaxes(left, 1, 2)
    z[:, 1] = np.swapaxes(right, 1, 2)
    return z


def _gram(z: np.ndarray) -> np.ndarray:
    """``[Q_h K_h]^T [Q_h K_h]`` of every head, shape ``(heads, 2r, 2r)``."""
    h, _, r, n = z.shape
    zv = z.reshape(h, 2 * r, n)
    return np.einsum("hin,hjn->hij", zv, zv, optimize=True)


def _safe_gram(gram: np.ndarray) -> bool:
    """True when every factor's squared column norms lie well inside float64's range.

    Then ``max |q| <= 1e60`` and ``max |q| >= 1e-60 / sqrt(n)``, so ``sum A**2`` can
    neither overflow nor underflow and no rescaled copy is needed.
    """
    d = np.diagonal(gram, axis1=1, axis2=2)
    r = d.shape[1] // 2
    peak = np.stack([d[:, :r].max(axis=1), d[:, r:].max(axis=1)])
    return bool(np.all(np.isfinite(peak) & (peak < 1e120) & (peak > 1e-120)))


def _rescaled(z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Copy of ``z`` with each head's factors divided by their max |entry|; returns (z, sq, sk)."""
    m = np.max(np.abs(z), axis=(2, 3))  # (heads, 2)
    m = np.where(np.isfinite(m) & (m > 0), m, 1.0)
    return z / m[:, :, None, None], m[:, 0], m[:, 1]


def _r2_pair(ds: tz.DiagonalSums) -> tuple[float, float]:
    full = tz.toeplitzness_from_sums(ds)
    off = tz.toeplitzness_from_sums(ds, exclude_diagonal=True) if ds.n >= 2 else float("nan")
    return full, off


def score_stacked(z: np.ndarray, *, null_draws: int = 0, seed: int = 0, method: tz.Method = "auto") -> HeadScores:
    """Score all heads ``A_h = Q_h K_h^T`` given their stacked factors.

    Parameters
    ----------
    z
        ``(heads, 2, r, n)``, contiguous: ``z[h, 0, :, i]`` is position ``i``'s
        query vector of head ``h`` and ``z[h, 1, :, i]`` its key vector.
        :func:`stacked_factors` makes it from ``(heads, n, r)`` factors;
        :meth:`posviz.extract.absolute.AbsoluteHeads.score` projects straight into it.
    null_draws, seed, method
        See :func:`score_layer`.
    """
    from threadpoolctl import threadpool_limits

    h, n = z.shape[0], z.shape[3]
    # The per-head products are small (d_h x n by n x d_h): extra BLAS threads only add
    # synchronisation, and on a busy machine each call can stall for a whole time slice.
    with threadpool_limits(limits=1, user_api="blas"):
        gram = _gram(z)  # one batched product gives Q^T Q, K^T K and K^T Q
        scale = np.ones(h)
        if not _safe_gram(gram):
            z, sq, sk = _rescaled(z)  # huge or tiny values: work on a rescaled copy
            scale = sq * sk
            gram = _gram(z)
        sums = tz.diagonal_sums_stacked(z)
        moments = perm.moments_factored(z[:, 0], z[:, 1], gram=gram)
    stats = [
        tz.DiagonalSums(n, sums[i], float(moments.total[i]), float(moments.total_sq[i]), float(moments.diag_sq[i]), float(scale[i]))
        for i in range(h)
    ]
    r = z.shape[2]
    exact = method == "exact" or (method == "auto" and n * n * r <= tz.EXACT_LIMIT)
    if exact:  # small problem: sum squared deviations over row blocks (no cancellation)
        r2 = np.array([_r2_pair_rows(z[i, 0].T, z[i, 1].T, ds) for i, ds in enumerate(stats)]).reshape(h, 2)
    else:
        r2 = np.array([_r2_pair(ds) for ds in stats]).reshape(h, 2)
    counts = n - np.abs(np.arange(1 - n, n))
    profiles = sums * scale[:, None] / counts
    null_mean = np.atleast_1d(perm.expected_toeplitzness(moments))
    null_off = np.atleast_1d(perm.expected_toeplitzness(moments, exclude_diagonal=True)) if n >= 2 else np.full(h, np.nan)
    method_null = "exact mean over all row permutations of E_P (closed form)"
    std = std_off = np.full(h, np.nan)
    if null_draws > 0:
        std, std_off = _sampled_null_std(z, stats, null_draws, seed)
        method_null += f"; sd from {null_draws} seeded permutations"
    how = "two-pass over row blocks" if exact else "closed form (FFT diagonal sums)"
    return HeadScores(r2[:, 0], r2[:, 1], null_mean, null_off, std, std_off, profiles, method_null, int(null_draws), int(seed), how)


def _r2_pair_rows(q: np.ndarray, k: np.ndarray, ds: tz.DiagonalSums) -> tuple[float, float]:
    """Both R^2 variants by summing squared deviations of ``q @ k.T`` (in the units of ``ds``)."""
    rows = lambda i0, i1: q[i0:i1] @ k.T  # noqa: E731
    full = tz.toeplitzness_from_rows(ds.n, rows, ds)
    off = tz.toeplitzness_from_rows(ds.n, rows, ds, exclude_diagonal=True) if ds.n >= 2 else float("nan")
    return full, off


def score_layer(stack: PositionalScores, *, null_draws: int = 0, seed: int = 0, method: tz.Method = "auto") -> HeadScores:
    """Toeplitzness, null baseline and offset profile of every head of a stack.

    Parameters
    ----------
    stack
        A :class:`~posviz.positional_scores.PositionalScores`. Factored stacks (absolute
        models, DeBERTa's Gram matrix) get the exact permutation-null mean;
        offset stacks (T5, ALiBi, RoPE) are Toeplitz by construction and have no
        null (NaN).
    null_draws
        Sampled row permutations (seeded) for the null's standard deviation; 0
        reports the exact mean only. Each draw costs about one FFT pass.
    seed
        Seed of ``numpy.random.default_rng`` for the draws.
    method
        R^2 of factored heads, as in :func:`posviz.toeplitz.core.toeplitzness`:
        ``closed`` (from the FFT diagonal sums), ``exact`` (a second pass over
        row blocks, no cancellation), ``auto`` (``exact`` when
        ``n^2 r <= posviz.toeplitz.core.EXACT_LIMIT``, else ``closed``). Dense stacks
        always take the second pass; offset stacks are exactly Toeplitz.
    """
    if stack.form == "factored":
        return score_stacked(stacked_factors(stack.left, stack.right), null_draws=null_draws, seed=seed, method=method)
    h, n = stack.heads, stack.n
    nan = np.full(h, np.nan)
    sums = [stack.diagonal_sums(i) for i in range(h)]
    if stack.form == "offsets":
        # Every diagonal is constant, so the residual is exactly zero: R^2 = 1 (a constant
        # matrix also gets 1.0 by the zero-variance convention).
        r2, how = np.ones((h, 2)), "exact (Toeplitz by construction)"
    else:  # dense: the second pass is as cheap as the first
        r2 = np.array([_r2_pair_dense(stack.dense[i], ds) for i, ds in enumerate(sums)]).reshape(h, 2)
        how = "two-pass over row blocks"
    counts = n - np.abs(np.arange(1 - n, n))
    profiles = np.stack([ds.sums * ds.scale / counts for ds in sums])
    method = "none (Toeplitz by construction)" if stack.form == "offsets" else "none"
    return HeadScores(r2[:, 0], r2[:, 1], nan, nan.copy(), nan.copy(), nan.copy(), profiles, method, 0, int(seed), how)


def _r2_pair_dense(a: np.ndarray, ds: tz.DiagonalSums) -> tuple[float, float]:
    rows = lambda i0, i1: a[i0:i1] / ds.scale  # noqa: E731
    full = tz.toeplitzness_from_rows(ds.n, rows, ds)
    off = tz.toeplitzness_from_rows(ds.n, rows, ds, exclude_diagonal=True) if ds.n >= 2 else float("nan")
    return full, off


def _sampled_null_std(z: np.ndarray, stats: list[tz.DiagonalSums], draws: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Standard deviation of R^2 over ``draws`` seeded row permutations (one permutation for all heads).

    ``z`` is in the (rescaled) units of ``stats``. Permuting the rows of both
    factors changes only the diagonal sums ``S_k``; the other statistics are reused.
    """
    n = z.shape[3]
    rng = np.random.default_rng(seed)
    vals = np.empty((draws, z.shape[0], 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tz.PosvizWarning)
        for t in range(draws):
            sums = tz.diagonal_sums_stacked(np.ascontiguousarray(z[..., rng.permutation(n)]))
            for i, ds in enumerate(stats):
                vals[t, i] = _r2_pair(tz.DiagonalSums(n, sums[i], ds.total, ds.total_sq, ds.diag_sq, ds.scale))
    ddof = 1 if draws > 1 else 0
    sd = vals.std(axis=0, ddof=ddof)
    return sd[:, 0], sd[:, 1]
