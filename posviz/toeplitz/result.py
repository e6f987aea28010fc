"""The result of scoring a stack: :class:`ToeplitzScore`, one value per head.

Definitions (ARCHITECTURE.md): Toeplitzness R^2 in two variants, ``full`` (all
``n**2`` entries) and ``exclude_diagonal`` (the main diagonal left out of both
sums); the null baseline, R^2 of the same matrix built from row-permuted
position embeddings; ``excess = (R^2 - null) / (1 - null)``; the offset profile
``f_hat(k)``, the mean along the diagonal at offset ``k = j - i``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

#: The fields of an E_P score's JSON, in order (``posviz toeplitzness`` and the score cache).
DICT_FIELDS = (
    "toeplitzness",
    "toeplitzness_offdiag",
    "null_mean",
    "null_std",
    "null_mean_offdiag",
    "null_std_offdiag",
    "excess",
    "excess_offdiag",
    "normalize",
    "null_draws",
    "seed",
    "null_method",
)
_PER_HEAD = DICT_FIELDS[:8]


def excess_over_null(r2: np.ndarray, null: np.ndarray) -> np.ndarray:
    """``(R^2 - null) / (1 - null)``, NaN where the null is missing or ``>= 1``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.isfinite(null) & (null < 1.0), (r2 - null) / (1.0 - null), np.nan)


@dataclass(frozen=True, eq=False)
class ToeplitzScore:
    """Toeplitzness of each matrix of a stack, with its null baseline and offset profile.

    Scoring a stack (:func:`posviz.toeplitz.engine.score`) gives arrays of shape
    ``(heads,)``; ``score[h]`` is head ``h`` alone, with floats, which is what
    :func:`posviz.toeplitz.engine.score_embeddings` returns for ``P = E E^T``.

    Attributes
    ----------
    toeplitzness, toeplitzness_offdiag
        R^2, full and ``exclude_diagonal`` variants.
    null_mean, null_std
        Null baseline of the full-variant R^2: its exact mean over all ``n!`` row
        permutations of the embeddings (closed form, :mod:`posviz.toeplitz.null`)
        and its standard deviation over ``null_draws`` seeded random
        permutations. NaN where not computed or where no null applies (offset
        and dense stacks).
    null_mean_offdiag, null_std_offdiag
        The same for the off-diagonal variant.
    excess, excess_offdiag
        ``(R^2 - null) / (1 - null)`` for each variant (NaN without a null).
    normalize
        How ``E`` was normalised before forming ``P`` (E_P scores).
    null_draws, seed
        Sampled-null settings (reproducible).
    null_method
        How the baseline was computed, in words (for outputs and reports).
    r2_method
        How R^2 was computed (closed form, two-pass over row blocks, or exact by
        construction).
    profiles
        ``(heads, 2n - 1)`` offset profiles ``f_hat(k)``, ``k = -(n-1) .. n-1``
        (``(2n - 1,)`` for one head).
    """

    toeplitzness: np.ndarray | float
    toeplitzness_offdiag: np.ndarray | float
    null_mean: np.ndarray | float
    null_std: np.ndarray | float
    null_mean_offdiag: np.ndarray | float
    null_std_offdiag: np.ndarray | float
    excess: np.ndarray | float
    excess_offdiag: np.ndarray | float
    normalize: str = "none"
    null_draws: int = 0
    seed: int = 0
    null_method: str = ""
    r2_method: str = ""
    profiles: np.ndarray | None = dataclasses.field(default=None, repr=False)

    @property
    def heads(self) -> int:
        """Number of heads (1 for a single head)."""
        return int(np.size(self.toeplitzness))

    @property
    def n(self) -> int:
        """Number of positions."""
        return (np.shape(self.profiles)[-1] + 1) // 2

    def __getitem__(self, h: int) -> ToeplitzScore:
        """Head ``h`` alone: floats instead of arrays."""
        values = {f: float(np.atleast_1d(getattr(self, f))[h]) for f in _PER_HEAD}
        profiles = None if self.profiles is None else np.atleast_2d(self.profiles)[h]
        return dataclasses.replace(self, **values, profiles=profiles)

    def peak_offsets(self) -> np.ndarray:
        """Per head, the offset ``k`` (``|k| <= n/2``) where ``f_hat(k)`` is largest."""
        n = self.n
        half = n // 2
        window = np.atleast_2d(self.profiles)[:, n - 1 - half : n + half]
        return np.argmax(window, axis=1) - half

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON dictionary of :data:`DICT_FIELDS` (floats for one head, lists for a stack)."""
        out: dict[str, Any] = {}
        for f in DICT_FIELDS:
            v = getattr(self, f)
            out[f] = v.tolist() if isinstance(v, np.ndarray) else v
        return out

    def rows(self, *, profiles: bool = False) -> list[dict[str, Any]]:
        """One plain dict per head (JSON-ready), as ``posviz heads`` writes them."""
        col = {f: np.atleast_1d(getattr(self, f)) for f in _PER_HEAD}
        prof = np.atleast_2d(self.profiles)
        peak, n = self.peak_offsets(), self.n
        out = []
        for h in range(self.heads):
            r: dict[str, Any] = {
                "head": h,
                **{f: float(col[f][h]) for f in ("toeplitzness", "toeplitzness_offdiag", "null_mean", "null_mean_offdiag")},
                **{f: float(col[f][h]) for f in ("null_std", "null_std_offdiag", "excess", "excess_offdiag")},
                "null_method": self.null_method,
                "r2_method": self.r2_method,
                "null_draws": self.null_draws,
                "seed": self.seed,
                "peak_offset": int(peak[h]),
                "f_hat_0": float(prof[h, n - 1]),
            }
            if profiles:
                r["profile"] = [float(v) for v in prof[h]]
            out.append(r)
        return out
