"""Attention statistics from streaming sums (posviz/observe/statistics.py) against direct and exhaustive computations."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from posviz.observe.statistics import (
    LayerSums,
    layer_statistics,
    masked_toeplitzness,
    positional_share,
    positional_shares,
    row_diagonal_sums,
    support_mask,
    toeplitz_null_mean,
)
from posviz.toeplitz import toeplitzness
from posviz.toeplitz.diagonals import diagonal_sums_array as diagonal_sums


def _softmax_rows(logits: np.ndarray, causal: bool) -> np.ndarray:
    n = logits.shape[-1]
    x = np.where(support_mask(n, causal), logits, -np.inf)
    x = np.exp(x - x.max(axis=-1, keepdims=True))
    return x / x.sum(axis=-1, keepdims=True)


def _sums(blocks: np.ndarray) -> LayerSums:
    """``blocks``: (B, heads, n, n)."""
    return LayerSums(blocks=blocks.shape[0], total=blocks.sum(axis=0), row_sq=(blocks**2).sum(axis=(0, 3)),
                     row_sum_sq=(blocks.sum(axis=3) ** 2).sum(axis=0))


def _r2_direct(a: np.ndarray, mask: np.ndarray) -> float:
    """R^2 over the masked entries, with the projection built entry by entry."""
    n = a.shape[0]
    t = np.zeros_like(a)
    for k in range(-(n - 1), n):
        cells = [(i, i + k) for i in range(n) if 0 <= i + k < n and mask[i, i + k]]
        if cells:
            m = np.mean([a[c] for c in cells])
            for c in cells:
                t[c] = m
    x = a[mask]
    return 1 - ((x - t[mask]) ** 2).sum() / ((x - x.mean()) ** 2).sum()


@pytest.mark.parametrize("shape", [(2, 5, 5), (3, 2, 4, 4), (1, 1), (2, 2)])
def test_diagonal_sums_match_numpy_trace(shape):
    """The one dense kernel (toeplitz.diagonals) on stacks of any leading shape, n = 1 included."""
    a = np.random.default_rng(0).normal(size=shape)
    n = shape[-1]
    got = diagonal_sums(a)
    assert got.shape == (*shape[:-2], 2 * n - 1)
    for k in range(-(n - 1), n):
        np.testing.assert_allclose(got[..., k + n - 1], np.trace(a, offset=k, axis1=-2, axis2=-1), atol=1e-12)
    np.testing.assert_array_equal(diagonal_sums(np.ones((n, n), dtype=bool)), n - np.abs(np.arange(1 - n, n)))


@pytest.mark.parametrize("off", [False, True])
def test_masked_toeplitzness_full_mask_is_the_engine(off):
    a = np.random.default_rng(1).random((9, 9))
    mask = support_mask(9, False) & ~np.eye(9, dtype=bool) if off else support_mask(9, False)
    assert masked_toeplitzness(a, mask) == pytest.approx(toeplitzness(a, exclude_diagonal=off), abs=1e-12)


@pytest.mark.parametrize("off", [False, True])
def test_masked_toeplitzness_causal_is_direct(off):
    a = _softmax_rows(np.random.default_rng(2).normal(size=(8, 8)), causal=True)
    mask = support_mask(8, True) & (~np.eye(8, dtype=bool) if off else True)
    assert masked_toeplitzness(a, mask) == pytest.approx(_r2_direct(a, mask), abs=1e-12)
    # the masked zeros above the diagonal would inflate the unmasked score
    assert toeplitzness(a) > masked_toeplitzness(a, support_mask(8, True)) + 0.05


def _row_shuffles(a: np.ndarray, mask: np.ndarray):
    """Every matrix obtained by permuting each row's entries within its part of ``mask`` (others fixed)."""
    rows = []
    for i in range(a.shape[0]):
        cols = np.flatnonzero(mask[i])
        options = []
        for perm in itertools.permutations(cols):
            r = a[i].copy()
            r[cols] = a[i, list(perm)]
            options.append(r)
        rows.append(options)
    for choice in itertools.product(*rows):
        yield np.stack(choice)


@pytest.mark.parametrize("causal,n,off", [(False, 3, False), (False, 3, True), (True, 4, False), (True, 4, True)])
def test_toeplitz_null_mean_is_the_exhaustive_mean(causal, n, off):
    a = _softmax_rows(np.random.default_rng(3).normal(size=(n, n)) * 2, causal)
    mask = support_mask(n, causal) & (~np.eye(n, dtype=bool) if off else True)
    values = [masked_toeplitzness(s, mask) for s in _row_shuffles(a, mask)]
    assert toeplitz_null_mean(a, mask) == pytest.approx(np.mean(values), abs=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_positional_share_from_sums_is_direct(causal):
    rng = np.random.default_rng(4)
    blocks = _softmax_rows(rng.normal(size=(6, 2, 7, 7)) * 2, causal)
    mask = support_mask(7, causal)
    for h in range(2):
        a = blocks[:, h]
        with np.errstate(invalid="ignore"):  # offsets outside a causal support: 0 / 0
            f = diagonal_sums(np.where(mask, a.sum(axis=0), 0)) / (6 * diagonal_sums(mask.astype(float)))
        k = np.arange(7)[None, :] - np.arange(7)[:, None] + 6
        x = a[:, mask]
        resid = ((x - f[k][mask][None]) ** 2).sum()
        direct = 1 - resid / ((x - x.mean()) ** 2).sum()
        assert positional_share(_sums(blocks), h, mask)[0] == pytest.approx(direct, abs=1e-12)


@pytest.mark.parametrize("causal,n,b", [(False, 3, 1), (True, 3, 2), (True, 4, 1)])
def test_positional_share_null_is_the_exhaustive_mean(causal, n, b):
    blocks = _softmax_rows(np.random.default_rng(5).normal(size=(b, 1, n, n)) * 2, causal)
    mask = support_mask(n, causal)
    per_block = [list(_row_shuffles(blocks[i, 0], mask)) for i in range(b)]
    values = [positional_share(_sums(np.stack(c)[:, None]), 0, mask)[0] for c in itertools.product(*per_block)]
    assert positional_share(_sums(blocks), 0, mask)[1] == pytest.approx(np.mean(values), abs=1e-12)


def test_layer_statistics_of_a_previous_token_pattern():
    n = 12
    a = np.eye(n, k=-1)
    a[0, 0] = 1.0  # the first query has no previous token: it attends to itself
    blocks = np.stack([a, a])[:, None]
    for causal in (False, True):
        s = layer_statistics(_sums(blocks), causal)
        assert s.profile_peak[0] == -1
        assert s.toeplitzness_offdiag[0] == pytest.approx(1.0, abs=1e-12)
        mask = support_mask(n, causal)
        assert s.toeplitzness[0] == pytest.approx(_r2_direct(a, mask), abs=1e-12)
        assert s.positional_share[0] == pytest.approx(_r2_direct(a, mask), abs=1e-12)  # identical blocks: share = R^2 of A
        assert s.null_mean_offdiag[0] < 0.2
        assert s.sink_mass[0] == pytest.approx(1 / (n - 1))
        assert np.isnan(s.profiles[0, n:]).all() == causal


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("exclude_diagonal", [False, True])
def test_row_diagonal_sums_match_the_dense_sums(causal, exclude_diagonal):
    """The O(n) prefix-sum path for the standard supports, and the dense fallback for any other mask."""
    rng = np.random.default_rng(11)
    for n in (1, 2, 7):
        values = rng.random(n)
        mask = support_mask(n, causal) & ~(np.eye(n, dtype=bool) if exclude_diagonal else np.zeros((n, n), dtype=bool))
        want = diagonal_sums(np.where(mask, values[:, None], 0.0))
        np.testing.assert_allclose(row_diagonal_sums(values, mask), want, rtol=1e-12, atol=1e-12)
    odd = rng.random((6, 6)) < 0.5  # not a standard support: the dense path
    values = rng.random(6)
    np.testing.assert_allclose(row_diagonal_sums(values, odd), diagonal_sums(np.where(odd, values[:, None], 0.0)), atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_streamed_sums_are_the_float64_sums_of_the_maps(causal):
    # posviz attention's sums, added batch by batch and head by head from float32 maps, against numpy's float64 sums
    # of every block at once: near-uniform maps (a random model's) make the positional share cancel, so the sums must
    # keep float64 precision, not the maps' float32
    torch = pytest.importorskip("torch")
    from posviz.observe.accumulate import AttentionSums

    n, gen = 40, torch.Generator().manual_seed(0)
    scores = torch.randn(7, 3, n, n, generator=gen) * 0.01
    if causal:
        scores = scores + torch.triu(torch.full((n, n), float("-inf")), 1)
    maps = torch.softmax(scores, dim=-1)
    sums = AttentionSums([0])
    for start in (0, 3, 5):  # batches of 3, 2 and 2 blocks
        sums.add(0, maps[start : {0: 3, 3: 5, 5: 7}[start]])
    sums.blocks = 7
    got, want = sums.layer(0), _sums(maps.double().numpy())
    for name in ("total", "row_sq", "row_sum_sq"):
        np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=1e-13, atol=0)
    mask = support_mask(n, causal)
    for h in range(3):
        assert positional_share(got, h, mask) == pytest.approx(positional_share(want, h, mask), rel=1e-8)


@pytest.mark.parametrize("causal", [False, True])
def test_stacked_heads_score_as_one_head_at_a_time(causal):
    """Every head of a layer at once (how layer_statistics calls them) equals each head alone, constant heads included."""
    rng = np.random.default_rng(8)
    blocks = _softmax_rows(rng.normal(size=(5, 4, 9, 9)) * 2, causal)
    blocks[:, 2] = _softmax_rows(np.zeros((5, 9, 9)), causal)  # uniform rows: constant on each row's support
    sums, mask = _sums(blocks), support_mask(9, causal)
    for support in (mask, mask & ~np.eye(9, dtype=bool)):
        stacked_r2, stacked_null = masked_toeplitzness(sums.mean, support), toeplitz_null_mean(sums.mean, support)
        assert stacked_r2.shape == stacked_null.shape == (4,)
        for h in range(4):
            assert stacked_r2[h] == pytest.approx(masked_toeplitzness(sums.mean[h], support), abs=1e-14)
            assert stacked_null[h] == pytest.approx(toeplitz_null_mean(sums.mean[h], support), abs=1e-14)
    if not causal:  # uniform rows over all n: a constant matrix (its mean over blocks up to rounding), R^2 = 1
        assert stacked_r2[2] == stacked_null[2] == 1.0
    assert isinstance(masked_toeplitzness(sums.mean[0], mask), float)
    share, null = positional_shares(sums, mask)
    one_at_a_time = np.array([positional_share(sums, h, mask) for h in range(4)])
    np.testing.assert_allclose(np.stack([share, null], axis=1), one_at_a_time, rtol=0, atol=1e-14)
    from contextlib import nullcontext

    from posviz.positional_scores import PosvizWarning

    with nullcontext() if causal else pytest.warns(PosvizWarning, match="zero variance"):  # the engine scores the constant head
        stats = layer_statistics(sums, causal)
    np.testing.assert_array_equal(stats.positional_share, share)
    np.testing.assert_array_equal(stats.null_mean_offdiag, toeplitz_null_mean(sums.mean, mask & ~np.eye(9, dtype=bool)))
