"""Linear probes of position on a sample of hidden states: absolute position (ridge) and order of two positions (logistic).

After Wang & Chen (2020) and Haviv et al. (2022), on held-out *blocks*: the sampled
blocks (:func:`posviz.observe.hidden_sums.probe_plan`) are split, seeded, into
training blocks (three quarters) and test blocks, so no test block lends a single
state to the fit.

* **Absolute position**: ``StandardScaler`` + ``Ridge`` on the states of the training
  blocks predicting the position index; ``alpha`` chosen from a fixed grid by
  block-grouped 3-fold cross-validation (mean absolute error; each fold's ridge paths for
  every ``alpha`` from one eigendecomposition, :func:`choose_alpha`) when there are at least 3 training
  blocks (else ``alpha = 1``). Reported: the mean absolute error on the test
  blocks, in positions, beside the error of always predicting the middle of the kept range.
* **Which comes first**: ``StandardScaler`` + ``LogisticRegression`` on the difference
  ``h[b, i] - h[b, j]`` of two sampled positions of the same block, labelled ``i < j``
  (pairs drawn seeded, each in a random order, so the classes are balanced); accuracy on
  the test blocks' pairs (chance: 0.5).

Everything is deterministic given the seed (scikit-learn's solvers used here draw nothing).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Ridge penalties tried by the absolute-position probe.
ALPHAS = tuple(10.0 ** np.arange(-2, 5))
#: Pairs drawn per block for the order probe.
PAIRS_PER_BLOCK = 64


@dataclass(frozen=True)
class ProbeResult:
    """Probe scores of one layer (NaN when the sample has fewer than 2 blocks)."""

    mae: float
    mae_baseline: float
    order_accuracy: float
    train_blocks: int
    test_blocks: int


def split_blocks(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the training and test blocks among ``count`` sampled blocks (a quarter, at least one, for test)."""
    order = np.random.default_rng(seed).permutation(count)
    test = max(1, count // 4)
    return np.sort(order[test:]), np.sort(order[:test])


def _pairs(positions: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per block, up to :data:`PAIRS_PER_BLOCK` pairs of sampled slots ``(a, b)`` with distinct positions, and labels."""
    k = positions.shape[1]
    a_all, b_all = np.triu_indices(k, 1)
    take = min(PAIRS_PER_BLOCK, len(a_all))
    blocks, first, second = [], [], []
    for blk in range(positions.shape[0]):
        pick = rng.choice(len(a_all), size=take, replace=False)
        flip = rng.random(take) < 0.5
        a, b = np.where(flip, b_all[pick], a_all[pick]), np.where(flip, a_all[pick], b_all[pick])
        blocks.append(np.full(take, blk))
        first.append(a)
        second.append(b)
    return np.concatenate(blocks), np.concatenate(first), np.concatenate(second)


def choose_alpha(x: np.ndarray, y: np.ndarray, groups: np.ndarray) -> float:
    """The ridge penalty of :data:`ALPHAS` with the least mean absolute error over block-grouped 3-fold cross-validation.

    Each fold standardises its training part ``A`` and solves ridge regression for every
    ``alpha`` from one eigendecomposition ``A^T A = V diag(l) V^T``
    (``w = V diag(1 / (l + alpha)) V^T A^T (y - mean y)``): what ``StandardScaler`` +
    ``Ridge(alpha)`` fit, without refitting per ``alpha``.
    """
    from sklearn.model_selection import GroupKFold
    from sklearn.preprocessing import StandardScaler

    alphas = np.asarray(ALPHAS)
    errors = np.zeros(len(alphas))
    for train, valid in GroupKFold(n_splits=3).split(x, y, groups):
        scaler = StandardScaler().fit(x[train])
        a, b = scaler.transform(x[train]), scaler.transform(x[valid])
        mean = y[train].mean()
        lam, v = np.linalg.eigh(a.T @ a)
        vty = v.T @ (a.T @ (y[train] - mean))
        weights = v @ (vty[:, None] / (np.maximum(lam, 0.0)[:, None] + alphas[None, :]))  # (d, alphas)
        errors += np.abs(b @ weights + mean - y[valid][:, None]).sum(axis=0)
    return float(alphas[int(np.argmin(errors))])


def position_probe(states: np.ndarray, positions: np.ndarray, middle: float, *, seed: int = 0) -> ProbeResult:
    """Absolute-position and order probes of one layer (see the module docstring).

    Parameters
    ----------
    states
        ``(blocks, k, d)`` hidden states of the sampled blocks at their sampled positions.
    positions
        ``(blocks, k)`` the position of each state.
    middle
        The constant prediction of the baseline (the middle of the kept positions).
    seed
        Seed of the block split and of the pairs.
    """
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    count = states.shape[0]
    nan = float("nan")
    if count < 2 or states.shape[1] < 2:
        return ProbeResult(nan, nan, nan, count, 0)
    train, test = split_blocks(count, seed)
    x = states.astype(np.float64)
    d = x.shape[2]
    xt, yt, gt = x[train].reshape(-1, d), positions[train].reshape(-1).astype(float), np.repeat(train, states.shape[1])
    alpha = choose_alpha(xt, yt, gt) if len(train) >= 3 else 1.0
    ridge = make_pipeline(StandardScaler(), Ridge(alpha=alpha)).fit(xt, yt)
    y_test = positions[test].reshape(-1).astype(float)
    mae = float(np.abs(ridge.predict(x[test].reshape(-1, d)) - y_test).mean())
    baseline = float(np.abs(y_test - middle).mean())

    rng = np.random.default_rng(seed + 1)

    def pair_set(which: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        blk, a, b = _pairs(positions[which], rng)
        diff = x[which][blk, a] - x[which][blk, b]
        return diff, (positions[which][blk, a] < positions[which][blk, b]).astype(int)

    (xa, ya), (xb, yb) = pair_set(train), pair_set(test)
    if len(np.unique(ya)) < 2:
        accuracy = nan
    else:
        order = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))
        order.fit(xa, ya)
        accuracy = float((order.predict(xb) == yb).mean())
    return ProbeResult(mae, baseline, accuracy, len(train), len(test))
