"""Per-head scoring: batched closed form vs the dense computation, and the exact permutation null."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from scipy.linalg import toeplitz as make_toeplitz

from posviz import toeplitz as tz
from posviz.positional_scores import PositionalScores, PosvizWarning
from posviz.toeplitz import null as perm
from tests.reference import assert_close


def _factors(seed: int, heads: int = 3, n: int = 37, r: int = 5, trend: float = 1.0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(heads, n, r))
    k = rng.normal(size=(heads, n, r)) + trend * np.sin(np.arange(n) / 4.0)[None, :, None]
    return q, k


def _dense_r2(a: np.ndarray) -> tuple[float, float]:
    """Reference: project on Toeplitz matrices with scipy-free dense code, then R^2."""
    t = tz.toeplitz_projection(a)
    full = 1 - np.sum((a - t) ** 2) / np.sum((a - a.mean()) ** 2)
    off = ~np.eye(a.shape[0], dtype=bool)
    off_mean = a[off].mean()
    off_r2 = 1 - np.sum(((a - t) ** 2)[off]) / np.sum((a[off] - off_mean) ** 2)
    return float(full), float(off_r2)


@pytest.mark.parametrize("method", ["closed", "exact"])
@pytest.mark.parametrize("seed,n,r", [(0, 37, 5), (1, 64, 3), (2, 9, 12), (3, 2, 4)])
def test_batched_closed_form_matches_dense(seed, n, r, method):
    q, k = _factors(seed, n=n, r=r)
    scores = tz.score(PositionalScores.from_factors(q, k), method=method)
    assert scores.r2_method.startswith("closed" if method == "closed" else "two-pass")
    for h in range(q.shape[0]):
        a = q[h] @ k[h].T
        full, off = _dense_r2(a)
        assert scores.toeplitzness[h] == pytest.approx(full, rel=1e-9, abs=1e-9)
        if n > 2:
            assert scores.toeplitzness_offdiag[h] == pytest.approx(off, rel=1e-9, abs=1e-9)
        i, j = np.indices(a.shape)
        means = np.array([a[j - i == d].mean() for d in range(1 - n, n)])
        np.testing.assert_allclose(scores.profiles[h], means, rtol=1e-9, atol=1e-12 * np.abs(a).max())


def test_two_pass_is_accurate_when_a_constant_dominates():
    """A huge common offset c^2 cancels in the closed form; the default two-pass stays exact."""
    q, k = _factors(10, heads=2, n=40, r=3)
    c = 300.0
    qc = np.concatenate([q, np.full((2, 40, 1), c)], axis=2)
    kc = np.concatenate([k, np.full((2, 40, 1), c)], axis=2)
    scores = tz.score(PositionalScores.from_factors(qc, kc))
    for h in range(2):
        a = q[h] @ k[h].T  # the constant does not change R^2: it is removed by both projections
        assert scores.toeplitzness[h] == pytest.approx(_dense_r2(a)[0], rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("mult", [1e-80, 1e90])
def test_extreme_magnitudes_are_rescaled(mult):
    q, k = _factors(4)
    base = tz.score(PositionalScores.from_factors(q, k))
    big = tz.score(PositionalScores.from_factors(q * mult, k * mult))
    np.testing.assert_allclose(big.toeplitzness, base.toeplitzness, rtol=1e-12, atol=1e-12)  # R² in [0, 1]
    np.testing.assert_allclose(big.null_mean, base.null_mean, rtol=1e-12, atol=1e-12)
    assert_close(big.profiles / mult**2, base.profiles, rtol=1e-10)


def _all_permutation_r2(a: np.ndarray) -> np.ndarray:
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PosvizWarning)
        for p in itertools.permutations(range(a.shape[0])):
            b = a[np.ix_(p, p)]
            out.append((tz.toeplitzness(b), tz.toeplitzness(b, exclude_diagonal=True)))
    return np.array(out)


@pytest.mark.parametrize("n", [3, 4, 5, 6])
def test_exact_null_equals_mean_over_every_permutation(n):
    rng = np.random.default_rng(n)
    q, k = rng.normal(size=(n, 3)), rng.normal(size=(n, 3)) + 0.5
    a = q @ k.T
    exhaustive = _all_permutation_r2(a).mean(axis=0)
    for m in (perm.moments_dense(a), perm.moments_factored(q.T, k.T)):
        assert perm.expected_toeplitzness(m) == pytest.approx(exhaustive[0], abs=1e-12)
        assert perm.expected_toeplitzness(m, exclude_diagonal=True) == pytest.approx(exhaustive[1], abs=1e-12)


def test_exact_null_for_an_asymmetric_dense_matrix():
    a = np.random.default_rng(7).normal(size=(6, 6)) + np.arange(6)[:, None]
    exhaustive = _all_permutation_r2(a).mean(axis=0)
    assert perm.expected_toeplitzness(perm.moments_dense(a)) == pytest.approx(exhaustive[0], abs=1e-12)


def test_layer_null_matches_exhaustive_mean():
    q, k = _factors(5, heads=2, n=6, r=2)
    scores = tz.score(PositionalScores.from_factors(q, k))
    for h in range(2):
        exhaustive = _all_permutation_r2(q[h] @ k[h].T).mean(axis=0)
        assert scores.null_mean[h] == pytest.approx(exhaustive[0], abs=1e-12)
        assert scores.null_mean_offdiag[h] == pytest.approx(exhaustive[1], abs=1e-12)


def test_sampled_null_spread_reproduces_explicit_permutations():
    q, k = _factors(6, heads=2, n=30, r=4)
    draws, seed = 7, 11
    scores = tz.score(PositionalScores.from_factors(q, k), null_draws=draws, seed=seed)
    rng = np.random.default_rng(seed)
    orders = [rng.permutation(30) for _ in range(draws)]  # one permutation of E_P per draw, shared by heads
    for h in range(2):
        vals = [tz.toeplitzness((q[h] @ k[h].T)[np.ix_(o, o)]) for o in orders]
        assert scores.null_std[h] == pytest.approx(np.std(vals, ddof=1), rel=1e-9)
    assert "7 seeded permutations" in scores.null_method


def test_offsets_stack_is_exactly_toeplitz_and_has_no_null():
    f = np.random.default_rng(8).normal(size=(3, 2 * 20 - 1))
    scores = tz.score(PositionalScores.from_offsets(f))
    assert np.all(scores.toeplitzness == 1.0) and np.all(scores.toeplitzness_offdiag == 1.0)
    assert np.all(np.isnan(scores.null_mean))
    assert_close(scores.profiles, f, rtol=1e-12)
    # the dense reference agrees (to rounding) on the materialised matrices
    for h in range(3):
        dense = make_toeplitz(f[h, 19::-1], f[h, 19:])  # first column: f(0), f(-1), ...; first row: f(0), f(1), ...
        assert_close(dense, PositionalScores.from_offsets(f).matrix(h), rtol=1e-12)
        assert tz.toeplitzness(dense) == pytest.approx(1.0, abs=1e-12)


def test_rows_are_json_ready():
    q, k = _factors(9, heads=2, n=12)
    rows = tz.score(PositionalScores.from_factors(q, k)).rows(profiles=True)
    assert [r["head"] for r in rows] == [0, 1]
    assert all(isinstance(r["toeplitzness"], float) and len(r["profile"]) == 23 for r in rows)
    assert all(r["peak_offset"] == int(np.argmax(np.array(r["profile"])[11 - 6 : 11 + 7]) - 6) for r in rows)


def test_long_profiles_are_drawn_as_exact_block_means():
    from posviz.plots.heads import _thin_profiles

    k = np.arange(-9, 10)
    prof = np.vstack([k * 1.0, k**2 * 1.0])
    kk, pp, step = _thin_profiles(k, prof, 5)
    assert step == 4
    assert_close(kk, [k[0:4].mean(), k[4:8].mean(), k[8:12].mean(), k[12:16].mean(), k[16:19].mean()], rtol=1e-12)
    assert_close(pp[1], [prof[1, i : i + 4].mean() for i in (0, 4, 8, 12, 16)], rtol=1e-12)
    same = _thin_profiles(k, prof, 100)
    assert same[2] == 1 and same[1] is prof


def test_the_e_p_score_is_the_one_head_case():
    from posviz.toeplitz.result import DICT_FIELDS

    e = np.random.default_rng(12).normal(size=(60, 8)) + np.cos(np.arange(60) / 6)[:, None]
    ep = tz.score_embeddings(e, null_draws=5, seed=2)
    stack = tz.score(PositionalScores.from_factors(e), null_draws=5, seed=2)
    one = stack[0]
    for field in DICT_FIELDS[:8]:
        assert getattr(one, field) == getattr(ep, field), field
        assert getattr(stack, field).shape == (1,)
    d = ep.to_dict()
    assert list(d) == list(DICT_FIELDS)
    assert all(type(d[f]) is float for f in DICT_FIELDS[:8])
    assert (d["normalize"], d["null_draws"], d["seed"]) == ("none", 5, 2)
    assert d["null_method"].startswith("exact mean over all row permutations of E (closed form); sd over 5")
    assert stack.to_dict()["toeplitzness"] == [d["toeplitzness"]]
    assert_close(one.profiles, tz.diagonal_profile(embeddings=e, spread=False).mean, rtol=1e-12)


def test_r2_method_is_decided_in_one_place():
    from posviz.toeplitz.r2 import EXACT_LIMIT

    n = 100
    r_small, r_big = int(EXACT_LIMIT // n**2), int(EXACT_LIMIT // n**2) + 1
    assert tz.r2_method("offsets", n, None, "exact") == "construction"
    assert tz.r2_method("dense", n, None, "auto") == "exact"
    assert tz.r2_method("dense", n, None, "closed") == "closed"
    assert tz.r2_method("factored", n, r_small, "auto") == "exact"
    assert tz.r2_method("factored", n, r_big, "auto") == "checked"
    assert tz.r2_method("factored", n, r_big, "exact") == "exact"
    assert tz.r2_method("factored", n, r_small, "closed") == "closed"
    # a stack reports the decision it was scored by
    q, k = _factors(13, heads=2, n=20, r=3)
    assert tz.score(PositionalScores.from_factors(q, k), method="closed").r2_method.startswith("closed")
    dense = PositionalScores.from_dense(q @ np.swapaxes(k, 1, 2))
    assert tz.score(dense).r2_method.startswith("two-pass")
    assert tz.score(dense, method="closed").r2_method.startswith("closed")
