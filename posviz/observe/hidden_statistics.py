"""Per-layer statistics of hidden states over a corpus, from streaming sums: positional vectors, share, Toeplitzness, rank.

Definitions (docs/definitions.md, "Position inside the network"). ``h[b, i]`` is the
hidden state of one layer at position ``i`` of block ``b``; ``B`` blocks; the ``m``
kept positions ``i`` (special-token positions are left out). Following Song & Zhong
(2023), ``h[b, i] = mu + pos[i] + ctx[b] + resid[b, i]``:

* ``mu``: the mean over blocks and kept positions;
* **positional vectors** ``v[i] = pos[i] = mean_b h[b, i] - mu`` (rows of ``V``, ``(m, d)``; centred over positions);
* ``ctx[b] = m[b] - mu``, ``m[b]`` the mean of block ``b`` over the kept positions.

Sums of squares around ``mu``: ``total = sum_bi ||h[b, i] - mu||**2``,
``between = B sum_i ||v[i]||**2``, ``context = m sum_b ||ctx[b]||**2``, and
``within = sum_bi ||h[b, i] - m[b]||**2 = total - context``.

* **positional share** ``between / total``: the fraction of the variance explained by position;
* its **null** ``within / (B total)``: the exact mean of the share when the positions of
  each block are shuffled (independently per block), i.e. when position carries nothing
  (:func:`share_null`);
* **Toeplitzness** of ``P = V V^T`` through the scoring engine
  (:func:`posviz.toeplitz.engine.score_embeddings`: both variants, row-permutation null of ``V``, excess);
* **rank90**: the fewest principal components of ``V`` holding 90 % of ``||V||_F**2``;
  **stable rank** ``||V||_F**2 / ||V||_2**2``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from posviz.observe.hidden_sums import HiddenLayerSums


@dataclass(frozen=True)
class HiddenLayer:
    """The statistics of one layer (see the module docstring)."""

    positional_share: float
    positional_share_null: float
    context_share: float
    toeplitzness: float
    toeplitzness_offdiag: float
    toeplitzness_null: float
    toeplitzness_null_offdiag: float
    toeplitzness_null_std_offdiag: float
    excess: float
    excess_offdiag: float
    rank90: int
    stable_rank: float
    positional_norm: float  # root mean square ||v[i]||
    state_norm: float  # root mean square ||h[b, i] - mu||


def positional_vectors(sums: HiddenLayerSums) -> np.ndarray:
    """``V`` ``(m, d)``: the mean hidden state at each kept position, minus their mean over positions."""
    means = sums.total[sums.kept] / sums.blocks
    return means - means.mean(axis=0)


def sums_of_squares(sums: HiddenLayerSums) -> tuple[float, float, float]:
    """``(total, between, context)`` sums of squares around the grand mean (module docstring)."""
    b, m = sums.blocks, len(sums.kept)
    grand = sums.total[sums.kept].sum(axis=0)
    shift = float(grand @ grand) / (b * m)  # B m ||mu||**2
    total = float(sums.total_sq[sums.kept].sum()) - shift
    v = positional_vectors(sums)
    between = b * float((v * v).sum())
    context = m * sums.block_mean_sq - shift
    return max(total, 0.0), between, max(context, 0.0)


def share_null(total: float, context: float, blocks: int) -> float:
    """Exact mean positional share when the kept positions of every block are shuffled, each block on its own.

    Notes
    -----
    With ``S_i = sum_b h[b, pi_b(i)]``, ``E ||S_i||**2 = (1/m) sum_bj ||h[b, j]||**2 + ||sum_b m[b]||**2 -
    sum_b ||m[b]||**2`` for every ``i``, so the expected ``between`` sum of squares is
    ``within / B``; ``total`` does not move under the shuffle.
    """
    return 1.0 if total <= 0 else (total - context) / (blocks * total)


def rank_summary(v: np.ndarray, fraction: float = 0.9) -> tuple[int, float]:
    """``(rank90, stable rank)`` of ``v``: fewest components holding ``fraction`` of ``||v||_F**2``, and ``||v||_F**2/||v||_2**2``."""
    energy = np.linalg.svd(v, compute_uv=False) ** 2
    total = float(energy.sum())
    if total <= 0:
        return 0, 0.0
    rank = int(np.searchsorted(np.cumsum(energy) / total, fraction - 1e-12) + 1)
    return min(rank, len(energy)), total / float(energy[0])


def layer_statistics(sums: HiddenLayerSums, *, null_draws: int = 10, seed: int = 0) -> HiddenLayer:
    """Every statistic of one layer.

    Parameters
    ----------
    sums
        The layer's streaming sums.
    null_draws, seed
        Row permutations of ``V`` for the spread of the Toeplitzness null (its mean is exact; below 2 draws, no spread).
    """
    from posviz.positional_scores import PositionalScores
    from posviz.toeplitz.engine import score

    v = positional_vectors(sums)
    total, between, context = sums_of_squares(sums)
    n_states = sums.blocks * len(sums.kept)
    nan = float("nan")
    if len(v) >= 2 and float(np.abs(v).max()) > 0:
        # the one-head case of the engine, as score_embeddings, with the exact null mean whatever the draws
        s = score(PositionalScores.from_embeddings(v), null=True, null_draws=null_draws if null_draws > 1 else 0, seed=seed)[0]
        tz = (float(s.toeplitzness), float(s.toeplitzness_offdiag), float(s.null_mean), float(s.null_mean_offdiag),
              float(s.null_std_offdiag), float(s.excess), float(s.excess_offdiag))
    else:  # no positional vectors to score (one position, or every position alike)
        tz = (nan,) * 7
    rank90, stable = rank_summary(v)
    return HiddenLayer(
        positional_share=between / total if total > 0 else nan,
        positional_share_null=share_null(total, context, sums.blocks) if total > 0 else nan,
        context_share=context / total if total > 0 else nan,
        toeplitzness=tz[0], toeplitzness_offdiag=tz[1], toeplitzness_null=tz[2], toeplitzness_null_offdiag=tz[3],
        toeplitzness_null_std_offdiag=tz[4], excess=tz[5], excess_offdiag=tz[6],
        rank90=rank90, stable_rank=stable,
        positional_norm=float(np.sqrt((v * v).sum() / len(v))),
        state_norm=float(np.sqrt(total / n_states)),
    )
