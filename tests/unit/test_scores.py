"""PositionalScores: every storage form agrees with its dense matrices."""

from __future__ import annotations

import numpy as np
import pytest

from posviz.positional_scores import PositionalScores
from posviz.toeplitz import head_profile, score, toeplitzness
from tests.reference import assert_close


def _stacks():
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(3, 23, 4)), rng.normal(size=(3, 23, 4))
    f = rng.normal(size=(2, 2 * 23 - 1))
    dense = rng.normal(size=(2, 23, 23))
    return [
        PositionalScores.from_factors(q, k),
        PositionalScores.from_offsets(f),
        PositionalScores.from_dense(dense),
    ]


@pytest.mark.parametrize("stack", _stacks(), ids=["factored", "offsets", "dense"])
def test_forms_agree_with_dense(stack):
    full = stack.to_dense()
    assert full.shape == (stack.heads, stack.n, stack.n)
    scores = score(stack)
    got, got_off = scores.toeplitzness, scores.toeplitzness_offdiag
    for h in range(stack.heads):
        assert got[h] == pytest.approx(toeplitzness(full[h]), rel=1e-9, abs=1e-9)
        assert got_off[h] == pytest.approx(toeplitzness(full[h], exclude_diagonal=True), rel=1e-9, abs=1e-9)
        prof = head_profile(stack, h, block=5)
        for k in (-22, -1, 0, 4, 22):
            d = np.diagonal(full[h], k)
            assert prof.mean[k + 22] == pytest.approx(d.mean(), rel=1e-9, abs=1e-12)
            assert prof.std[k + 22] == pytest.approx(d.std(), rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("stack", _stacks(), ids=["factored", "offsets", "dense"])
def test_pooled_equals_block_means(stack):
    pooled, edges = stack.pooled(5)
    full = stack.to_dense()
    assert pooled.shape == (stack.heads, 5, 5)
    for h in range(stack.heads):
        for a in range(5):
            for b in range(5):
                blk = full[h, edges[a] : edges[a + 1], edges[b] : edges[b + 1]]
                assert pooled[h, a, b] == pytest.approx(blk.mean(), rel=1e-9, abs=1e-12)


def test_offsets_form_is_exactly_toeplitz():
    f = np.r_[np.arange(10.0), np.arange(9.0)[::-1]][None]
    stack = PositionalScores.from_offsets(f)
    m = stack.matrix(0)
    assert m[0, 3] == f[0, 10 + 2]  # F[i, j] = f(j - i), k = 3 at index k + n - 1
    assert score(stack).toeplitzness[0] == pytest.approx(1.0, abs=1e-12)


def test_embeddings_stack_is_gram():
    e = np.random.default_rng(2).normal(size=(12, 5))
    stack = PositionalScores.from_embeddings(e, normalize="cosine")
    unit = e / np.linalg.norm(e, axis=1, keepdims=True)
    assert_close(stack.matrix(), unit @ unit.T, rtol=1e-12)
