"""Hidden-state statistics from streaming sums (posviz/observe/hidden_statistics.py, probe.py) against direct and exhaustive computations."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from posviz.observe.hidden_statistics import (
    layer_statistics,
    positional_vectors,
    rank_summary,
    share_null,
    sums_of_squares,
)
from posviz.observe.hidden_sums import HiddenLayerSums, probe_plan
from posviz.observe.probe import position_probe, split_blocks
from posviz.toeplitz.engine import score_embeddings


def _sums(h: np.ndarray, kept: np.ndarray | None = None) -> HiddenLayerSums:
    """Streaming sums of ``h`` ``(B, n, d)``, computed the way the accumulator does, in numpy."""
    kept = np.arange(h.shape[1]) if kept is None else kept
    means = h[:, kept].mean(axis=1)
    return HiddenLayerSums(blocks=h.shape[0], total=h.sum(axis=0), total_sq=(h**2).sum(axis=(0, 2)),
                           block_mean_sq=float((means**2).sum()), kept=kept)


def _share(h: np.ndarray) -> float:
    """Between-position over total sum of squares, entry by entry."""
    mu = h.mean(axis=(0, 1))
    pos = h.mean(axis=0) - mu
    return h.shape[0] * float((pos**2).sum()) / float(((h - mu) ** 2).sum())


def test_decomposition_matches_direct_sums_of_squares():
    rng = np.random.default_rng(0)
    h = rng.normal(size=(7, 9, 5)) + np.linspace(0, 3, 9)[None, :, None] + rng.normal(size=(7, 1, 5))
    kept = np.arange(1, 8)
    s = _sums(h, kept)
    x = h[:, kept]
    mu = x.mean(axis=(0, 1))
    v = x.mean(axis=0) - mu
    np.testing.assert_allclose(positional_vectors(s), v, atol=1e-12)
    total, between, context = sums_of_squares(s)
    assert total == pytest.approx(float(((x - mu) ** 2).sum()), rel=1e-12)
    assert between == pytest.approx(7 * float((v**2).sum()), rel=1e-12)
    assert context == pytest.approx(7 * float(((x.mean(axis=1) - mu) ** 2).sum()), rel=1e-12)
    stats = layer_statistics(s, null_draws=0)
    assert stats.positional_share == pytest.approx(_share(x), rel=1e-12)


def test_share_null_is_the_exact_mean_over_every_within_block_shuffle():
    """B = 2 blocks of m = 4 positions: all 4!**2 = 576 shuffles, each block permuted on its own."""
    rng = np.random.default_rng(1)
    h = rng.normal(size=(2, 4, 3)) + np.arange(4)[None, :, None] * 0.7
    perms = list(itertools.permutations(range(4)))
    shares = [_share(np.stack([h[0, list(p)], h[1, list(q)]])) for p in perms for q in perms]
    total, _, context = sums_of_squares(_sums(h))
    assert share_null(total, context, 2) == pytest.approx(float(np.mean(shares)), rel=1e-12)
    assert layer_statistics(_sums(h), null_draws=0).positional_share_null == pytest.approx(float(np.mean(shares)), rel=1e-12)


def test_one_block_share_is_one_and_so_is_its_null():
    h = np.random.default_rng(2).normal(size=(1, 6, 4))
    s = layer_statistics(_sums(h), null_draws=0)
    assert s.positional_share == pytest.approx(1.0, abs=1e-12) and s.positional_share_null == pytest.approx(1.0, abs=1e-12)


def test_toeplitzness_is_the_engine_score_of_the_positional_vectors():
    rng = np.random.default_rng(3)
    h = rng.normal(size=(5, 12, 6))
    s = _sums(h)
    got = layer_statistics(s, null_draws=4, seed=7)
    want = score_embeddings(positional_vectors(s), null_draws=4, seed=7)
    assert (got.toeplitzness, got.toeplitzness_offdiag, got.toeplitzness_null_offdiag, got.toeplitzness_null_std_offdiag) == (
        float(want.toeplitzness), float(want.toeplitzness_offdiag), float(want.null_mean_offdiag), float(want.null_std_offdiag))


def test_constant_states_have_no_positional_vectors_to_score():
    s = layer_statistics(_sums(np.ones((3, 5, 2))), null_draws=0)
    assert np.isnan(s.toeplitzness_offdiag) and np.isnan(s.positional_share) and s.rank90 == 0


def test_rank_summary_on_known_singular_values():
    rng = np.random.default_rng(4)
    u, _ = np.linalg.qr(rng.normal(size=(20, 4)))
    w, _ = np.linalg.qr(rng.normal(size=(8, 4)))
    sing = np.array([3.0, 2.0, 1.0, 0.5])
    v = u @ np.diag(sing) @ w.T
    energy = sing**2  # 9, 4, 1, 0.25: 9 + 4 = 13 of 14.25 is 91 %
    assert rank_summary(v) == (2, pytest.approx(energy.sum() / 9.0, rel=1e-12))
    assert rank_summary(v, fraction=0.95)[0] == 3


def test_probe_plan_is_seeded_and_takes_kept_positions_only():
    kept = np.arange(1, 31)
    a = probe_plan(50, kept, probe_blocks=8, probe_positions=6, seed=3)
    assert a.keys() == probe_plan(50, kept, probe_blocks=8, probe_positions=6, seed=3).keys() and len(a) == 8
    for where in a.values():
        assert len(where) == 6 and set(where) <= set(kept) and list(where) == sorted(where)
    assert len(probe_plan(3, kept, probe_blocks=8, probe_positions=100, seed=0)) == 3


def test_split_is_by_block_and_holds_a_quarter_out():
    train, test = split_blocks(16, seed=0)
    assert len(test) == 4 and not set(train) & set(test) and sorted([*train, *test]) == list(range(16))


def test_probe_reads_a_linear_position_and_not_noise():
    rng = np.random.default_rng(5)
    blocks, k, d = 24, 16, 12
    positions = np.stack([np.sort(rng.choice(np.arange(1, 63), size=k, replace=False)) for _ in range(blocks)])
    direction = rng.normal(size=d)
    planted = positions[..., None] * direction + 0.01 * rng.normal(size=(blocks, k, d))
    p = position_probe(planted.astype(np.float32), positions, 31.5, seed=0)
    assert p.mae < 0.5 < p.mae_baseline and p.order_accuracy > 0.97
    noise = position_probe(rng.normal(size=(blocks, k, d)).astype(np.float32), positions, 31.5, seed=0)
    assert noise.mae > 0.85 * noise.mae_baseline and abs(noise.order_accuracy - 0.5) < 0.15
    assert (noise.train_blocks, noise.test_blocks) == (18, 6)


def test_probe_needs_two_blocks():
    p = position_probe(np.zeros((1, 4, 3), dtype=np.float32), np.arange(4)[None], 1.5)
    assert np.isnan(p.mae) and p.test_blocks == 0


def test_choose_alpha_is_grouped_cross_validation_of_sklearn_ridge():
    """The closed-form path picks the alpha that refitting StandardScaler + Ridge on each fold picks (sklearn's GridSearchCV)."""
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import GridSearchCV, GroupKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from posviz.observe.probe import ALPHAS, choose_alpha

    rng = np.random.default_rng(6)
    groups = np.repeat(np.arange(12), 10)
    x = rng.normal(size=(120, 30))
    y = x[:, :3].sum(axis=1) * 5 + rng.normal(size=120) * 4
    grid = GridSearchCV(make_pipeline(StandardScaler(), Ridge()), {"ridge__alpha": list(ALPHAS)}, cv=GroupKFold(n_splits=3),
                        scoring="neg_mean_absolute_error").fit(x, y, groups=groups)
    assert choose_alpha(x, y, groups) == grid.best_params_["ridge__alpha"]
