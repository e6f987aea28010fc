"""The P tab's numbers for one model: P = E_P E_Pᵀ, its offset profile f̂(k), its Toeplitz projection and scores.

Everything comes from the scoring engine (:func:`posviz.toeplitz.engine.score_embeddings`)
and the core type's pooled views (:meth:`posviz.positional_scores.PositionalScores.pooled`);
the page only draws. The projection ``T(P)[i, j] = f̂(j - i)`` and the residual
``P - T(P)`` are not stored at full resolution: the browser builds them from P and
the profile, which the engine computed in float64. When P is pooled for display
(more than ``max_positions`` positions), the block means of ``T(P)`` are stored
instead, since pooling does not commute with projecting.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posviz.explorer.arrays import encode_array
from posviz.positional_scores import PositionalScores
from posviz.read.embeddings import PositionEmbeddings
from posviz.read.fingerprints import tensor_digest
from posviz.toeplitz.engine import score_embeddings

#: The score fields the page shows, headline (off-diagonal) first.
SCORE_FIELDS = ("toeplitzness_offdiag", "null_mean_offdiag", "null_std_offdiag", "excess_offdiag",
                "toeplitzness", "null_mean", "null_std", "excess")


def finite_or_none(value: Any) -> float | None:
    """A float for JSON, ``None`` for NaN and infinities (JSON has no NaN)."""
    value = float(value)
    return value if np.isfinite(value) else None


def embeddings_view(pe: PositionEmbeddings, *, max_positions: int = 512, null_draws: int = 10, seed: int = 0) -> dict[str, Any]:
    """What the P tab shows for one model.

    Parameters
    ----------
    pe
        Loaded position embeddings (:func:`posviz.read.embeddings.load_position_embeddings`).
    max_positions
        P is shown exactly up to this many positions, block-averaged above.
    null_draws, seed
        Sampled row permutations for the null's spread (its mean is exact), as in ``posviz toeplitzness``.

    Returns
    -------
    dict
        JSON-ready: ``P`` (``m x m`` float32, ``m = min(n, max_positions)``), block ``edges``,
        ``profile`` f̂(k) for ``k = -(n-1) .. n-1``, ``projection`` (pooled only), ``score``, ``provenance``.
    """
    score = score_embeddings(pe.matrix, null_draws=null_draws, seed=seed)
    stack = PositionalScores.from_embeddings(pe.matrix)
    pooled, edges = stack.pooled(max_positions)
    n, m = pe.n, pooled.shape[1]
    profile = np.asarray(score.profiles, dtype=np.float64)
    out: dict[str, Any] = {
        "model": pe.model,
        "n": n,
        "first_position": int(pe.positions[0]),
        "pooled": m < n,
        "edges": [int(e) for e in edges],
        "P": encode_array(pooled[0]),
        "profile": encode_array(profile),
        "projection": None,
        "score": {f: finite_or_none(getattr(score, f)) for f in SCORE_FIELDS},
        "null_method": score.null_method,
        "r2_method": score.r2_method,
        "peak_offset": int(score.peak_offsets()[0]),
        "provenance": {**pe.metadata(), "e_p_sha256": tensor_digest({"E_P": pe.matrix})},
    }
    if m < n:
        projected = PositionalScores.from_offsets(profile[None]).pooled(max_positions)[0][0]
        out["projection"] = encode_array(projected)
    else:
        idx = np.arange(n)[None, :] - np.arange(n)[:, None] + n - 1
        projected = profile[idx]
    out["color_ranges"] = robust_ranges(pooled[0], projected)
    return out


def robust_ranges(p: np.ndarray, projected: np.ndarray) -> dict[str, list[float]]:
    """Colour ranges that clip to the 1st-99th percentile, as ``posviz heatmap --robust`` does.

    P's diagonal (squared norms) stands far above the rest and would leave every other cell one colour;
    the projection shares P's range so that the two compare, and the residual's range is symmetric about 0.
    """
    lo, hi = np.percentile(p, [1, 99])
    r = float(np.percentile(np.abs(p - projected), 99)) or 1.0
    return {"p": [float(lo), float(hi)], "projection": [float(lo), float(hi)], "residual": [-r, r]}
