"""Tiled attention statistics (posviz.observe.tiled) against a dense reference: the softmax of explicit logits.

The reference forms every ``n x n`` map in float64 and scores it with the dense code of
``posviz.observe.statistics`` and ``posviz.extrapolation.rows`` (and direct formulas for the new statistics);
the tiled path never forms one. Tile sizes that do not divide ``n`` and windows cut tiles in every way.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from posviz.observe.statistics import LayerSums
from posviz.observe.statistics import layer_statistics as dense_statistics
from posviz.observe.tiled import AttentionInputs, Support, TiledSums, accumulate, layer_statistics
from posviz.observe.tiled.choice import KERNEL_ENV
from posviz.observe.tiled.sums import distance_edges

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc): the compiled kernel cannot be built here")


def _inputs(n: int, causal: bool, window: int | None, *, heads: int = 4, kv: int = 2, batch: int = 2, bias: bool = True,
            softcap: float | None = None, seed: int = 0) -> tuple[AttentionInputs, torch.Tensor]:
    """Random inputs (grouped-query heads, a dense additive bias) and the dense float64 attention they give."""
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(batch, heads, n, 8, generator=g), torch.randn(batch, kv, n, 8, generator=g)
    extra = torch.randn(batch, heads, n, n, generator=g, dtype=torch.float64) * 0.7 if bias else None  # one per block
    support = Support(n, causal, window)
    inputs = AttentionInputs(q, k, 0.4, support, bias=(lambda b, i0, i1, j0, j1: extra[b, :, i0:i1, j0:j1]) if bias else None,
                             softcap=softcap)
    s = (q.double() @ k.repeat_interleave(heads // kv, dim=1).double().transpose(-1, -2)) * 0.4
    if softcap is not None:
        s = torch.tanh(s / softcap) * softcap
    if bias:
        s = s + extra
    s = s.masked_fill(~torch.as_tensor(support.dense()), float("-inf"))
    return inputs, torch.softmax(s, dim=-1)


def _spans(a: torch.Tensor, target: float) -> np.ndarray:
    """Per head, the mean over blocks and queries 1 … n-1 of the smallest D with mass(|j - i| <= D) >= target."""
    n = a.shape[-1]
    distance = (torch.arange(n)[None, :] - torch.arange(n)[:, None]).abs()
    within = torch.stack([(a * (distance <= d)).sum(-1) for d in range(n)], dim=-1)
    return (within < target - 1e-12).sum(-1)[:, :, 1:].double().mean(dim=(0, 2)).numpy()


@pytest.mark.parametrize(("causal", "window", "tile", "softcap", "together"), [
    (False, None, 16, None, 1), (True, None, 16, None, 2), (True, None, 7, 5.0, 1), (False, None, 64, None, 2),
    (True, 9, 16, None, 2), (False, 9, 5, None, 1), (True, 60, 16, None, 1),
])
@pytest.mark.parametrize("kernel", ["torch", pytest.param("native", marks=needs_cc)])
def test_tiles_give_the_statistics_of_the_dense_maps(causal, window, tile, softcap, together, kernel, monkeypatch):
    """The PyTorch tiles with an additive term (one per block), and the compiled CPU kernel (which takes none)."""
    monkeypatch.setenv(KERNEL_ENV, kernel)
    n = 50  # below 64: every distance has a bin of its own, so the spans are exact too
    inputs, a = _inputs(n, causal, window, softcap=softcap, bias=kernel == "torch")  # two blocks: one tile or two
    support = inputs.support
    st = layer_statistics(accumulate(inputs, tile=tile, blocks_per_tile=together), support)
    mask = torch.as_tensor(support.dense())
    blocks = a.shape[0]
    if window is None:  # the dense statistics of posviz attention know the two plain supports
        ref = dense_statistics(LayerSums(blocks, a.sum(0).numpy(), (a * a).sum((0, 3)).numpy(), (a.sum(-1) ** 2).sum(0).numpy()),
                               causal)
        for name in ("toeplitzness", "toeplitzness_offdiag", "null_mean", "null_mean_offdiag", "positional_share",
                     "positional_share_null", "sink_mass"):
            np.testing.assert_allclose(getattr(st, name), getattr(ref, name), atol=1e-7, err_msg=name)
        np.testing.assert_allclose(st.profiles, ref.profiles, atol=1e-8)
        np.testing.assert_array_equal(st.profile_peak, ref.profile_peak)
    assert st.map_exact
    entropy = -(a * torch.log(a.clamp_min(1e-300))).sum(-1).mean(0)
    keys = mask.sum(-1).double()
    np.testing.assert_allclose(st.entropy, entropy[:, 1:].mean(-1).numpy(), atol=1e-7)
    np.testing.assert_allclose(st.entropy_normalised, (entropy / torch.log(keys))[:, 1:].mean(-1).numpy(), atol=1e-7)
    np.testing.assert_allclose(st.max_weight, a.amax(-1).mean(0)[:, 1:].mean(-1).numpy(), atol=1e-7)
    np.testing.assert_allclose(st.sink_mass, a[:, :, 1:, 0].mean((0, 2)).numpy(), atol=1e-7)
    np.testing.assert_allclose(st.received, (a.sum((0, 2)) / (blocks * mask.sum(0))).numpy(), atol=1e-7)
    np.testing.assert_allclose(st.span50, _spans(a, 0.5), atol=1e-12)
    np.testing.assert_allclose(st.span90, _spans(a, 0.9), atol=1e-12)
    distance = (torch.arange(n)[None, :] - torch.arange(n)[:, None]).abs()
    by_distance = torch.stack([(a * (distance == d)).sum((0, 2, 3)) for d in range(n)], dim=-1)
    np.testing.assert_allclose(st.distance_mass, (by_distance / by_distance.sum(-1, keepdim=True)).numpy(), atol=1e-8)


def test_beyond_the_exact_distances_a_span_stays_inside_its_bin():
    n = 300
    inputs, a = _inputs(n, True, None, heads=2, kv=2, batch=1, bias=False, seed=3)
    st = layer_statistics(accumulate(inputs, tile=64), inputs.support)
    exact = _spans(a, 0.9)
    edges = distance_edges(n)
    widest = np.diff(edges).max()
    assert np.all(np.abs(st.span90 - exact) <= widest)
    assert np.all(np.diff(edges[:65]) == 1) and edges[-1] == n


@pytest.mark.parametrize("causal", [False, True])
def test_beyond_the_map_size_toeplitzness_scores_the_block_averaged_map(causal):
    n, m = 96, 24  # blocks of 4 positions
    inputs, a = _inputs(n, causal, None, heads=2, kv=1, batch=2, seed=5)
    sums = accumulate(inputs, tile=20, map_size=m)
    st = layer_statistics(sums, inputs.support)
    assert not st.map_exact and st.map_size == m
    mask = torch.as_tensor(inputs.support.dense()).double()
    pool = torch.nn.functional.avg_pool2d
    cells = pool(a.sum(0)[None], 4, divisor_override=1)[0] / pool(mask[None, None], 4, divisor_override=1)[0, 0].clamp_min(1) / 2
    from posviz.observe.statistics import masked_toeplitzness

    grid_mask = (pool(mask[None, None], 4)[0, 0] > 0).numpy()
    np.testing.assert_allclose(st.toeplitzness, masked_toeplitzness(cells.numpy(), grid_mask), atol=1e-8)
    # the approximation against the exact Toeplitzness of the full mean map
    exact = layer_statistics(accumulate(inputs, tile=20, map_size=n), inputs.support)
    assert exact.map_exact
    assert np.all(np.abs(st.toeplitzness - exact.toeplitzness) < 0.25)
    # the statistics that need no map do not depend on its size
    np.testing.assert_allclose(st.positional_share, exact.positional_share, atol=1e-12)
    np.testing.assert_allclose(st.entropy, exact.entropy, atol=1e-12)


def test_sums_of_two_processes_merge_into_the_sums_of_all_blocks():
    inputs, _ = _inputs(40, True, None, batch=4, seed=7)
    both = accumulate(inputs, tile=16, blocks_per_tile=3)  # a chunk of 3 blocks and one of 1
    half = [accumulate(AttentionInputs(inputs.query[s], inputs.key[s], inputs.scale, inputs.support,
                                       bias=lambda b, i0, i1, j0, j1, s=s: inputs.bias(b + s.start, i0, i1, j0, j1)), tile=16)
            for s in (slice(0, 2), slice(2, 4))]
    merged = half[0].merge(half[1])
    assert merged.blocks == both.blocks == 4
    for name, value in both.numpy().items():
        np.testing.assert_allclose(merged.numpy()[name], value, atol=1e-12, err_msg=name)
    with pytest.raises(ValueError, match="cannot merge"):
        merged.merge(TiledSums.zeros(4, 41))


@pytest.mark.parametrize("tile", [0, -3, 2.5, True])
def test_a_tile_size_that_is_not_a_positive_integer_is_refused(tile):
    inputs, _ = _inputs(8, True, None)
    with pytest.raises(ValueError, match="positive integer"):
        accumulate(inputs, tile=tile)


@pytest.mark.parametrize(("n", "causal", "window"), [(1, True, None), (7, False, None), (7, True, 3), (12, False, 4), (12, True, 40)])
def test_the_support_rule_counts_what_its_dense_mask_holds(n, causal, window):
    support = Support(n, causal, window)
    mask = support.dense()
    from posviz.toeplitz.diagonals import diagonal_sums_array

    np.testing.assert_array_equal(support.diagonal_counts(), diagonal_sums_array(mask.astype(float)))
    np.testing.assert_array_equal(support.keys_seen(), mask.sum(1))
    np.testing.assert_array_equal(support.queries_seeing(), mask.sum(0))
    first, stop = support.key_ranges()
    for i in range(n):  # each query's keys are the one run first[i] … stop[i] - 1
        np.testing.assert_array_equal(np.flatnonzero(mask[i]), np.arange(first[i], stop[i]))
    lo, hi = support.band()
    offsets = np.flatnonzero(diagonal_sums_array(mask.astype(float))) - (n - 1)
    assert (lo, hi) == (offsets.min(), offsets.max())
    values = np.arange(1.0, n + 1)
    np.testing.assert_allclose(support.row_sums_by_offset(values), diagonal_sums_array(np.where(mask, values[:, None], 0.0)))
    for i0, i1, j0, j1 in [(0, n, 0, n), (0, 1, n - 1, n), (n // 2, n, 0, max(1, n // 3))]:
        assert support.touches(i0, i1, j0, j1) == bool(mask[i0:i1, j0:j1].any())


def test_the_sink_rate_counts_heads_over_epsilon_and_received_buckets_average_positions():
    inputs, _ = _inputs(30, True, None, heads=4, kv=4, seed=11)
    st = layer_statistics(accumulate(inputs, tile=8), inputs.support)
    assert st.sink_rate(0.0) == 1.0 and st.sink_rate(1.0) == 0.0
    assert st.sink_rate(float(np.median(st.sink_mass))) == pytest.approx(np.mean(st.sink_mass > np.median(st.sink_mass)))
    starts, curve = st.received_profile(points=7)
    assert curve.shape == (4, 7) and starts[0] == 0
    np.testing.assert_allclose(curve[:, 0], st.received[:, starts[0]:starts[1]].mean(-1))


@pytest.mark.parametrize(("n", "causal", "window", "m"), [(100, True, None, 7), (300, False, 40, 64), (513, True, 17, 512),
                                                         (77, False, None, 77), (1000, True, 300, 16), (5, True, None, 512),
                                                         (64, False, 200, 9), (70, True, 3, 300), (1, True, None, 4)])
def test_block_counts_are_the_mask_summed_over_each_cell(n, causal, window, m):
    """The closed form (a band of diagonals counted from each cell's corners) against the dense mask summed cell by cell."""
    support = Support(n, causal, window)
    block = (np.arange(n) * m) // n
    expected = np.zeros((m, m))
    np.add.at(expected, (block[:, None], block[None, :]), support.dense().astype(float))
    counts = support.block_counts(m)
    np.testing.assert_array_equal(counts, expected)
    assert counts.sum() == support.size() and not counts.flags.writeable


@pytest.mark.parametrize(("n", "causal", "window", "m"), [(12, True, None, 12), (12, False, 5, 12), (40, True, None, 8), (40, True, 9, 8),
                                                          (40, False, None, 8)])
def test_the_map_scores_of_both_variants_equal_each_scored_on_its_own(n, causal, window, m):
    """The shared sums (diagonal zeroed, then added back) against each variant's own masked scores, a head of
    constant cells included (the two-pass branch)."""
    from posviz.observe.statistics import masked_toeplitzness, toeplitz_null_mean
    from posviz.observe.tiled.statistics import _map_cells, _map_scores

    support = Support(n, causal, window)
    exact = m == n
    mask, off = _map_cells(support, m, exact)[:2]
    grid = np.random.default_rng(5).random((3, m, m)) * mask
    grid[1] = 0.25 * (mask if exact else support.block_counts(m))  # constant cells: 0.125 after the means
    mean, (r2, r2_off, null, null_off) = _map_scores(grid.copy(), exact, support, n, 2)
    expected = grid / 2 if exact else grid / (2 * np.maximum(support.block_counts(m), 1.0))
    np.testing.assert_allclose(mean, expected, rtol=1e-14)
    for got, want in [(r2, masked_toeplitzness(expected, mask)), (r2_off, masked_toeplitzness(expected, off)),
                      (null, toeplitz_null_mean(expected, mask)), (null_off, toeplitz_null_mean(expected, off))]:
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    assert r2[1] == pytest.approx(1.0, abs=1e-12) and r2_off[1] == pytest.approx(1.0, abs=1e-12)  # a Toeplitz map
